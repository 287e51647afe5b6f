/* CONCATENATION along one axis, as TF Lite Micro's reference_ops::Concatenation: for each of
 * `outer` slices (the product of the dimensions before the axis), each input's contiguous
 * block is copied in input order. Byte-wise, so one kernel serves every dtype (TFLM's int8
 * concatenation copies too: it never rescales, so the generator requires equal quantization). Inputs are RAM
 * pointers: a constant input is emitted as an ordinary const array (RAM on AVR), not QE_FLASH. */
#ifndef QE_CONCATENATION_H
#define QE_CONCATENATION_H

#include <stdint.h>

#include "../qe_flash.h"

typedef struct {
    uint32_t outer;
    uint8_t n_inputs;
    const QE_FLASH uint32_t *block_bytes;   /* per input: bytes of one slice (axis dim * inner * size) */
} qe_concatenation_params_t;

void qe_concatenation(const qe_concatenation_params_t *p, const uint8_t *const *inputs,
                      uint8_t *output);

#endif
