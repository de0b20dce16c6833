// forward-fixture.h - test support for the forward-pass oracle fixtures (tests/fixtures/forward/<name>/).
//
// Reads the raw little-endian arrays written by tests/oracle/make_model_fixtures.py and compares
// them by relative L2 error. Header-only (static functions) because every tests/unit/*.c and
// tests/tools/*.c file is its own binary. Assumes a little-endian host, like the fixtures.
#ifndef OSCAR_TESTS_FORWARD_FIXTURE_H
#define OSCAR_TESTS_FORWARD_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/fs.h"

// Reads dir/name, which must hold exactly `bytes` bytes; NULL (with a message on stderr) otherwise.
static void * fx_read(const char * dir, const char * name, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char * data = NULL;
    size_t size = 0;
    if (osc_read_file(path, bytes + 1, &data, &size) != OSCAR_OK || size != bytes) {
        fprintf(stderr, "%s: cannot read %zu bytes (got %zu): %s\n", path, bytes, size, oscar_last_error());
        free(data);
        return NULL;
    }
    return data;
}

// ||a - b|| / ||b|| in double.
static double fx_rel_l2(const float * a, const float * b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// Captured q/k/v of the wanted layers, copied out of the hook.
struct fx_capture {
    int32_t n_layers;
    int32_t layers[8];
    float * q[8];
    float * k[8];
    float * v[8];
};

static bool fx_capture_want(void * user, int32_t layer) {
    const struct fx_capture * c = user;
    for (int32_t i = 0; i < c->n_layers; i++)
        if (c->layers[i] == layer) return true;
    return false;
}

static enum oscar_status fx_capture_on_layer(void * user, const struct oscar_capture_layer * cap) {
    struct fx_capture * c = user;
    const size_t T = (size_t)cap->n_tokens, D = (size_t)cap->config->head_dim;
    const size_t nq = T * (size_t)cap->config->n_head * D, nkv = T * (size_t)cap->config->n_head_kv * D;
    for (int32_t i = 0; i < c->n_layers; i++) {
        if (c->layers[i] != cap->layer) continue;
        free(c->q[i]);
        free(c->k[i]);
        free(c->v[i]);
        c->q[i] = malloc(nq * sizeof(float));
        c->k[i] = malloc(nkv * sizeof(float));
        c->v[i] = malloc(nkv * sizeof(float));
        if (!c->q[i] || !c->k[i] || !c->v[i]) return OSCAR_ERR_NOMEM;
        memcpy(c->q[i], cap->q, nq * sizeof(float));
        memcpy(c->k[i], cap->k, nkv * sizeof(float));
        memcpy(c->v[i], cap->v, nkv * sizeof(float));
    }
    return OSCAR_OK;
}

static void fx_capture_free(struct fx_capture * c) {
    for (int32_t i = 0; i < c->n_layers; i++) {
        free(c->q[i]);
        free(c->k[i]);
        free(c->v[i]);
    }
    memset(c, 0, sizeof *c);
}

#endif
