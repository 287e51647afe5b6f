/* MAX_POOL_2D (max_pool.c) and AVERAGE_POOL_2D (average_pool.c) reference kernels, bit-exact
 * with TF Lite Micro's reference_integer_ops::MaxPool/AveragePool (int8: the output keeps the
 * input's quantization) and reference_ops::MaxPool/AveragePool (float32). NHWC; the window is
 * clipped to the image (padding is never counted, also not in the average's divisor). */
#ifndef QE_POOLING_H
#define QE_POOLING_H

#include <stdint.h>

#include "window.h"

void qe_max_pool_s8(const qe_pool_s8_params_t *p, const int8_t *input, int8_t *output);
void qe_max_pool_f32(const qe_pool_f32_params_t *p, const float *input, float *output);
/* int8: the window sum rounded half away from zero by integer division (TFLM's rounding) */
void qe_average_pool_s8(const qe_pool_s8_params_t *p, const int8_t *input, int8_t *output);
/* float32: one running float sum, divided by the (float) count of pixels in the window */
void qe_average_pool_f32(const qe_pool_f32_params_t *p, const float *input, float *output);

/* Internal: the window of output pixel (oy, ox) clipped to the image. */
typedef struct {
    int32_t iy0, ix0;               /* top-left input pixel of the unclipped window */
    int32_t y_start, y_end, x_start, x_end;  /* filter rows/columns inside the image */
} qe_pool_window_t;

void qe_pool_window(const qe_window_t *g, int32_t oy, int32_t ox, qe_pool_window_t *w);

#endif
