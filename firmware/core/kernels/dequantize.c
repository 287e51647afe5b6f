/* DEQUANTIZE int8 -> float32, bit-exact with TF Lite Micro's reference_ops::Dequantize:
 *     x = (float)((double)scale * (q - zero_point))
 * The double product of a float (24-bit significand) and an integer below 2^9 is exact, so
 * rounding it once to float equals the float product computed here: same bits, no double
 * arithmetic needed (AVR's double is 32 bits anyway). */
#include <stdint.h>

#include "quantize.h"

void qe_dequantize_s8_f32(const qe_affine_params_t *p, const int8_t *input, float *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i) {
        output[i] = p->scale * (float)((int32_t)input[i] - p->zero_point);
    }
}

/* int16: |q - zero_point| < 2^17, so the float product is again exactly the rounded double one. */
void qe_dequantize_s16_f32(const qe_affine_params_t *p, const int16_t *input, float *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i) {
        output[i] = p->scale * (float)((int32_t)input[i] - p->zero_point);
    }
}
