/* See transpose.h. */
#include <stdint.h>

#include "transpose.h"

#define QE_TRANSPOSE_LOOP(type)                                                        \
    do {                                                                               \
        const type *in = (const type *)input;                                          \
        type *out = (type *)output;                                                    \
        for (i = 0; i < p->size; ++i) {                                                \
            out[i] = in[off];                                                          \
            for (d = (int)p->ndims - 1; d >= 0; --d) {                                 \
                ++index[d];                                                            \
                off += p->in_strides[d];                                               \
                if (index[d] < p->out_dims[d]) {                                       \
                    break;                                                             \
                }                                                                      \
                off -= p->in_strides[d] * p->out_dims[d];                              \
                index[d] = 0;                                                          \
            }                                                                          \
        }                                                                              \
    } while (0)

void qe_transpose(const qe_transpose_params_t *p, const void *input, void *output)
{
    uint16_t index[QE_TRANSPOSE_MAX_DIMS] = { 0, 0, 0, 0, 0 };
    uint32_t off = 0;
    uint32_t i;
    int d;

    if (p->elem_size == 1) {
        QE_TRANSPOSE_LOOP(uint8_t);
    } else if (p->elem_size == 2) {
        QE_TRANSPOSE_LOOP(uint16_t);
    } else {
        QE_TRANSPOSE_LOOP(uint32_t);
    }
}
