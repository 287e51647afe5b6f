/* STRIDED_SLICE, bit-exact with TF Lite Micro's reference kernel (strided_slice.cc:
 * reference_ops::StridedSlice on the input padded to 5-D): any element type of 1, 2 or 4
 * bytes. The generator resolves begin/end/strides and the begin, end and shrink-axis masks
 * with TFLM's StridedSliceStartForAxis/EndForAxis into, per dimension, a count of output
 * steps and a signed input step (stride * the input's element stride); the kernel walks the
 * output in order from input element `start`. */
#ifndef QE_STRIDED_SLICE_H
#define QE_STRIDED_SLICE_H

#include <stdint.h>

#define QE_STRIDED_SLICE_MAX_DIMS 5

typedef struct {
    uint32_t size;                                  /* output elements */
    uint32_t start;                                 /* input element of output element 0 */
    int32_t steps[QE_STRIDED_SLICE_MAX_DIMS];       /* input step per output dimension */
    uint16_t counts[QE_STRIDED_SLICE_MAX_DIMS];     /* output steps per dimension */
    uint8_t ndims;                                  /* 1..5 */
    uint8_t elem_size;                              /* 1, 2 or 4 bytes */
} qe_strided_slice_params_t;

/* input and output must not overlap */
void qe_strided_slice(const qe_strided_slice_params_t *p, const void *input, void *output);

#endif
