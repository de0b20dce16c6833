// oscar-make-stats-ckpt - writes a small lib/stats checkpoint as the layer-major
// calibration pass leaves it mid-run: 2 layers, 2 query heads over 1 KV head of
// head_dim 4, kinds QQT | SST | KTK | VTV, layer 0 finished (pass 1, its SST
// pass), layer 1 still in pass 1 with rows staged. It is the seed of
// fuzz-stats-checkpoint (tests/fuzz/corpus/fuzz-stats-checkpoint/), whose
// target loads it and must re-serialise it to the same bytes.
//
//   oscar-make-stats-ckpt OUT.bin
#include <stdio.h>
#include <stdlib.h>

#include "stats/stats.h"
#include "util/fs.h"

enum { T = 6, HQ = 2, HKV = 1, D = 4 };

static void rows(float * x, size_t n, float phase) {
    for (size_t i = 0; i < n; i++) x[i] = (float) ((int) ((i * 7 + 3) % 11) - 5) * 0.25f + phase;
}

static int die(const char * what) {
    fprintf(stderr, "oscar-make-stats-ckpt: %s: %s\n", what, oscar_last_error());
    return 1;
}

int main(int argc, char ** argv) {
    if (argc != 2) return fprintf(stderr, "usage: oscar-make-stats-ckpt OUT.bin\n"), 2;
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = 2, sp.n_head = HQ, sp.n_head_kv = HKV, sp.head_dim = D;
    sp.kinds = OSCAR_STATS_QQT | OSCAR_STATS_SST | OSCAR_STATS_KTK | OSCAR_STATS_VTV;
    sp.n_threads = 1, sp.max_tokens = T;
    struct oscar_stats * s = NULL;
    if (oscar_stats_init(&sp, &s) != OSCAR_OK) return die("init");
    float q[T * HQ * D], k[T * HKV * D], v[T * HKV * D];
    const int32_t starts[3] = {0, 4, T}; // two sequences
    rows(q, sizeof q / sizeof q[0], 0.0f), rows(k, sizeof k / sizeof k[0], 0.5f), rows(v, sizeof v / sizeof v[0], -0.5f);
    struct oscar_stats_chunk ch = {.layer = 0, .n_tokens = T, .n_seq = 2, .seq_start = starts, .q = q, .k = k, .v = v};
    // layer 0: pass 1, end, the SST pass on the same K/V, end; layer 1: pass 1 only
    if (oscar_stats_add(s, &ch) || oscar_stats_end_layer_pass(s, 0)) return die("layer 0 pass 1");
    ch.q = NULL;
    if (oscar_stats_add(s, &ch) || oscar_stats_end_layer_pass(s, 0)) return die("layer 0 sst");
    ch.layer = 1, ch.q = q;
    if (oscar_stats_add(s, &ch)) return die("layer 1 pass 1");
    const size_t n = oscar_stats_checkpoint_size(s);
    void * b = malloc(n);
    if (!b || oscar_stats_save(s, b, n) != OSCAR_OK) return die("save");
    if (osc_write_file_atomic(argv[1], b, n) != OSCAR_OK) return die(argv[1]);
    free(b);
    oscar_stats_free(s);
    return 0;
}
