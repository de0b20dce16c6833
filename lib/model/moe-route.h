// moe-route.h - sigmoid expert routing with a choice-only bias and grouped top-k (glm4_moe).
#ifndef OSCAR_MODEL_MOE_ROUTE_H
#define OSCAR_MODEL_MOE_ROUTE_H

#include <stdint.h>

#include "model/model.h"

// One token's routing as model.h describes it for OSCAR_GATING_SIGMOID: scores [E] holds the
// router logits and is overwritten with their sigmoids; bias [E] (NULL: none) steers the choice
// only. Writes the top-k experts (best first, ties to the lower index) to top_e [k] and their
// weights to top_w [k]. c passed osc_model_config_check (groups divide the experts, k fits).
void osc_moe_route_sigmoid(const struct oscar_model_config * c, const float * bias, float * scores, int32_t * top_e,
                           float * top_w);

#endif
