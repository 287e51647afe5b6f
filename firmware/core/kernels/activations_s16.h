/* TANH and LOGISTIC int16 -> int16 (the int16x8 scheme's activations): TF Lite Micro's
 * reference_integer_ops::Tanh / Logistic for int16, element by element, with the table
 * arithmetic of the int8 LSTM's gates (lstm_int8.c: qe_lstm_tanh_s16, qe_lstm_sigmoid_s16,
 * checked against the interpreter on all 65,536 inputs). The generator computes TFLM's
 * input multiplier and shift (converters/qmath.py: tanh_logistic_s16_params); input and output
 * zero points are 0, the output scale 2^-15. The output may be written over the input. */
#ifndef QE_ACTIVATIONS_S16_H
#define QE_ACTIVATIONS_S16_H

#include <stdint.h>

#include "../qe_flash.h"

void qe_tanh_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift, uint32_t n,
                 const int16_t *input, int16_t *output);
void qe_logistic_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift,
                     uint32_t n, const int16_t *input, int16_t *output);

#endif
