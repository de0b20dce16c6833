// bench-calibrate-device.c - end-to-end calibration through the layer-major engine
// (oscar_calib_capture): random-init model of a named shape (made on the device with
// --device cuda, layer by layer on the host with cpu), synthetic token stream, one pass
// with the held-out rows, rotation fit, clip search and gate; prints the stage wall
// times. (The artifact is not written: its provenance needs a model directory and tokenizer.)
//
//   bench-calibrate-device [--device cuda] [--random-init qwen3-8b] [--tokens 30720]
//                          [--seq-len 2048] [--batch 15] [--heldout 2] [--seed 1]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/random-source.h"
#include "util/log.h"

int main(int argc, char ** argv) {
    const char * device = "cuda", * shape = "qwen3-8b";
    struct oscar_calib_params p = oscar_calib_default_params();
    p.n_tokens = 30720, p.seq_len = 2048, p.batch = 15, p.n_heldout = 2;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else if (!strcmp(argv[i], "--random-init")) shape = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens")) p.n_tokens = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq-len")) p.seq_len = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) p.batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--heldout")) p.n_heldout = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    struct oscar_model_config cfg;
    struct oscar_calib_corpus corpus = {0};
    struct oscar_calib_plan plan = {0};
    struct oscar_calib_heldout held = {0};
    struct oscar_calib_finisher fin = {0};
    const struct oscar_calib_gate * gate = &fin.gate;
    struct oscar_stats * st = NULL;
    struct oscar_calib_timing t = {0};
    struct oscar_model * host = NULL;
    int rc = 1;
    const double t0 = osc_now();
    if (oscar_calib_random_config(shape, &cfg) ||
        oscar_calib_synthetic_corpus(p.n_tokens + (int64_t) p.n_heldout * p.seq_len, cfg.n_vocab, seed, &corpus) ||
        oscar_calib_plan_make(&corpus, &p, &plan)) {
        fprintf(stderr, "bench-calibrate-device: %s\n", oscar_last_error());
        goto out;
    }
    struct oscar_model desc = {.config = cfg};
    struct oscar_calib_engine e = {.device = device, .m = &desc, .random_on_device = strcmp(device, "cpu") != 0};
    p.seed = seed;
    p.eval_device = device;
    p.capture_bf16 = e.random_on_device; // the CUDA pass in bf16 captures bf16
    if (!e.random_on_device && oscar_model_open_random(&cfg, seed, &host) != OSCAR_OK) {
        fprintf(stderr, "bench-calibrate-device: %s\n", oscar_last_error());
        goto out;
    }
    if (host) e.m = host;
    if (oscar_calib_capture(&e, &plan, &p, &fin, &st, &held, &t)) {   // each layer finished as it ends
        fprintf(stderr, "bench-calibrate-device: %s\n", oscar_last_error());
        rc = strstr(oscar_last_error(), "CUDA") ? 77 : 1;
        goto out;
    }
    t.total = osc_now() - t0;
    printf("\nEnd-to-end calibration (%s random init, synthetic tokens, %lld tokens = %d x %d, held-out %d seqs, "
           "device %s)\n\n", shape, (long long) plan.n_tokens, (int) plan.n_seq, (int) p.seq_len, (int) p.n_heldout,
           device);
    printf("| stage | seconds |\n|---|---|\n| held-out batches (forward + rows to the host) | %.2f |\n"
           "| calibration batches (forward + pass-1 sums) | %.2f |\n| layer ends (SST, downloads, lib/stats) | %.2f |\n"
           "| weights (read + upload, or made on the device) | %.2f |\n"
           "| eigh (rotation fit) | %.2f |\n| clip search | %.2f |\n| gate | %.2f |\n| total | %.2f |\n",
           t.heldout, t.forward, t.accumulate, t.load, t.eigh, t.clip, t.gate, t.total);
    printf("| peak device memory | %.2f GiB |\n| peak host RSS | %.0f MiB |\n", (double) t.device_peak_bytes / 1073741824.0,
           oscar_calib_peak_rss_mb());
    printf("| gate | %s (oscar %.4g, hadamard %.4g, naive %.4g) |\n", gate->pass ? "pass" : "FAIL", gate->mean_oscar,
           gate->mean_hadamard, gate->mean_naive);
    rc = 0;
out:
    oscar_calib_finish_free(&fin);
    oscar_stats_free(st), oscar_calib_heldout_free(&held), oscar_calib_plan_free(&plan);
    oscar_calib_corpus_free(&corpus);
    oscar_model_free(host);
    return rc;
}
