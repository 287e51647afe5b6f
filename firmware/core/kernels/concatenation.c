/* See concatenation.h. */
#include <stdint.h>

#include "concatenation.h"

void qe_concatenation(const qe_concatenation_params_t *p, const uint8_t *const *inputs,
                      uint8_t *output)
{
    uint32_t k, b;
    uint8_t i;

    for (k = 0; k < p->outer; ++k) {
        for (i = 0; i < p->n_inputs; ++i) {
            const uint32_t n = p->block_bytes[i];
            const uint8_t *src = inputs[i] + k * n;
            for (b = 0; b < n; ++b) {
                *output++ = src[b];
            }
        }
    }
}
