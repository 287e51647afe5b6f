/* TRANSPOSE, bit-exact with TF Lite Micro's reference kernel (transpose.cc:
 * reference_ops::Transpose): up to 5 dimensions (TFLM's limit), any element type of 1, 2 or
 * 4 bytes. The output is written in order; the generator gives, per output dimension, the
 * input's element stride along the dimension the permutation maps there. */
#ifndef QE_TRANSPOSE_H
#define QE_TRANSPOSE_H

#include <stdint.h>

#define QE_TRANSPOSE_MAX_DIMS 5

typedef struct {
    uint32_t size;                                  /* elements */
    uint32_t in_strides[QE_TRANSPOSE_MAX_DIMS];     /* input stride of output dimension d */
    uint16_t out_dims[QE_TRANSPOSE_MAX_DIMS];
    uint8_t ndims;                                  /* 1..5 */
    uint8_t elem_size;                              /* 1, 2 or 4 bytes */
} qe_transpose_params_t;

/* input and output must not overlap */
void qe_transpose(const qe_transpose_params_t *p, const void *input, void *output);

#endif
