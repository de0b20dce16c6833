// fuzz-tokenizer-encode.c - libFuzzer target: arbitrary bytes as text for a
// small fixed byte-level BPE tokenizer (all 256 bytes, a few merges, NFC, a
// Digits + GPT-2 pre-tokenizer, one special and one non-special added token).
// Invalid UTF-8 must be rejected; valid text must encode, and decoding the
// ids of text without added-token look-alikes must give back the NFC text
// byte for byte (here: checked for ASCII input, which NFC leaves alone).
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

static struct oscar_tokenizer * tok;

// JSON string escape of the byte-level character for byte b (GPT-2 table).
static int bl_char(int b) {
    static int map[256], ready;
    if (!ready) {
        int extra = 0;
        for (int i = 0; i < 256; i++) {
            bool vis = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
            map[i] = vis ? i : 256 + extra++;
        }
        ready = 1;
    }
    return map[b];
}

static void build(void) {
    size_t cap = 1 << 16, n = 0;
    char * j = malloc(cap);
    n += (size_t) snprintf(j + n, cap - n, "{\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":"
                           "\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                           "{\"type\":\"ByteLevel\",\"use_regex\":true}]},\"added_tokens\":["
                           "{\"id\":300,\"content\":\"<|s|>\",\"special\":true,\"normalized\":false},"
                           "{\"id\":301,\"content\":\"<u>\",\"special\":false,\"normalized\":false}],"
                           "\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) n += (size_t) snprintf(j + n, cap - n, "\"\\u%04x\":%d,", bl_char(b), b);
    n += (size_t) snprintf(j + n, cap - n, "\"\\u%04xt\":256,\"he\":257,\"\\u%04xthe\":258,\"in\":259,"
                           "\"\\u%04x\\u%04x\":260},\"merges\":[\"\\u%04x t\",\"h e\",\"\\u%04xt he\",\"i n\","
                           "\"\\u%04x \\u%04x\"]}}", bl_char(' '), bl_char(' '), bl_char(' '), bl_char(' '),
                           bl_char(' '), bl_char(' '), bl_char(' '), bl_char(' '));
    if (oscar_tokenizer_from_json("fuzz-vocab", j, n, NULL, 0, &tok) != OSCAR_OK) abort();
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (!tok) build();
    bool special = size > 0 && (data[0] & 1);
    int32_t * ids = NULL;
    size_t    n = 0;
    enum oscar_status st = oscar_tokenizer_encode(tok, (const char *) data, size, special, &ids, &n);
    if (st == OSCAR_OK) {
        bool ascii = true;
        for (size_t i = 0; i < size; i++) ascii &= data[i] < 0x80;
        char * back = NULL;
        size_t blen = 0;
        if (oscar_tokenizer_decode(tok, ids, n, false, &back, &blen) != OSCAR_OK) abort();
        if (ascii && (blen != size || memcmp(back, data, size) != 0)) abort(); // lossless on ASCII
        free(back);
    } else if (st != OSCAR_ERR_INVALID) {
        abort();
    }
    free(ids);
    return 0;
}
