// fuzz-hub-response.c - libFuzzer target: what a Hub server sends back that
// oscar parses without a network: response header lines (ETag, X-Linked-*,
// Location, Link, X-Error-*, Retry-After / RateLimit) and model cards.
#include <stdint.h>
#include <string.h>

#include "hub/hub-internal.h"
#include "hub/hub.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    struct osc_http_resp r;
    memset(&r, 0, sizeof r);
    osc_http_resp_reset(&r);
    const char * p   = (const char *) data;
    const char * end = p + size;
    while (p < end) { // one header line per '\n', as libcurl delivers them
        const char * nl  = memchr(p, '\n', (size_t) (end - p));
        size_t       len = nl ? (size_t) (nl - p + 1) : (size_t) (end - p);
        osc_http_parse_header(&r, p, len);
        p += len;
    }
    osc_http_retry_after(r.retry_after, r.ratelimit, 1.7e9);
    osc_http_resp_free(&r);
    oscar_hub_check_card((const char *) data, size, "README.md");
    return 0;
}
