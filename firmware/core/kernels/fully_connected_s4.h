/* FULLY_CONNECTED with int4 weights (int8 input and output), reference kernel, bit-exact with
 * TF Lite Micro's int4 path: TFLM unpacks the packed weights into int8 at Prepare
 * (tensor_utils::UnpackDenseInt4IntoInt8) and runs reference_integer_ops::FullyConnected on
 * them; this kernel reads the packed weights from flash and unpacks each one in the inner
 * loop, so no int8 copy of the weights is ever held in RAM.
 *
 * Packing (TFLite's INT4 tensors): the weights [output_depth][accum_depth] in row-major order,
 * element e in byte e / 2, its low nibble when e is even, its high nibble when e is odd, each a
 * two's-complement value in [-8, 7]; an odd count leaves the last byte's high nibble unused.
 * A row starts in the middle of a byte when accum_depth is odd. Parameters are those of
 * qe_fully_connected_s8 (per-tensor weights: TFLM's FULLY_CONNECTED refuses per-channel int4). */
#ifndef QE_FULLY_CONNECTED_S4_H
#define QE_FULLY_CONNECTED_S4_H

#include <stdint.h>

#include "../qe_flash.h"
#include "fully_connected.h"

/* bias may be QE_FLASH_NULL; weights hold (output_depth * accum_depth + 1) / 2 bytes */
void qe_fully_connected_s4(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH uint8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output);

#endif
