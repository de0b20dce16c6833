// http.c - one Hub HTTP request over libcurl, header parsing, retries.
//
// Redirects are followed here, hop by hop, not by libcurl: the token goes
// only to URLs with the endpoint's origin, so a 302 to a CDN host never
// carries it (docs/ecosystem.md §1.1). Retries cover transport errors and
// 408/429/5xx with exponential backoff, honouring Retry-After / RateLimit.
// Every hop must be http(s): libcurl is limited to those protocols and a
// Location with another scheme (file://, gopher://, ...) is refused before it
// is fetched. Transfers slower than hub->low_speed for hub->read_timeout
// seconds are cut; osc_http_request keeps each request, retries and waits
// included, within hub->deadline.
// Refuses: bodies over OSC_BUF_MAX in memory, more than 10 redirects.
#include "hub/hub-internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

#define MAX_REDIRECTS 10

void osc_http_resp_free(struct osc_http_resp * r) {
    char ** fields[] = { &r->etag,       &r->linked_etag,   &r->repo_commit,   &r->location,
                         &r->error_code, &r->error_message, &r->request_id,    &r->content_range,
                         &r->link_next,  &r->retry_after,   &r->ratelimit,     &r->final_url };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        free(*fields[i]);
        *fields[i] = NULL;
    }
    osc_buf_free(&r->body);
    r->status         = 0;
    r->content_length = -1;
    r->linked_size    = -1;
}

void osc_http_resp_reset(struct osc_http_resp * r) {
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    r->linked_size    = -1;
}

static void set_field(char ** f, const char * v, size_t n) {
    free(*f);
    *f = strndup(v, n);
}

// Extracts the URL of `rel="next"` from a Link header value.
static void parse_link(struct osc_http_resp * r, const char * v, size_t n) {
    const char * end = v + n;
    const char * p   = v;
    while (p < end) {
        const char * lt = memchr(p, '<', (size_t) (end - p));
        if (!lt) {
            return;
        }
        const char * gt = memchr(lt, '>', (size_t) (end - lt));
        if (!gt) {
            return;
        }
        const char * comma = memchr(gt, ',', (size_t) (end - gt));
        const char * stop  = comma ? comma : end;
        const char * rel   = NULL;
        for (const char * q = gt; q + 10 <= stop; q++) {
            if (!strncasecmp(q, "rel=\"next\"", 10) || !strncasecmp(q, "rel=next", 8)) {
                rel = q;
                break;
            }
        }
        if (rel) {
            set_field(&r->link_next, lt + 1, (size_t) (gt - lt - 1));
            return;
        }
        p = stop + 1;
    }
}

void osc_http_parse_header(struct osc_http_resp * r, const char * line, size_t len) {
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n')) {
        len--;
    }
    if (len >= 5 && !strncmp(line, "HTTP/", 5)) {
        struct osc_buf keep = r->body;
        int64_t        w    = r->written;
        int            rs = r->restarted, we = r->write_errno;
        char *         fu = r->final_url;
        r->final_url      = NULL;
        r->body           = (struct osc_buf) { 0 };
        osc_http_resp_free(r);
        r->body        = keep;
        r->written     = w;
        r->restarted   = rs;
        r->write_errno = we;
        r->final_url   = fu;
        // The status code is the digits after the first space; libcurl's
        // header lines are not NUL-terminated, so parse within len.
        const char * sp     = memchr(line, ' ', len);
        long         status = 0;
        for (const char * c = sp ? sp + 1 : line + len; c < line + len && *c >= '0' && *c <= '9'; c++) {
            status = status * 10 + (*c - '0');
            if (status > 999) {
                status = 0; // not an HTTP status code
                break;
            }
        }
        r->status = status;
        return;
    }
    const char * colon = memchr(line, ':', len);
    if (!colon) {
        return;
    }
    size_t       klen = (size_t) (colon - line);
    const char * v    = colon + 1;
    size_t       vlen = len - klen - 1;
    while (vlen && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t')) {
        vlen--;
    }
#define IS(name) (klen == sizeof(name) - 1 && !strncasecmp(line, name, klen))
    if (IS("etag")) {
        set_field(&r->etag, v, vlen);
    } else if (IS("x-linked-etag")) {
        set_field(&r->linked_etag, v, vlen);
    } else if (IS("x-repo-commit")) {
        set_field(&r->repo_commit, v, vlen);
    } else if (IS("location")) {
        set_field(&r->location, v, vlen);
    } else if (IS("x-error-code")) {
        set_field(&r->error_code, v, vlen);
    } else if (IS("x-error-message")) {
        set_field(&r->error_message, v, vlen);
    } else if (IS("x-request-id") || ((IS("x-amzn-trace-id") || IS("x-amz-cf-id")) && !r->request_id)) {
        set_field(&r->request_id, v, vlen);
    } else if (IS("content-range")) {
        set_field(&r->content_range, v, vlen);
    } else if (IS("retry-after")) {
        set_field(&r->retry_after, v, vlen);
    } else if (IS("ratelimit")) {
        set_field(&r->ratelimit, v, vlen);
    } else if (IS("link")) {
        parse_link(r, v, vlen);
    } else if (IS("content-length") || IS("x-linked-size")) {
        char * s = strndup(v, vlen);
        char * e = NULL;
        long long n = s ? strtoll(s, &e, 10) : -1;
        int ok = s && e != s && *e == '\0' && n >= 0;
        free(s);
        if (ok) {
            *(IS("content-length") ? &r->content_length : &r->linked_size) = n;
        }
    }
#undef IS
}

int osc_http_retryable(long status) {
    return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

double osc_http_retry_after(const char * retry_after, const char * ratelimit, double now) {
    if (retry_after && *retry_after) {
        char * e = NULL;
        double s = strtod(retry_after, &e);
        if (e != retry_after && *e == '\0' && isfinite(s) && s >= 0) {
            return s;
        }
        time_t t = curl_getdate(retry_after, NULL);
        if (t != (time_t) -1) {
            double d = (double) t - now;
            return d > 0 ? d : 0;
        }
    }
    if (ratelimit && *ratelimit) { // IETF draft: "api";r=0;t=55
        const char * r = strstr(ratelimit, ";r=");
        const char * t = strstr(ratelimit, ";t=");
        if (r && t && strtol(r + 3, NULL, 10) == 0) {
            char * e = NULL;
            double s = strtod(t + 3, &e);
            if (e != t + 3 && s >= 0) {
                return s;
            }
        }
    }
    return -1;
}

double osc_http_backoff(const struct oscar_hub * hub, int attempt, const struct osc_http_resp * r) {
    double ra = r ? osc_http_retry_after(r->retry_after, r->ratelimit, (double) time(NULL)) : -1;
    if (ra >= 0) {
        return ra < 300 ? ra : 300; // a server asking for more than 5 min is treated as 5 min
    }
    double w = hub->backoff_base * ldexp(1.0, attempt);
    return w < hub->backoff_max ? w : hub->backoff_max;
}

void osc_sleep(double seconds) {
    if (seconds <= 0) {
        return;
    }
    struct timespec ts = { (time_t) seconds, (long) ((seconds - (double) (time_t) seconds) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

enum oscar_status osc_http_error(const struct osc_http_resp * r, const char * what) {
    char msg[512] = "";
    if (r->error_message) {
        snprintf(msg, sizeof msg, ": %s", r->error_message);
    } else if (r->body.data && r->body.len) { // {"error": "..."} bodies
        const char * e = strstr(r->body.data, "\"error\"");
        snprintf(msg, sizeof msg, ": %.200s", e ? e : r->body.data);
    }
    enum oscar_status st = r->status == 404 ? OSCAR_ERR_NOT_FOUND : OSCAR_ERR_HTTP;
    return osc_error(st, "%s: HTTP %ld%s%s%s%s%s%s", what, r->status, r->error_code ? " " : "",
                     r->error_code ? r->error_code : "", msg, r->request_id ? " (request id " : "",
                     r->request_id ? r->request_id : "", r->request_id ? ")" : "");
}

// ---- one hop --------------------------------------------------------------
struct xfer {
    const struct osc_http_req * q;
    struct osc_http_resp *      r;
    struct osc_progress         prog;
    int                         show;
};

static size_t on_header(char * p, size_t size, size_t n, void * ud) {
    osc_http_parse_header(((struct xfer *) ud)->r, p, size * n);
    return size * n;
}

static int to_sink(const struct xfer * x) {
    return x->q->sink_fd >= 0 && (x->r->status == 200 || x->r->status == 206);
}

static size_t on_body(char * p, size_t size, size_t n, void * ud) {
    struct xfer *          x = ud;
    struct osc_http_resp * r = x->r;
    size_t                 len = size * n;
    if (!to_sink(x)) {
        return osc_buf_append(&r->body, p, len) ? 0 : len;
    }
    if (x->q->range_start > 0 && r->status == 200 && !r->restarted) {
        // Asked for a range, got the whole body: start over (CloudFront + gzip).
        if (ftruncate(x->q->sink_fd, 0) != 0 || lseek(x->q->sink_fd, 0, SEEK_SET) != 0) {
            r->write_errno = errno;
            return 0;
        }
        r->restarted = 1;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(x->q->sink_fd, p + done, len - done);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            r->write_errno = errno;
            return 0;
        }
        done += (size_t) w;
    }
    r->written += (int64_t) len;
    return len;
}

static size_t on_read(char * p, size_t size, size_t n, void * ud) {
    struct xfer * x    = ud;
    int64_t       left = x->q->upload_len - x->r->written;
    size_t        want = size * n < (size_t) left ? size * n : (size_t) left;
    if (want == 0) {
        return 0;
    }
    ssize_t got = pread(x->q->upload_fd, p, want, x->q->upload_off + x->r->written);
    if (got <= 0) {
        x->r->write_errno = got < 0 ? errno : EIO;
        return CURL_READFUNC_ABORT;
    }
    x->r->written += got;
    return (size_t) got;
}

static int on_progress(void * ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    struct xfer * x = ud;
    (void) dt;
    (void) ut;
    if (x->show) {
        int64_t done = x->q->upload_fd >= 0 ? (int64_t) un : x->q->range_start + (int64_t) dn;
        osc_progress_update(&x->prog, done);
    }
    return 0;
}

static struct curl_slist * build_headers(const struct oscar_hub * hub, const struct osc_http_req * q,
                                         const char * url) {
    struct curl_slist * h = NULL;
    char                line[4096];
    if (q->auth && hub->token && osc_url_same_origin(url, hub->endpoint)) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", hub->token);
        h = curl_slist_append(h, line);
    }
    if (q->content_type) {
        snprintf(line, sizeof line, "Content-Type: %s", q->content_type);
        h = curl_slist_append(h, line);
    }
    if (q->accept) {
        snprintf(line, sizeof line, "Accept: %s", q->accept);
        h = curl_slist_append(h, line);
    }
    if (q->range_start > 0) {
        snprintf(line, sizeof line, "Range: bytes=%lld-", (long long) q->range_start);
        h = curl_slist_append(h, line);
    }
    h = curl_slist_append(h, "Expect:");
    h = curl_slist_append(h, "Accept-Encoding: identity");
    for (const char * const * e = q->headers; e && *e; e++) {
        h = curl_slist_append(h, *e);
    }
    return h;
}

static enum oscar_status hop(const struct oscar_hub * hub, const struct osc_http_req * q, const char * url,
                             struct osc_http_resp * r, struct xfer * x) {
    CURL * c = curl_easy_init();
    if (!c) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: curl_easy_init failed", url);
    }
    struct curl_slist * h = build_headers(hub, q, url);
    char                err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_USERAGENT, hub->user_agent);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, hub->connect_timeout);
#if LIBCURL_VERSION_NUM >= 0x075500 // 7.85: the string forms
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, hub->low_speed);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, hub->read_timeout);
    if (q->deadline > 0) {
        double left = q->deadline - osc_now();
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, left > 0.001 ? (long) (left * 1000) : 1L);
    }
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, x->show ? 0L : 1L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    if (!strcmp(q->method, "HEAD")) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(q->method, "PUT") && q->upload_fd >= 0) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, x);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t) q->upload_len);
    } else if (strcmp(q->method, "GET")) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) q->body_len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->body ? q->body : "");
    }
    CURLcode cc = curl_easy_perform(c);
    char *   redirect = NULL;
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK && redirect) {
            set_field(&r->location, redirect, strlen(redirect)); // absolute form
        }
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (r->write_errno && q->upload_fd < 0) {
        return osc_error(OSCAR_ERR_IO, "%s: writing the download: %s", url, strerror(r->write_errno));
    }
    if (cc != CURLE_OK) {
        return osc_error(OSCAR_ERR_NETWORK, "%s %s: %s", q->method, url, err[0] ? err : curl_easy_strerror(cc));
    }
    return OSCAR_OK;
}

enum oscar_status osc_http_once(const struct oscar_hub * hub, const struct osc_http_req * q,
                                struct osc_http_resp * r) {
    struct xfer x = { .q = q, .r = r, .show = q->progress != NULL };
    if (x.show) {
        osc_progress_init(&x.prog, q->progress, "B", q->progress_total);
        x.show = x.prog.is_tty || q->progress_total >= ((int64_t) 1 << 20); // no log spam for small files
    }
    char *            url = strdup(q->url);
    enum oscar_status st  = url ? OSCAR_OK : OSCAR_ERR_NOMEM;
    for (int i = 0; st == OSCAR_OK; i++) {
        osc_http_resp_free(r);
        if (!osc_url_is_http(url)) { // never hand libcurl a file:// or gopher:// Location
            st = i == 0 ? osc_error(OSCAR_ERR_FORMAT, "'%.200s': not an http(s) URL", url)
                        : osc_error(OSCAR_ERR_FORMAT, "%s: refusing a redirect to '%.200s' (only http and https)",
                                    q->url, url);
            break;
        }
        st = hop(hub, q, url, r, &x);
        if (st != OSCAR_OK || !q->follow || r->status < 300 || r->status >= 400 || !r->location) {
            break;
        }
        if (i == MAX_REDIRECTS) {
            st = osc_error(OSCAR_ERR_NETWORK, "%s: more than %d redirects", q->url, MAX_REDIRECTS);
            break;
        }
        free(url);
        url = strdup(r->location);
        if (!url) {
            st = OSCAR_ERR_NOMEM;
        }
    }
    if (st == OSCAR_OK) {
        r->final_url = url;
        url          = NULL;
        if (x.show && (r->status == 200 || r->status == 206)) {
            osc_progress_update(&x.prog, x.prog.total > 0 ? x.prog.total : x.prog.done);
            osc_progress_finish(&x.prog);
        }
    }
    free(url);
    return st;
}

enum oscar_status osc_http_request(const struct oscar_hub * hub, const struct osc_http_req * q,
                                   struct osc_http_resp * r) {
    OSCAR_ASSERT(q->sink_fd < 0);
    // A request body (an LFS upload, a big commit) may take longer: it gets the
    // time it needs at the lowest accepted speed on top of the deadline.
    double sent  = (double) (q->upload_fd >= 0 ? q->upload_len : (int64_t) q->body_len);
    double slack = hub->low_speed > 0 ? sent / (double) hub->low_speed : 0;
    struct osc_http_req qd = *q;
    qd.deadline            = osc_now() + hub->deadline + slack;
    enum oscar_status st   = OSCAR_OK;
    for (int attempt = 0;; attempt++) {
        r->written     = 0;
        r->write_errno = 0;
        st             = osc_http_once(hub, &qd, r);
        int transient  = st == OSCAR_ERR_NETWORK || (st == OSCAR_OK && osc_http_retryable(r->status));
        if (!transient || attempt >= hub->max_retries) {
            break;
        }
        double w = osc_http_backoff(hub, attempt, st == OSCAR_OK ? r : NULL);
        char   why[600];
        if (st == OSCAR_OK) {
            snprintf(why, sizeof why, "%s %s: HTTP %ld%s%s", q->method, q->url, r->status, r->error_code ? " " : "",
                     r->error_code ? r->error_code : "");
        } else {
            snprintf(why, sizeof why, "%s", oscar_last_error());
        }
        if (osc_now() + w > qd.deadline) { // the caller reports the last answer or error
            osc_warn("%s; giving up: a retry in %.1fs would pass the %.0fs deadline (OSCAR_HUB_DEADLINE)", why, w,
                     hub->deadline);
            if (st != OSCAR_OK) {
                st = osc_error_prefix(st, "giving up at the %.0fs deadline (OSCAR_HUB_DEADLINE)", hub->deadline);
            }
            break;
        }
        osc_warn("%s, retrying in %.1fs (%d/%d)", why, w, attempt + 1, hub->max_retries);
        osc_sleep(w);
    }
    return st;
}
