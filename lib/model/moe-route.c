// moe-route.c - sigmoid expert routing (glm4_moe; DeepSeek-V3's noaux_tc): see moe-route.h.
//
// As transformers' Glm4MoeTopkRouter / Glm4MoeMoE.route_tokens_to_experts computes it in fp32:
// the group score is the sum of a group's two best biased scores, groups outside the best
// topk_group never compete (transformers 5 masks them to -inf, llama.cpp excludes them: the
// same), and the weights are renormalised with + 1e-20 (llama.cpp clamps the sum below at
// 2^-14 instead; only top-k sums that small differ). Selection is by repeated argmax, so a tie
// goes to the lower index and the result does not depend on any sort's stability.
#include "model/moe-route.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

// Index of the largest of x[0..n) (the first on a tie); x holds at least one value > -inf.
static int32_t argmax(const float * x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void osc_moe_route_sigmoid(const struct oscar_model_config * c, const float * bias, float * scores, int32_t * top_e,
                           float * top_w) {
    const int32_t E = c->n_expert, K = c->n_expert_used;
    const int32_t G = c->n_expert_group > 1 ? c->n_expert_group : 1, per = E / G;
    float choice[OSCAR_MAX_EXPERTS], group[OSCAR_MAX_EXPERTS]; // E <= OSCAR_MAX_EXPERTS (osc_model_config_check)
    for (int32_t e = 0; e < E; e++) {
        scores[e] = 1.0f / (1.0f + expf(-scores[e]));
        choice[e] = scores[e] + (bias ? bias[e] : 0.0f);
    }
    if (G > 1) {
        for (int32_t g = 0; g < G; g++) { // the two best of each group (per >= 2)
            const float * x = choice + (size_t) g * per;
            float a = -INFINITY, b = -INFINITY;
            for (int32_t i = 0; i < per; i++) {
                if (x[i] > a) b = a, a = x[i];
                else if (x[i] > b) b = x[i];
            }
            group[g] = a + b;
        }
        bool keep[OSCAR_MAX_EXPERTS] = {false};
        for (int32_t j = 0; j < c->n_group_used; j++) {
            const int32_t g = argmax(group, G);
            keep[g] = true, group[g] = -INFINITY;
        }
        for (int32_t g = 0; g < G; g++)
            for (int32_t i = 0; !keep[g] && i < per; i++) choice[(size_t) g * per + i] = -INFINITY;
    }
    float sum = 0.0f;
    for (int32_t j = 0; j < K; j++) { // the kept groups hold >= K experts (osc_model_config_check)
        const int32_t e = argmax(choice, E);
        top_e[j] = e, top_w[j] = scores[e], choice[e] = -INFINITY;
        sum += top_w[j];
    }
    const float scale = c->expert_scale != 0.0f ? c->expert_scale : 1.0f;
    for (int32_t j = 0; j < K; j++) top_w[j] = (c->expert_norm_topk ? top_w[j] / (sum + 1e-20f) : top_w[j]) * scale;
}
