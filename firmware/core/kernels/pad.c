/* See pad.h. */
#include <stdint.h>
#include <string.h>

#include "pad.h"

void qe_pad(const qe_pad_params_t *p, const void *input, void *output)
{
    const uint8_t *in = (const uint8_t *)input;
    uint8_t *out = (uint8_t *)output;
    const uint32_t es = p->elem_size;
    const uint32_t row_bytes = p->row * es;
    uint16_t index[QE_PAD_MAX_DIMS] = { 0, 0, 0, 0, 0 };
    uint32_t rows = 1;
    uint32_t off = p->base;
    uint32_t r;
    uint32_t i;
    int d;

    /* the pad value everywhere */
    if (es == 1) {
        memset(out, (int)(p->value & 0xFFu), p->out_size);
    } else if (es == 2) {
        for (i = 0; i < p->out_size; ++i) {
            ((uint16_t *)output)[i] = (uint16_t)p->value;
        }
    } else {
        for (i = 0; i < p->out_size; ++i) {
            ((uint32_t *)output)[i] = p->value;
        }
    }
    /* then every innermost input row at its place */
    for (d = 0; d < (int)p->ndims - 1; ++d) {
        rows *= p->in_dims[d];
    }
    for (r = 0; r < rows; ++r) {
        if (row_bytes > 0) {
            memcpy(out + (size_t)off * es, in + (size_t)r * row_bytes, row_bytes);
        }
        for (d = (int)p->ndims - 2; d >= 0; --d) {
            ++index[d];
            off += p->out_strides[d];
            if (index[d] < p->in_dims[d]) {
                break;
            }
            off -= p->out_strides[d] * p->in_dims[d];
            index[d] = 0;
        }
    }
}
