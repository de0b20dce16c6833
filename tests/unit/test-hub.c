// test-hub.c - the pure parts of lib/hub: URL quoting/building, the
// token-host rule, header parsing, Retry-After, backoff, cache paths and refs,
// NDJSON commit bodies, hashes and base64, model-card checks, env config.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/hub-internal.h"
#include "util/sha256.h"
#include "oscar.h"
#include "util/fs.h"

#define TEST_TMPDIR_NAME "hub"
#include "test-tmpdir.h"

static void check_str(char * got, const char * want) {
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_url_building(void ** state) {
    (void) state;
    check_str(osc_url_quote("refs/pr/1", ""), "refs%2Fpr%2F1");
    check_str(osc_url_quote("a b/c+d.txt", "/"), "a%20b/c%2Bd.txt");
    check_str(osc_url_quote("\xc3\xa9", ""), "%C3%A9");
    check_str(osc_url_resolve("https://hf.co", "me/zoo", "refs/pr/1", "m/t/oscar.json"),
              "https://hf.co/me/zoo/resolve/refs%2Fpr%2F1/m/t/oscar.json");
    check_str(osc_url_api("http://h:1", "a/b", "/tree/main"), "http://h:1/api/models/a/b/tree/main");
    assert_true(osc_repo_id_valid("Zhongzhu/OSCAR-RotationZoo"));
    assert_true(osc_repo_id_valid("gpt2"));
    assert_false(osc_repo_id_valid("a/b/c"));
    assert_false(osc_repo_id_valid("a/b--c"));
    assert_false(osc_repo_id_valid("../x"));
    assert_false(osc_repo_id_valid("a b/c"));
    assert_true(osc_repo_path_valid("m/calib/oscar.safetensors"));
    assert_false(osc_repo_path_valid("/abs"));
    assert_false(osc_repo_path_valid("a/../b"));
    assert_false(osc_repo_path_valid("a//b"));
    assert_false(osc_repo_path_valid("a/"));
    assert_false(osc_repo_path_valid("./a"));
}

// Revisions become paths below refs/ and repo ids folder names: git's ref
// rules keep both inside the cache (issue 18 item 4).
static void test_revision_rules(void ** state) {
    (void) state;
    const char * good[] = { "main", "refs/pr/1", "v1.0", "feature/x-y_z", "a@b", "release-2026.12",
                            "0123456789abcdef0123456789abcdef01234567" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (!osc_revision_valid(good[i])) fail_msg("'%s' refused", good[i]);
    }
    const char * bad[] = { "", "..", "../x", "../../../../X", "a/../b", "a..b", "/main", "main/", "a//b", ".hidden",
                           "a/.b", "x.lock", "a.lock/b", "a b", "a\tb", "a\nb", "a~1", "a^", "a:b", "a?", "a*",
                           "a[", "a\\b", "@", "a@{1}", "main.", "\x7f" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (osc_revision_valid(bad[i])) fail_msg("'%s' accepted", bad[i]);
    }
    char longrev[300];
    memset(longrev, 'a', sizeof longrev - 1);
    longrev[sizeof longrev - 1] = '\0';
    assert_false(osc_revision_valid(longrev));
    assert_int_equal(osc_check_repo_rev("me/zoo", "refs/pr/1"), OSCAR_OK);
    assert_int_equal(osc_check_repo_rev("me/zoo", NULL), OSCAR_OK);
    assert_int_equal(osc_check_repo_rev("a/b/../../x", "main"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "not a valid repo id"));
    assert_int_equal(osc_check_repo_rev(NULL, "../x"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "'../x': not a valid revision"));
    // The cache refuses them too, whoever calls it: nothing is created outside refs/.
    char * rd = osc_path_join(tmpdir, "revs/models--me--zoo");
    char   got[41];
    assert_int_equal(osc_cache_write_ref(rd, "../../escaped", "1111111111111111111111111111111111111111"),
                     OSCAR_ERR_INVALID);
    assert_int_equal(osc_cache_read_ref(rd, "../../../etc/passwd", got), OSCAR_ERR_INVALID);
    char * esc = osc_path_join(tmpdir, "revs/escaped");
    assert_int_not_equal(access(esc, F_OK), 0);
    char * dir = NULL;
    assert_int_equal(osc_cache_offline_repo(tmpdir, "a/b/../../../../x", "main", &dir, got), OSCAR_ERR_INVALID);
    assert_null(dir);
    free(esc);
    free(rd);
}

// Only http(s) URLs are fetched, on the first hop and after every redirect (issue 18 item 2).
static void test_url_schemes(void ** state) {
    (void) state;
    assert_true(osc_url_is_http("http://127.0.0.1:8080/x"));
    assert_true(osc_url_is_http("HTTPS://huggingface.co/"));
    assert_false(osc_url_is_http("file:///etc/passwd"));
    assert_false(osc_url_is_http("gopher://127.0.0.1:25/_HELO"));
    assert_false(osc_url_is_http("ftp://x/y"));
    assert_false(osc_url_is_http("//huggingface.co/x"));
    assert_false(osc_url_is_http("httpx://x"));
    assert_false(osc_url_is_http(""));
    // A request to such a URL fails before libcurl sees it.
    struct oscar_hub     hub = { .endpoint = "http://127.0.0.1:9", .user_agent = "t", .connect_timeout = 1,
                                 .read_timeout = 1, .low_speed = 1, .deadline = 5 };
    struct osc_http_req  q   = { .method = "GET", .url = "file:///etc/passwd", .upload_fd = -1, .sink_fd = -1 };
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    assert_int_equal(osc_http_once(&hub, &q, &r), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "not an http(s) URL"));
    assert_null(r.body.data);
    osc_http_resp_free(&r);
    assert_int_equal(osc_local_dir_check("/ld", "m/x.json"), OSCAR_OK);
    assert_int_equal(osc_local_dir_check("/ld", ".cache/hf.json"), OSCAR_OK);
    assert_int_equal(osc_local_dir_check("/ld", ".cache/huggingface/download/x.metadata"), OSCAR_ERR_UNSUPPORTED);
    assert_int_equal(osc_local_dir_check("/ld", ".cache/huggingface"), OSCAR_ERR_UNSUPPORTED);
}

static void test_token_host_rule(void ** state) {
    (void) state;
    assert_true(osc_url_same_origin("https://huggingface.co/x", "https://huggingface.co"));
    assert_true(osc_url_same_origin("https://HuggingFace.co:443/a?b", "https://huggingface.co/"));
    assert_true(osc_url_same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8080"));
    assert_false(osc_url_same_origin("https://cdn-lfs.huggingface.co/x", "https://huggingface.co"));
    assert_false(osc_url_same_origin("http://127.0.0.1:8081/a", "http://127.0.0.1:8080"));
    assert_false(osc_url_same_origin("http://huggingface.co/a", "https://huggingface.co"));
    assert_false(osc_url_same_origin("https://huggingface.co.evil.com/", "https://huggingface.co"));
    assert_false(osc_url_same_origin("https://huggingface.co@evil.com/", "https://huggingface.co"));
    assert_false(osc_url_same_origin("not a url", "https://huggingface.co"));
}

static void parse_lines(struct osc_http_resp * r, const char * const * lines) {
    for (; *lines; lines++) {
        osc_http_parse_header(r, *lines, strlen(*lines));
    }
}

// Found by fuzz-hub-response: a status line without a code, passed without
// a terminating NUL (as libcurl passes header lines), must not be read past
// its length.
static void test_status_line_bounds(void ** state) {
    (void) state;
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    char * exact = malloc(7);
    memcpy(exact, "HTTP/: ", 7); // no NUL
    osc_http_parse_header(&r, exact, 7);
    assert_int_equal(r.status, 0);
    memcpy(exact, "HTTP/2 ", 7);
    osc_http_parse_header(&r, exact, 7);
    assert_int_equal(r.status, 0);
    osc_http_parse_header(&r, "HTTP/1.1 20000 x", 16);
    assert_int_equal(r.status, 0);
    osc_http_parse_header(&r, "HTTP/1.1 404", 12);
    assert_int_equal(r.status, 404);
    free(exact);
    osc_http_resp_free(&r);
}

static void test_header_parsing(void ** state) {
    (void) state;
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    const char * const hop1[] = { "HTTP/1.1 302 Found\r\n", "X-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\n",
                                  "x-linked-etag:  \"aaaa\"  \r\n", "X-Linked-Size: 1234\r\n",
                                  "Location: https://cdn/x\r\n", "X-Request-Id: Root=1-abc\r\n", NULL };
    parse_lines(&r, hop1);
    assert_int_equal(r.status, 302);
    assert_string_equal(r.linked_etag, "\"aaaa\"");
    assert_int_equal(r.linked_size, 1234);
    assert_string_equal(r.location, "https://cdn/x");
    assert_string_equal(r.request_id, "Root=1-abc");
    // A new status line (next hop) drops the previous hop's headers.
    const char * const hop2[] = { "HTTP/2 206\r\n", "content-length: 77\r\n", "Content-Range: bytes 10-86/87\r\n",
                                  "Link: <https://h/api?cursor=2>; rel=\"next\", <https://h/x>; rel=\"prev\"\r\n",
                                  "X-Error-Code: EntryNotFound\r\n", "X-Amzn-Trace-Id: t1\r\n", "\r\n", NULL };
    parse_lines(&r, hop2);
    assert_int_equal(r.status, 206);
    assert_null(r.linked_etag);
    assert_null(r.location);
    assert_int_equal(r.linked_size, -1);
    assert_int_equal(r.content_length, 77);
    assert_string_equal(r.content_range, "bytes 10-86/87");
    assert_string_equal(r.link_next, "https://h/api?cursor=2");
    assert_string_equal(r.error_code, "EntryNotFound");
    assert_string_equal(r.request_id, "t1");
    osc_http_resp_free(&r);
    check_str(osc_etag_normalize("W/\"abc123\""), "abc123");
    check_str(osc_etag_normalize("\"abc\""), "abc");
    check_str(osc_etag_normalize("abc"), "abc");
    // Errors: X-Error-Message and request id in the text, 404 -> NOT_FOUND.
    osc_http_resp_reset(&r);
    const char * const err[] = { "HTTP/1.1 404 Not Found\r\n", "X-Error-Code: RepoNotFound\r\n",
                                 "X-Error-Message: Repository not found\r\n", "X-Request-Id: r-9\r\n", NULL };
    parse_lines(&r, err);
    assert_int_equal(osc_http_error(&r, "me/zoo: info"), OSCAR_ERR_NOT_FOUND);
    assert_string_equal(oscar_last_error(), "me/zoo: info: HTTP 404 RepoNotFound: Repository not found (request id r-9)");
    osc_http_resp_free(&r);
}

static void test_retry_after(void ** state) {
    (void) state;
    double now = 1700000000.0; // 2023-11-14T22:13:20Z
    assert_true(osc_http_retry_after("7", NULL, now) == 7.0);
    assert_true(osc_http_retry_after("0", NULL, now) == 0.0);
    assert_true(osc_http_retry_after("Tue, 14 Nov 2023 22:13:50 GMT", NULL, now) == 30.0);
    assert_true(osc_http_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", NULL, now) == 0.0); // past: now
    assert_true(osc_http_retry_after(NULL, "\"api\";r=0;t=55", now) == 55.0);
    assert_true(osc_http_retry_after(NULL, "\"api\";r=3;t=55", now) < 0); // quota left: no wait
    assert_true(osc_http_retry_after("soon", NULL, now) < 0);
    assert_true(osc_http_retry_after("-3", NULL, now) < 0);
    assert_true(osc_http_retry_after(NULL, NULL, now) < 0);
    assert_true(osc_http_retryable(429) && osc_http_retryable(503) && osc_http_retryable(408));
    assert_false(osc_http_retryable(404) || osc_http_retryable(412) || osc_http_retryable(501));
    struct oscar_hub hub = { .backoff_base = 0.5, .backoff_max = 8.0 };
    assert_true(osc_http_backoff(&hub, 0, NULL) == 0.5);
    assert_true(osc_http_backoff(&hub, 3, NULL) == 4.0);
    assert_true(osc_http_backoff(&hub, 10, NULL) == 8.0);
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    r.retry_after = strdup("2");
    assert_true(osc_http_backoff(&hub, 5, &r) == 2.0); // the server's word beats our schedule
    osc_http_resp_free(&r);
}

static void test_cache_paths(void ** state) {
    (void) state;
    check_str(osc_cache_repo_folder("Zhongzhu/OSCAR-RotationZoo"), "models--Zhongzhu--OSCAR-RotationZoo");
    check_str(osc_cache_repo_folder("gpt2"), "models--gpt2");
    check_str(osc_cache_repo_dir("/c", "a/b"), "/c/models--a--b");
    check_str(osc_cache_symlink_target("x.json", "e1"), "../../blobs/e1");
    check_str(osc_cache_symlink_target("m/t/x.json", "e1"), "../../../../blobs/e1");
    check_str(osc_cache_snapshot_path("/r", "c0", "m/x"), "/r/snapshots/c0/m/x");
    check_str(osc_cache_no_exist_path("/r", "c0", "m/x"), "/r/.no_exist/c0/m/x");
    assert_true(osc_is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
    assert_false(osc_is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
    assert_false(osc_is_commit_hash("main"));
}

static void test_cache_refs_and_lookup(void ** state) {
    (void) state;
    const char * c1 = "1111111111111111111111111111111111111111";
    const char * c2 = "2222222222222222222222222222222222222222";
    char *       rd = osc_cache_repo_dir(tmpdir, "me/zoo");
    char         got[41];
    assert_int_equal(osc_cache_read_ref(rd, "main", got), OSCAR_ERR_NOT_FOUND);
    assert_int_equal(osc_cache_write_ref(rd, "main", c1), OSCAR_OK);
    assert_int_equal(osc_cache_write_ref(rd, "refs/pr/1", c2), OSCAR_OK);
    assert_int_equal(osc_cache_read_ref(rd, "main", got), OSCAR_OK);
    assert_string_equal(got, c1);
    assert_int_equal(osc_cache_read_ref(rd, "refs/pr/1", got), OSCAR_OK);
    assert_string_equal(got, c2);
    // A blob + snapshot link resolves offline, through the ref and by commit.
    char * blobs = osc_path_join(rd, "blobs");
    assert_int_equal(osc_mkdirs(blobs), OSCAR_OK);
    char * blob = osc_cache_blob_path(rd, "abcd");
    assert_int_equal(osc_write_file_atomic(blob, "xyz", 3), OSCAR_OK);
    assert_int_equal(osc_cache_link_snapshot(rd, c1, "m/t/f.bin", "abcd"), OSCAR_OK);
    char * out = NULL;
    assert_int_equal(osc_cache_lookup(tmpdir, "me/zoo", "main", "m/t/f.bin", &out), OSCAR_OK);
    char * text = NULL;
    size_t n    = 0;
    assert_int_equal(osc_read_file(out, 16, &text, &n), OSCAR_OK);
    assert_int_equal(n, 3);
    free(text);
    char link[256];
    ssize_t k = readlink(out, link, sizeof link - 1);
    assert_true(k > 0);
    link[k] = '\0';
    assert_string_equal(link, "../../../../blobs/abcd");
    free(out);
    assert_int_equal(osc_cache_lookup(tmpdir, "me/zoo", c1, "m/t/f.bin", &out), OSCAR_OK);
    free(out);
    // .no_exist is a definite miss; anything else names the missing path.
    assert_int_equal(osc_cache_mark_no_exist(rd, c1, "gone.txt"), OSCAR_OK);
    assert_int_equal(osc_cache_lookup(tmpdir, "me/zoo", "main", "gone.txt", &out), OSCAR_ERR_NOT_FOUND);
    assert_non_null(strstr(oscar_last_error(), "does not exist"));
    assert_int_equal(osc_cache_lookup(tmpdir, "me/zoo", "main", "other.txt", &out), OSCAR_ERR_NOT_FOUND);
    assert_non_null(strstr(oscar_last_error(), "not in the cache"));
    assert_int_equal(osc_cache_lookup(tmpdir, "me/zoo", "dev", "m/t/f.bin", &out), OSCAR_ERR_NOT_FOUND);
    int fd = -1;
    assert_int_equal(osc_cache_lock(tmpdir, "me/zoo", "abcd", &fd), OSCAR_OK);
    assert_true(fd >= 0);
    osc_cache_unlock(fd);
    char * lockp = osc_path_join(tmpdir, ".locks/models--me--zoo/abcd.lock");
    assert_int_equal(access(lockp, F_OK), 0);
    free(lockp);
    free(blob);
    free(blobs);
    free(rd);
}

// Offline resolution of "owner/name:file" (oscar-verify -m, export) and the
// tree listing that tells a partial snapshot from a complete one (issue 18 item 11).
static void test_offline_resolve(void ** state) {
    (void) state;
    const char * c1    = "3333333333333333333333333333333333333333";
    char *       cache = osc_path_join(tmpdir, "offline-cache");
    char *       rd    = osc_cache_repo_dir(cache, "me/zoo");
    char *       blob  = osc_cache_blob_path(rd, "abcd");
    char *       blobs = osc_path_join(rd, "blobs");
    assert_int_equal(osc_mkdirs(blobs), OSCAR_OK);
    assert_int_equal(osc_write_file_atomic(blob, "GGUF", 4), OSCAR_OK);
    assert_int_equal(osc_cache_write_ref(rd, "main", c1), OSCAR_OK);
    assert_int_equal(osc_cache_link_snapshot(rd, c1, "m/t/model.gguf", "abcd"), OSCAR_OK);
    struct oscar_hub hub = { .endpoint = "http://127.0.0.1:9", .cache_dir = cache, .offline = 1 };
    char *           p   = NULL;
    // No tree listing (a cache written by hf_hub_download): what the snapshot holds is served.
    assert_int_equal(oscar_hub_resolve_local(&hub, "me/zoo:m/t/model.gguf", &p), OSCAR_OK);
    char * want = osc_cache_snapshot_path(rd, c1, "m/t/model.gguf");
    assert_string_equal(p, want);
    free(p);
    assert_int_equal(oscar_hub_resolve_local(&hub, "me/zoo@main:m/t", &p), OSCAR_OK);
    free(p);
    assert_int_equal(oscar_hub_resolve_local(&hub, "me/zoo:m/t/other.gguf", &p), OSCAR_ERR_NOT_FOUND);
    // With a listing naming a file the snapshot lacks: the folder is incomplete, the present file is fine.
    struct oscar_hub_entry   e[] = { { .path = "m/t/model.gguf", .oid = "abcd", .size = 4 },
                                     { .path = "m/t/tokenizer.json", .oid = "ef01", .size = 9 },
                                     { .path = "m/t", .is_dir = 1 } };
    struct oscar_hub_listing l   = { .entries = e, .n = 3 };
    assert_int_equal(osc_cache_write_tree(rd, c1, &l), OSCAR_OK);
    struct oscar_hub_listing back;
    assert_int_equal(osc_cache_read_tree(rd, c1, &back), OSCAR_OK);
    assert_int_equal(back.n, 2);
    assert_string_equal(back.entries[1].path, "m/t/tokenizer.json");
    assert_int_equal(back.entries[1].size, 9);
    oscar_hub_listing_free(&back);
    assert_int_equal(oscar_hub_resolve_local(&hub, "me/zoo:m/t/model.gguf", &p), OSCAR_OK);
    free(p);
    assert_int_equal(oscar_hub_resolve_local(&hub, "me/zoo:m/t", &p), OSCAR_ERR_NOT_FOUND);
    assert_non_null(strstr(oscar_last_error(), "incomplete: 1 of 2 file(s) missing (m/t/tokenizer.json)"));
    assert_null(p);
    // A malformed or hostile listing is ignored, not trusted.
    char * tp = osc_path_join(rd, "trees/3333333333333333333333333333333333333333.json");
    const char * hostile = "{\"format_version\": 1, \"files\": {\"../../../etc/passwd\": {\"size\": 1}}}";
    assert_int_equal(osc_write_file_atomic(tp, hostile, strlen(hostile)), OSCAR_OK);
    assert_int_equal(osc_cache_read_tree(rd, c1, &back), OSCAR_ERR_NOT_FOUND);
    assert_int_equal(oscar_hub_resolve_local(&hub, "me/zoo:m/t", &p), OSCAR_OK);
    free(p);
    free(tp);
    free(want);
    free(blobs);
    free(blob);
    free(rd);
    free(cache);
}

static void test_ndjson(void ** state) {
    (void) state;
    const unsigned char bin[] = { 0, 1, 2, 0xff, 'a' };
    struct osc_commit_op ops[] = {
        { .path = "m/t/oscar.json", .lfs = 0, .content = "{}\n", .content_len = 3, .size = 3 },
        { .path = "m/t/bin", .lfs = 0, .content = bin, .content_len = sizeof bin, .size = sizeof bin },
        { .path = "m/t/oscar.safetensors", .lfs = 1,
          .oid = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", .size = 4 },
    };
    struct osc_buf b = { 0 };
    assert_int_equal(osc_commit_ndjson(&b, "Add \"rotations\"", NULL, "0123456789abcdef0123456789abcdef01234567", ops, 3),
                     OSCAR_OK);
    const char * want_keys[] = { "header", "file", "file", "lfsFile" };
    const char * p = b.data;
    for (int i = 0; i < 4; i++) {
        const char * nl = strchr(p, '\n');
        assert_non_null(nl);
        json_error_t e;
        json_t *     j = json_loadb(p, (size_t) (nl - p), 0, &e);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "key")), want_keys[i]);
        json_t * v = json_object_get(j, "value");
        if (i == 0) {
            assert_string_equal(json_string_value(json_object_get(v, "summary")), "Add \"rotations\"");
            assert_string_equal(json_string_value(json_object_get(v, "parentCommit")),
                                "0123456789abcdef0123456789abcdef01234567");
        } else if (i == 1) {
            assert_string_equal(json_string_value(json_object_get(v, "content")), "e30K");
            assert_string_equal(json_string_value(json_object_get(v, "encoding")), "base64");
        } else if (i == 2) {
            assert_string_equal(json_string_value(json_object_get(v, "content")), "AAEC/2E=");
        } else {
            assert_string_equal(json_string_value(json_object_get(v, "algo")), "sha256");
            assert_int_equal(json_integer_value(json_object_get(v, "size")), 4);
            assert_null(json_object_get(v, "content"));
        }
        json_decref(j);
        p = nl + 1;
    }
    assert_int_equal(*p, '\0');
    osc_buf_free(&b);
}

static void test_hashes_base64(void ** state) {
    (void) state;
    // RFC 4648 section 10 vectors.
    const char * in[]  = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
    const char * out[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
    for (int i = 0; i < 7; i++) {
        check_str(osc_base64_encode(in[i], strlen(in[i])), out[i]);
    }
    char h256[65], h1[41];
    osc_sha256_hex("abc", 3, h256); // FIPS 180-2 example
    assert_string_equal(h256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    osc_hash_gitsha1_mem("", 0, h1); // `git hash-object /dev/null`
    assert_string_equal(h1, "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    osc_hash_gitsha1_mem("hello\n", 6, h1); // `echo hello | git hash-object --stdin`
    assert_string_equal(h1, "ce013625030ba8dba906f756967f9e9ca394464a");
    char * path = osc_path_join(tmpdir, "h.txt");
    assert_int_equal(osc_write_file_atomic(path, "hello\n", 6), OSCAR_OK);
    char    f256[65], f1[41];
    int64_t size = 0;
    assert_int_equal(osc_hash_file(path, f256, f1, &size), OSCAR_OK);
    assert_int_equal(size, 6);
    assert_string_equal(f1, "ce013625030ba8dba906f756967f9e9ca394464a");
    assert_string_equal(f256, "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
    free(path);
}

static void test_card_check(void ** state) {
    (void) state;
    const char * good = "---\nlicense: apache-2.0\nbase_model:\n- HuggingFaceTB/SmolLM2-135M-Instruct\n"
                        "tags: [oscar, int2, \"kv-cache\"]\nmodel-index:\n  - name: x\n    results: []\n"
                        "description: |\n  free: text: here\n  - not a list\n# comment\n---\n# Title\n";
    assert_int_equal(oscar_hub_check_card(good, strlen(good), "README.md"), OSCAR_OK);
    const char * crlf = "---\r\nlicense: mit\r\n---\r\n";
    assert_int_equal(oscar_hub_check_card(crlf, strlen(crlf), "README.md"), OSCAR_OK);
    // valid YAML the old line-based subset refused
    const char * also_good[] = {
        "---\ntags: [oscar,\n  int2]\ndatasets:\n  - a/b\n---\n",             // flow sequence over two lines
        "---\nlicense: mit\nnotes: |\n  line one\n\n  - line: three\n---\n",  // block scalar with a blank line
        "---\nbase_model: HuggingFaceTB/SmolLM2-135M\nextra: {a: 1, b: [2, 3]}\n---\n", // any shape outside the Hub's keys
        "---\nlicense: >-\n  apache-2.0\n---\n",                                  // a folded scalar is a string
    };
    for (size_t i = 0; i < sizeof also_good / sizeof also_good[0]; i++) {
        if (oscar_hub_check_card(also_good[i], strlen(also_good[i]), "README.md") != OSCAR_OK)
            fail_msg("good case %zu refused: %s", i, oscar_last_error());
    }
    struct { const char * text; const char * needle; } bad[] = {
        { "# no front matter\n", "no YAML front matter" },
        { "---\nlicense: mit\n", "not closed" },
        { "---\ntags: [a, b\n---\n", "README.md:2" },
        { "---\nlicense: mit\n\tx: 1\n---\n", "tab" },
        { "---\nlicense: mit\njust words\n---\n", "README.md:3" },
        { "---\nname: 'unterminated\n---\n", "README.md:2" },
        { "---\na: 1\nb: 2\na: 3\n---\n", "duplicate key 'a'" },
        // a tab-indented line: its line number and libyaml's problem text
        { "---\nlicense: mit\ntags:\n\t- a\n---\n", "README.md:4: YAML front matter: found character that "
                                                       "cannot start any token" },
        { "---\nlicense: mit\ntags:\n\t- a\n---\n", "indented with a tab" },
        { "---\nx: 1\nlicense: mit\nlicense: apache-2.0\n---\n", "README.md:4: duplicate key 'license' (first "
                                                                    "at line 3)" },
        { "---\nbase_model:\n  name: x\n---\n", "README.md:3: 'base_model' must be a string or a list of strings" },
        { "---\ntags:\n- [a, b]\n---\n", "'tags' must be a string or a list of strings" },
        { "---\nlicense: [mit]\n---\n", "README.md:2: 'license' must be a string" },
        { "---\nlibrary_name: {a: 1}\n---\n", "'library_name' must be a string" },
        { "---\n- a\n- b\n---\n", "README.md:2: YAML front matter is a sequence, not a mapping" },
        { "---\njust text\n---\n", "not a mapping" },
        { "---\n---\n", "empty" },
        { "---\na: 1\n--- {b: 2}\n---\n", "README.md:3: YAML front matter holds more than one document" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(oscar_hub_check_card(bad[i].text, strlen(bad[i].text), "README.md"), OSCAR_ERR_FORMAT);
        if (!strstr(oscar_last_error(), bad[i].needle)) {
            fail_msg("case %zu: '%s' lacks '%s'", i, oscar_last_error(), bad[i].needle);
        }
    }
}

static void test_card_get(void ** state) {
    (void) state;
    const char * card = "---\nlicense: apache-2.0\ntags: [a]\nempty:\n---\n# x\n";
    char *       v    = NULL;
    assert_int_equal(oscar_hub_card_get(card, strlen(card), "README.md", "license", &v), OSCAR_OK);
    assert_string_equal(v, "apache-2.0");
    free(v);
    const char * absent[] = {"tags", "empty", "base_model"}; // a list, a null, a missing key
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(oscar_hub_card_get(card, strlen(card), "README.md", absent[i], &v), OSCAR_OK);
        assert_null(v);
    }
    const char * bad = "---\nlicense: [mit\n---\n";
    assert_int_equal(oscar_hub_card_get(bad, strlen(bad), "m/README.md", "license", &v), OSCAR_ERR_FORMAT);
    assert_null(v);
    assert_non_null(strstr(oscar_last_error(), "m/README.md:"));
}

static void test_repo_id_valid(void ** state) {
    (void) state;
    assert_true(oscar_hub_repo_id_valid("HuggingFaceTB/SmolLM2-135M-Instruct"));
    assert_true(oscar_hub_repo_id_valid("a/b.c_d-e"));
    const char * bad[] = {"gpt2", "a/b/c", "/b", "a/", "a b/c", "a/b--c", "a/b..c", "-a/b", "a/b.", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (oscar_hub_repo_id_valid(bad[i])) fail_msg("'%s' accepted", bad[i]);
    }
}

static void test_env_config(void ** state) {
    (void) state;
    char * home = osc_path_join(tmpdir, "hfhome");
    assert_int_equal(osc_mkdirs(home), OSCAR_OK);
    char * tokf = osc_path_join(home, "token");
    assert_int_equal(osc_write_file_atomic(tokf, " hf_file\r\n", 10), OSCAR_OK);
    setenv("HF_HOME", home, 1);
    setenv("HF_ENDPOINT", "http://127.0.0.1:9//", 1);
    unsetenv("HF_TOKEN");
    unsetenv("HUGGING_FACE_HUB_TOKEN");
    unsetenv("HF_TOKEN_PATH");
    unsetenv("HF_HUB_CACHE");
    unsetenv("HUGGINGFACE_HUB_CACHE");
    setenv("HF_HUB_OFFLINE", "yes", 1);
    struct oscar_hub hub;
    assert_int_equal(oscar_hub_init(&hub), OSCAR_OK);
    assert_string_equal(hub.endpoint, "http://127.0.0.1:9");
    assert_string_equal(hub.token, "hf_file");
    assert_true(hub.offline);
    assert_int_equal(hub.low_speed, 1024); // the limits every transfer and request run under
    assert_true(hub.deadline == 300.0);
    assert_non_null(strstr(hub.cache_dir, "hfhome/hub"));
    assert_true(strncmp(hub.user_agent, "oscar/" OSCAR_VERSION ";", strlen("oscar/" OSCAR_VERSION ";")) == 0);
    oscar_hub_free(&hub);
    setenv("HUGGING_FACE_HUB_TOKEN", "hf_legacy", 1);
    setenv("HF_HUB_OFFLINE", "0", 1);
    setenv("OSCAR_HUB_DEADLINE", "7", 1);
    setenv("OSCAR_HUB_LOW_SPEED_LIMIT", "50", 1);
    assert_int_equal(oscar_hub_init(&hub), OSCAR_OK);
    assert_string_equal(hub.token, "hf_legacy");
    assert_false(hub.offline);
    assert_int_equal(hub.low_speed, 50);
    assert_true(hub.deadline == 7.0);
    unsetenv("OSCAR_HUB_DEADLINE");
    unsetenv("OSCAR_HUB_LOW_SPEED_LIMIT");
    oscar_hub_free(&hub);
    setenv("HF_TOKEN", "hf_env", 1);
    setenv("HF_HUB_CACHE", "/x/cache", 1);
    assert_int_equal(oscar_hub_init(&hub), OSCAR_OK);
    assert_string_equal(hub.token, "hf_env");
    assert_string_equal(hub.cache_dir, "/x/cache");
    oscar_hub_free(&hub);
    unsetenv("HF_TOKEN");
    unsetenv("HUGGING_FACE_HUB_TOKEN");
    setenv("HF_TOKEN_PATH", "/nonexistent/token", 1);
    assert_int_equal(oscar_hub_init(&hub), OSCAR_OK);
    assert_null(hub.token);
    oscar_hub_free(&hub);
    free(tokf);
    free(home);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_building),   cmocka_unit_test(test_token_host_rule),
        cmocka_unit_test(test_header_parsing), cmocka_unit_test(test_status_line_bounds), cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_cache_paths),    cmocka_unit_test(test_cache_refs_and_lookup),
        cmocka_unit_test(test_ndjson),         cmocka_unit_test(test_hashes_base64),
        cmocka_unit_test(test_card_check), cmocka_unit_test(test_card_get),
        cmocka_unit_test(test_repo_id_valid),     cmocka_unit_test(test_env_config),
        cmocka_unit_test(test_revision_rules), cmocka_unit_test(test_url_schemes),
        cmocka_unit_test(test_offline_resolve),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
