/* QUANTIZE (float -> int8/int16; int8/int16/int32 -> int8/int16/int32 at another scale) and DEQUANTIZE (int8/int16 -> float), reference kernels
 * bit-exact with TF Lite Micro's. */
#ifndef QE_QUANTIZE_H
#define QE_QUANTIZE_H

#include <stdint.h>

typedef struct {
    float scale;
    int32_t zero_point;
    uint32_t size;              /* number of elements */
} qe_affine_params_t;

/* QUANTIZE of an integer tensor to another scale (and type): TFLM's reference_ops::Requantize,
 *     q = clamp(MultiplyByQuantizedMultiplier(x - input_zero_point, multiplier, shift)
 *               + output_zero_point, output type's range)
 * with multiplier/shift from QuantizeMultiplier(input_scale / output_scale) in double. */
typedef struct {
    int32_t multiplier;
    int32_t shift;
    int32_t input_zero_point;
    int32_t output_zero_point;
    uint32_t size;              /* number of elements */
} qe_requantize_params_t;

void qe_requantize_s8_s8(const qe_requantize_params_t *p, const int8_t *input, int8_t *output);
void qe_requantize_s16_s8(const qe_requantize_params_t *p, const int16_t *input, int8_t *output);
void qe_requantize_s8_s16(const qe_requantize_params_t *p, const int8_t *input, int16_t *output);
void qe_requantize_s16_s16(const qe_requantize_params_t *p, const int16_t *input,
                           int16_t *output);
/* with int32 on one side (TFLM's pairs: int8/int16 -> int32, int32 -> int8/int16); an int32
 * output is clamped to int32's range, where TFLM's int32 sum would overflow */
void qe_requantize_s8_s32(const qe_requantize_params_t *p, const int8_t *input, int32_t *output);
void qe_requantize_s16_s32(const qe_requantize_params_t *p, const int16_t *input,
                           int32_t *output);
void qe_requantize_s32_s8(const qe_requantize_params_t *p, const int32_t *input, int8_t *output);
void qe_requantize_s32_s16(const qe_requantize_params_t *p, const int32_t *input,
                           int16_t *output);

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output);
/* inv = floor(2^48 / m) for the scale's 24-bit significand m (normal positive scales), or 0 */
void qe_quantize_f32_s8_inv(const qe_affine_params_t *p, uint32_t inv, const float *input,
                            int8_t *output);
void qe_dequantize_s8_f32(const qe_affine_params_t *p, const int8_t *input, float *output);
void qe_quantize_f32_s16(const qe_affine_params_t *p, const float *input, int16_t *output);
void qe_dequantize_s16_f32(const qe_affine_params_t *p, const int16_t *input, float *output);

#endif
