/* See svdf.h. The two state types share one body, instantiated by a macro (C99 has no
 * templates); everything else is plain int32 arithmetic. */
#include <stdint.h>

#include "svdf.h"
#include "../requant.h"

/* Step 4, shared by both state types: bias + the rank filters of each unit, rescaled, int8. */
static void reduce_rescale(const qe_svdf_params_t *p, const int32_t *time_sums, int32_t *unit_sums,
                           int8_t *output)
{
    const uint32_t units = (uint32_t)p->filters / p->rank;
    uint32_t b;
    uint32_t i;
    uint32_t j;

    for (b = 0; b < p->batches; ++b) {
        const int32_t *s = time_sums + b * p->filters;
        int32_t *o = unit_sums + b * units;
        for (i = 0; i < units; ++i) {
            uint32_t acc = (p->bias != QE_FLASH_NULL) ? (uint32_t)p->bias[i] : 0u;
            for (j = 0; j < p->rank; ++j) {
                acc += (uint32_t)*s++;
            }
            o[i] = (int32_t)acc;
        }
    }
    for (i = 0; i < (uint32_t)p->batches * units; ++i) {
        int32_t v = qe_multiply_by_quantized_multiplier(unit_sums[i], p->multiplier_2, p->shift_2)
                    + p->output_zero_point;
        if (v < -128) {
            v = -128;
        }
        if (v > 127) {
            v = 127;
        }
        output[i] = (int8_t)v;
    }
}

#define QE_SVDF_BODY(STATE_T, STATE_MIN, STATE_MAX)                                              \
    const uint32_t total = (uint32_t)p->batches * p->filters * p->memory;                        \
    const QE_FLASH STATE_T *wt = (const QE_FLASH STATE_T *)p->weights_time;                      \
    uint32_t b;                                                                                  \
    uint32_t r;                                                                                  \
    uint32_t c;                                                                                  \
    /* 1. the whole state one place towards the front */                                        \
    for (c = 1; c < total; ++c) {                                                                \
        state[c - 1] = state[c];                                                                 \
    }                                                                                            \
    /* 2. feature matmul into each filter's newest slot */                                       \
    for (b = 0; b < p->batches; ++b) {                                                           \
        const int8_t *x = input + b * p->input_size;                                             \
        STATE_T *dst = state + b * (uint32_t)p->filters * p->memory + (p->memory - 1u);          \
        for (r = 0; r < p->filters; ++r) {                                                       \
            const QE_FLASH int8_t *w = p->weights_feature + r * (uint32_t)p->input_size;         \
            uint32_t acc = 0u;                                                                   \
            int32_t v;                                                                           \
            for (c = 0; c < p->input_size; ++c) {                                                \
                acc += (uint32_t)((int32_t)w[c] * ((int32_t)x[c] - p->input_zero_point));        \
            }                                                                                    \
            v = qe_multiply_by_quantized_multiplier((int32_t)acc, p->multiplier_1, p->shift_1); \
            if (v < (STATE_MIN)) {                                                               \
                v = (STATE_MIN);                                                                 \
            }                                                                                    \
            if (v > (STATE_MAX)) {                                                               \
                v = (STATE_MAX);                                                                 \
            }                                                                                    \
            *dst = (STATE_T)(p->state_zero_point + v);                                           \
            dst += p->memory;                                                                    \
        }                                                                                        \
    }                                                                                            \
    /* 3. time: each filter's memory against its time weights */                                 \
    for (b = 0; b < p->batches; ++b) {                                                           \
        const STATE_T *s = state + b * (uint32_t)p->filters * p->memory;                         \
        const QE_FLASH STATE_T *w = wt;                                                          \
        int32_t *out = scratch + b * (uint32_t)p->filters;                                       \
        for (r = 0; r < p->filters; ++r) {                                                       \
            uint32_t acc = 0u;                                                                   \
            for (c = 0; c < p->memory; ++c) {                                                    \
                acc += (uint32_t)((int32_t)*w++ * ((int32_t)*s++ - p->state_zero_point));        \
            }                                                                                    \
            out[r] = (int32_t)acc;                                                               \
        }                                                                                        \
    }                                                                                            \
    reduce_rescale(p, scratch, scratch + (uint32_t)p->batches * p->filters, output)

void qe_svdf_s8_s16(const qe_svdf_params_t *p, const int8_t *input, int16_t *state,
                    int8_t *output, int32_t *scratch)
{
    QE_SVDF_BODY(int16_t, -32768, 32767);
}

void qe_svdf_s8_s8(const qe_svdf_params_t *p, const int8_t *input, int8_t *state,
                   int8_t *output, int32_t *scratch)
{
    QE_SVDF_BODY(int8_t, -128, 127);
}
