// fuzz-model.c - libFuzzer target: the model loaders, as --model reaches them.
//
//   input starting with "GGUF": a .gguf file; the model and the tokenizer
//                               are both loaded from it
//   anything else:              config.json, a NUL byte, model.safetensors:
//                               an HF model directory
//
// Loading must fail cleanly or succeed; libFuzzer's malloc limit catches
// allocations sized from metadata that the file does not back.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

static void load_gguf(const uint8_t * data, size_t size) {
    const char * path = fuzz_write_file("model.gguf", data, size);
    if (!path) return;
    struct oscar_model * m = NULL;
    if (oscar_model_load(path, &m) == OSCAR_OK) oscar_model_free(m);
    struct oscar_tokenizer * tok = NULL;
    if (oscar_tokenizer_load(path, &tok) != OSCAR_OK) return;
    static const char text[] = "Hello world 123 it's\n\n  caf\xc3\xa9";
    int32_t * ids = NULL;
    size_t    n = 0;
    if (oscar_tokenizer_encode(tok, text, sizeof text - 1, true, &ids, &n) == OSCAR_OK) {
        char * back = NULL;
        size_t blen = 0;
        if (oscar_tokenizer_decode(tok, ids, n, false, &back, &blen) != OSCAR_OK) abort(); // ids from encode decode
        free(back);
    }
    free(ids);
    oscar_tokenizer_free(tok);
}

static void load_hf_dir(const uint8_t * data, size_t size) {
    const uint8_t * nul = memchr(data, 0, size);
    size_t cfg_len = nul ? (size_t) (nul - data) : size;
    const uint8_t * st = nul ? nul + 1 : data + size;
    if (!fuzz_write_file("config.json", data, cfg_len) ||
        !fuzz_write_file("model.safetensors", st, (size_t) (data + size - st))) {
        return;
    }
    struct oscar_model * m = NULL;
    if (oscar_model_load(fuzz_dir(), &m) == OSCAR_OK) oscar_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0) load_gguf(data, size);
    else load_hf_dir(data, size);
    return 0;
}
