/* See activations_s16.h. */
#include <stdint.h>

#include "activations_s16.h"
#include "lstm_int8.h"

void qe_tanh_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift, uint32_t n,
                 const int16_t *input, int16_t *output)
{
    uint32_t i;
    for (i = 0; i < n; i++)
        output[i] = qe_lstm_tanh_s16(table, multiplier, shift, input[i]);
}

void qe_logistic_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift,
                     uint32_t n, const int16_t *input, int16_t *output)
{
    uint32_t i;
    for (i = 0; i < n; i++)
        output[i] = qe_lstm_sigmoid_s16(table, multiplier, shift, input[i]);
}
