/* Element-wise int8 -> int8 ops as a 256-entry lookup table.
 *
 * An int8 element-wise op is a function of 256 possible inputs, so the generator evaluates
 * TF Lite Micro's arithmetic for each of them once, in Python (converters/qmath.py: the gemmlowp
 * fixed-point tanh/logistic of reference_integer_ops::Tanh/::Logistic, ReluQuantized's
 * requantization, Relu6's clamp), and emits the table as const data. Bit-exact by construction
 * and checked exhaustively against the tflite-micro interpreter (tests/test_ops_golden.py). */
#ifndef QE_LUT_H
#define QE_LUT_H

#include <stdint.h>

#include "../qe_flash.h"

/* output[i] = table[input[i] + 128]; input and output may be the same buffer. */
void qe_lut_s8(const QE_FLASH int8_t table[256], uint32_t size, const int8_t *input, int8_t *output);

#endif
