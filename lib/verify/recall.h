// recall.h - the verbatim-recall probe of oscar-verify (--recall): a passcode
// sentence (the needle) placed at several depths of a filler window of ctx
// tokens, a question at the end, and the passcode's tokens as the answer.
// Retrieval is greedy: a method retrieves the passcode exactly iff, with the
// answer's tokens fed in order (teacher forcing), the argmax of every answer
// position is the next answer token. That is the same decision as greedy
// decoding (up to the first miss both see the same tokens) from ONE forward
// pass per probe, through the method's simulated serving cache. Tokenization
// is the caller's (cmd/oscar-verify.c); this file only lays tokens out and
// compares argmaxes. It allocates nothing.
#ifndef OSCAR_VERIFY_RECALL_H
#define OSCAR_VERIFY_RECALL_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define OSCAR_RECALL_MAX_PROBES 16

struct oscar_recall_probe {
    const int32_t * needle;  int32_t n_needle;   // the sentence that states the passcode
    const int32_t * answer;  int32_t n_answer;   // the passcode's tokens as the answer continues
    double depth;                                // where the needle starts: 0 = first token, 1 = after all the filler
};

struct oscar_verify_recall {
    const struct oscar_recall_probe * probes;    // [n_probes] (one passcode per depth)
    int32_t n_probes;                            // 1 .. OSCAR_RECALL_MAX_PROBES
    const int32_t * question; int32_t n_question; // asked after the filler, before the answer
};

// Checks that every probe fits a window of T tokens: filler length
// T - n_question - n_answer - n_needle >= 1. OSCAR_ERR_INVALID naming the probe otherwise.
enum oscar_status osc_recall_check(const struct oscar_verify_recall * rc, int32_t T, size_t n_filler);

// Lays probe k out in seq[0..T): filler[0..pos) + needle + filler[pos..F) + question + answer,
// F = T - n_question - n_answer - n_needle, pos = round(depth·F). Returns pos (the needle's
// first position); *answer_at = T - n_answer, the first answer position.
int32_t osc_recall_build(const struct oscar_verify_recall * rc, int32_t k, const int32_t * filler, int32_t T,
                         int32_t * seq, int32_t * answer_at);

// How many answer tokens the method gets right before its first miss: logits [n_answer, V]
// are the rows at positions answer_at-1 .. T-2 (each predicts the next answer token); the
// argmax is the first index of the max.
int32_t osc_recall_prefix(const float * logits, int32_t V, const int32_t * answer, int32_t n_answer);

#endif
