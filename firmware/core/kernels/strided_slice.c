/* See strided_slice.h. */
#include <stdint.h>

#include "strided_slice.h"

#define QE_STRIDED_SLICE_LOOP(type)                                                    \
    do {                                                                               \
        const type *in = (const type *)input;                                          \
        type *out = (type *)output;                                                    \
        for (i = 0; i < p->size; ++i) {                                                \
            out[i] = in[off];                                                          \
            for (d = (int)p->ndims - 1; d >= 0; --d) {                                 \
                ++index[d];                                                            \
                off += p->steps[d];                                                    \
                if (index[d] < p->counts[d]) {                                         \
                    break;                                                             \
                }                                                                      \
                off -= p->steps[d] * (int32_t)p->counts[d];                            \
                index[d] = 0;                                                          \
            }                                                                          \
        }                                                                              \
    } while (0)

void qe_strided_slice(const qe_strided_slice_params_t *p, const void *input, void *output)
{
    uint16_t index[QE_STRIDED_SLICE_MAX_DIMS] = { 0, 0, 0, 0, 0 };
    int32_t off = (int32_t)p->start;
    uint32_t i;
    int d;

    if (p->elem_size == 1) {
        QE_STRIDED_SLICE_LOOP(uint8_t);
    } else if (p->elem_size == 2) {
        QE_STRIDED_SLICE_LOOP(uint16_t);
    } else {
        QE_STRIDED_SLICE_LOOP(uint32_t);
    }
}
