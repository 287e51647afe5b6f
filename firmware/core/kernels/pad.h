/* PAD and PADV2 (constant padding), bit-exact with TF Lite Micro's reference kernels (pad.cc:
 * reference_ops::Pad / PadImageStyle, which give the same bytes).
 *
 * Up to 5 dimensions, any element type of 1, 2 or 4 bytes: the output is filled with the pad
 * value, then each innermost input row is copied to its place. The pad value is given as the
 * element's bits (float32: its IEEE bits; int8 PAD: the output zero point, as TFLM). */
#ifndef QE_PAD_H
#define QE_PAD_H

#include <stdint.h>

#define QE_PAD_MAX_DIMS 5

typedef struct {
    uint32_t out_size;                          /* output elements */
    uint32_t base;                              /* output offset of input element 0 */
    uint32_t row;                               /* elements of an innermost input row */
    uint32_t out_strides[QE_PAD_MAX_DIMS];      /* output element strides */
    uint16_t in_dims[QE_PAD_MAX_DIMS];          /* input shape */
    uint8_t ndims;                              /* 1..5 */
    uint8_t elem_size;                          /* 1, 2 or 4 bytes */
    uint32_t value;                             /* the pad element's bits */
} qe_pad_params_t;

/* input and output must not overlap */
void qe_pad(const qe_pad_params_t *p, const void *input, void *output);

#endif
