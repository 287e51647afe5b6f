/* float32 RELU, RELU6, TANH, LOGISTIC, bit-exact with TF Lite Micro's reference kernels when
 * the same libm is used (TANH: std::tanh(float) = tanhf; LOGISTIC: expf with TFLM's cutoffs).
 *
 * The libm function is passed in by the generated code rather than called here, so the kernel
 * library itself never needs libm: only a model that uses TANH, LOGISTIC or SOFTMAX on floats
 * references tanhf/expf, and only its firmware has to link with -lm. */
#ifndef QE_ACTIVATIONS_F32_H
#define QE_ACTIVATIONS_F32_H

#include <stdint.h>

typedef float (*qe_f32_fn)(float);

/* x < 0 ? 0 : x (NaN and -0.0 pass through, as in TFLM's ReluFloat) */
void qe_relu_f32(uint32_t size, const float *input, float *output);
/* x > 6 ? 6 : x < 0 ? 0 : x */
void qe_relu6_f32(uint32_t size, const float *input, float *output);
/* tanh_fn(x) */
void qe_tanh_f32(uint32_t size, qe_f32_fn tanh_fn, const float *input, float *output);
/* x > 16.619047f ? 1 : x < -9 ? exp(x) : 1 / (1 + exp(-x)) */
void qe_logistic_f32(uint32_t size, qe_f32_fn exp_fn, const float *input, float *output);

#endif
