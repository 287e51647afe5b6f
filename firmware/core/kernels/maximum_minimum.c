/* See maximum_minimum.h. */
#include <stdint.h>

#include "maximum_minimum.h"

#define QE_DEFINE_MAXMIN(name, type, pick)                                                    \
    void name(const qe_broadcast_t *bc, const type *input1, const type *input2, type *output) \
    {                                                                                         \
        qe_broadcast_it_t it;                                                                 \
        uint32_t i;                                                                           \
        qe_broadcast_begin(&it);                                                              \
        for (i = 0; i < bc->size; ++i) {                                                      \
            const type a = input1[it.off1];                                                   \
            const type b = input2[it.off2];                                                   \
            output[i] = (pick) ? a : b;                                                       \
            qe_broadcast_next(bc, &it);                                                       \
        }                                                                                     \
    }

QE_DEFINE_MAXMIN(qe_maximum_f32, float, a > b)
QE_DEFINE_MAXMIN(qe_minimum_f32, float, a < b)
QE_DEFINE_MAXMIN(qe_maximum_s8, int8_t, a > b)
QE_DEFINE_MAXMIN(qe_minimum_s8, int8_t, a < b)
QE_DEFINE_MAXMIN(qe_maximum_s16, int16_t, a > b)
QE_DEFINE_MAXMIN(qe_minimum_s16, int16_t, a < b)
