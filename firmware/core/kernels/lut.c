/* See lut.h. */
#include <stdint.h>

#include "lut.h"

void qe_lut_s8(const QE_FLASH int8_t table[256], uint32_t size, const int8_t *input, int8_t *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        output[i] = table[(int32_t)input[i] + 128];
    }
}
