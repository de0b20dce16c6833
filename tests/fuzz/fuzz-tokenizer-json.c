// fuzz-tokenizer-json.c - libFuzzer target: arbitrary bytes as tokenizer.json
// (first half) and tokenizer_config.json (second half, after a NUL when
// present). Loading must fail cleanly or succeed; on success a short text
// is encoded and decoded to exercise the built tables.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const char * json = (const char *) data;
    const uint8_t * nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t) (nul - data) : size;
    const char * cfg = nul ? (const char *) nul + 1 : NULL;
    size_t cfg_len = nul ? size - json_len - 1 : 0;
    struct oscar_tokenizer * tok = NULL;
    if (oscar_tokenizer_from_json("fuzz.json", json, json_len, cfg, cfg_len, &tok) != OSCAR_OK) {
        return 0;
    }
    static const char text[] = "Hello world 123 <|im_start|>it's\n\n  caf\xc3\xa9";
    int32_t * ids = NULL;
    size_t    n = 0;
    if (oscar_tokenizer_encode(tok, text, sizeof text - 1, true, &ids, &n) == OSCAR_OK) {
        char * back = NULL;
        size_t blen = 0;
        if (oscar_tokenizer_decode(tok, ids, n, false, &back, &blen) != OSCAR_OK) {
            abort(); // ids from encode must always decode
        }
        free(back);
    }
    free(ids);
    oscar_tokenizer_free(tok);
    return 0;
}
