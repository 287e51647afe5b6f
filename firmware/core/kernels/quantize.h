/* QUANTIZE (float -> int8/int16) and DEQUANTIZE (int8/int16 -> float), reference kernels
 * bit-exact with TF Lite Micro's. */
#ifndef QE_QUANTIZE_H
#define QE_QUANTIZE_H

#include <stdint.h>

typedef struct {
    float scale;
    int32_t zero_point;
    uint32_t size;              /* number of elements */
} qe_affine_params_t;

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output);
void qe_dequantize_s8_f32(const qe_affine_params_t *p, const int8_t *input, float *output);
void qe_quantize_f32_s16(const qe_affine_params_t *p, const float *input, int16_t *output);
void qe_dequantize_s16_f32(const qe_affine_params_t *p, const int16_t *input, float *output);

#endif
