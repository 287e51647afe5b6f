/* The geometry shared by CONV_2D, DEPTHWISE_CONV_2D, MAX_POOL_2D and AVERAGE_POOL_2D on NHWC
 * tensors. The generator (converters/cgen.py) computes the padding exactly as TFLM's
 * ComputePaddingHeightWidth does (SAME: half the total padding before, the odd pixel after;
 * VALID: none) and checks the output shape against the model. */
#ifndef QE_WINDOW_H
#define QE_WINDOW_H

#include <stdint.h>

#include "../qe_flash.h"

typedef struct {
    uint16_t batches;
    uint16_t in_h, in_w, in_c;
    uint16_t out_h, out_w, out_c;
    uint16_t k_h, k_w;              /* filter or pooling window */
    uint16_t stride_h, stride_w;
    uint16_t dil_h, dil_w;          /* 1 for pooling */
    uint16_t pad_top, pad_left;
    uint16_t depth_multiplier;      /* DEPTHWISE_CONV_2D: out_c = in_c * depth_multiplier */
} qe_window_t;

/* Per-channel int8 requantization and the fused activation, shared by the int8 convolutions. */
typedef struct {
    qe_window_t g;
    int32_t input_offset;           /* -input zero point */
    int32_t output_offset;          /* +output zero point */
    int32_t activation_min;
    int32_t activation_max;
    const QE_FLASH int32_t *multipliers;  /* Q31, one per output channel */
    const QE_FLASH int8_t *shifts;            /* TFLite convention, one per output channel */
} qe_conv_s8_params_t;

typedef struct {
    qe_window_t g;
    float activation_min;           /* -FLT_MAX/FLT_MAX when there is no fused activation */
    float activation_max;
} qe_conv_f32_params_t;

/* Pooling: int8 keeps the input's quantization (TFLM does not rescale), so only the clamp. */
typedef struct {
    qe_window_t g;
    int32_t activation_min;
    int32_t activation_max;
} qe_pool_s8_params_t;

typedef qe_conv_f32_params_t qe_pool_f32_params_t;

#endif /* QE_WINDOW_H */
