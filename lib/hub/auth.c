// auth.c - client configuration from the environment, the way huggingface_hub
// reads it (docs/ecosystem.md §1.1): endpoint, token (HF_TOKEN >
// HUGGING_FACE_HUB_TOKEN > $HF_TOKEN_PATH or $HF_HOME/token), cache dir,
// offline flag, timeouts, user agent. Never prints the token.
#include "hub/hub-internal.h"

#include <curl/curl.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/version.h"
#include "util/fs.h"

static const char * env(const char * name) {
    const char * v = getenv(name);
    return v && *v ? v : NULL;
}

static int truthy(const char * v) {
    return v && (!strcasecmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") || !strcasecmp(v, "true"));
}

// Copy of `s` without surrounding whitespace; NULL when nothing is left.
static char * strip(const char * s) {
    while (*s && isspace((unsigned char) *s)) {
        s++;
    }
    size_t n = strlen(s);
    while (n && isspace((unsigned char) s[n - 1])) {
        n--;
    }
    return n ? strndup(s, n) : NULL;
}

static char * hf_home(void) {
    if (env("HF_HOME")) {
        return strdup(env("HF_HOME"));
    }
    if (env("XDG_CACHE_HOME")) {
        return osc_path_join(env("XDG_CACHE_HOME"), "huggingface");
    }
    const char * home = env("HOME") ? env("HOME") : "/";
    return osc_path_join(home, ".cache/huggingface");
}

static char * read_token(const char * home) {
    char * path = env("HF_TOKEN_PATH") ? strdup(env("HF_TOKEN_PATH")) : osc_path_join(home, "token");
    char * tok  = NULL;
    char * text = NULL;
    size_t n    = 0;
    if (path && access(path, R_OK) == 0 && osc_read_file(path, 1 << 16, &text, &n) == OSCAR_OK) {
        tok = strip(text);
    }
    osc_error_clear();
    free(text);
    free(path);
    return tok;
}

static long env_long(const char * name, long def) {
    const char * v = env(name);
    char *       e = NULL;
    long         x = v ? strtol(v, &e, 10) : def;
    return (v && (*e || x <= 0)) ? def : x;
}

enum oscar_status oscar_hub_set_token(struct oscar_hub * hub, const char * token) {
    free(hub->token);
    hub->token = token ? strip(token) : NULL;
    return OSCAR_OK;
}

enum oscar_status oscar_hub_init(struct oscar_hub * hub) {
    memset(hub, 0, sizeof *hub);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char * home = hf_home();
    if (!home) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    const char * ep = env("HF_ENDPOINT") ? env("HF_ENDPOINT") : "https://huggingface.co";
    hub->endpoint   = strdup(ep);
    if (hub->endpoint) {
        size_t n = strlen(hub->endpoint);
        while (n && hub->endpoint[n - 1] == '/') {
            hub->endpoint[--n] = '\0';
        }
    }
    if (env("HF_TOKEN")) {
        hub->token = strip(env("HF_TOKEN"));
    } else if (env("HUGGING_FACE_HUB_TOKEN")) {
        hub->token = strip(env("HUGGING_FACE_HUB_TOKEN"));
    } else {
        hub->token = read_token(home);
    }
    if (env("HF_HUB_CACHE")) {
        hub->cache_dir = strdup(env("HF_HUB_CACHE"));
    } else if (env("HUGGINGFACE_HUB_CACHE")) {
        hub->cache_dir = strdup(env("HUGGINGFACE_HUB_CACHE"));
    } else {
        hub->cache_dir = osc_path_join(home, "hub");
    }
    free(home);
    char ua[256];
    snprintf(ua, sizeof ua, "oscar/%s; curl/%s", OSCAR_VERSION, curl_version_info(CURLVERSION_NOW)->version);
    hub->user_agent      = strdup(ua);
    hub->connect_timeout = env_long("HF_HUB_ETAG_TIMEOUT", 10);
    hub->read_timeout    = env_long("HF_HUB_DOWNLOAD_TIMEOUT", 10);
    hub->low_speed       = env_long("OSCAR_HUB_LOW_SPEED_LIMIT", 1024);
    hub->deadline        = (double) env_long("OSCAR_HUB_DEADLINE", 300);
    hub->max_retries     = (int) env_long("OSCAR_HUB_MAX_RETRIES", 5);
    if (env("OSCAR_HUB_MAX_RETRIES") && !strcmp(env("OSCAR_HUB_MAX_RETRIES"), "0")) {
        hub->max_retries = 0;
    }
    hub->backoff_base = env("OSCAR_HUB_BACKOFF") ? atof(env("OSCAR_HUB_BACKOFF")) : 1.0;
    if (!(hub->backoff_base >= 0)) {
        hub->backoff_base = 1.0;
    }
    hub->backoff_max = 8.0;
    hub->offline     = truthy(env("HF_HUB_OFFLINE")) || truthy(env("TRANSFORMERS_OFFLINE"));
    hub->progress    = 1;
    if (!hub->endpoint || !hub->cache_dir || !hub->user_agent) {
        oscar_hub_free(hub);
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    return OSCAR_OK;
}

void oscar_hub_free(struct oscar_hub * hub) {
    free(hub->endpoint);
    if (hub->token) {
        memset(hub->token, 0, strlen(hub->token));
    }
    free(hub->token);
    free(hub->cache_dir);
    free(hub->user_agent);
    memset(hub, 0, sizeof *hub);
}
