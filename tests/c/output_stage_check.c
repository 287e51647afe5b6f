/* The kernels' shared output stage (firmware/core/requant.h) on given inputs, for
 * tests/test_output_stage.py, which compares the results with the Python twins
 * (quarl_edge/converters/qmath.py: offset_clamp, requantize_output, multiply_by_quantized_multiplier_int64)
 * and builds this with -fsanitize=undefined -fno-sanitize-recover=all.
 *
 * stdin, repeated records (little-endian):
 *   int64 acc64; int32 scaled, acc, multiplier, shift, shift64, offset, act_min, act_max
 * stdout, per record: int32
 *   qe_offset_clamp(scaled, offset, act_min, act_max),
 *   qe_requantize_output(acc, multiplier, shift, offset, act_min, act_max),
 *   qe_offset_clamp(qe_multiply_by_quantized_multiplier_64(acc64, multiplier, shift64), ...)
 *       (the int16x8 FULLY_CONNECTED's output stage)
 * Exit status 0, or 2 on a truncated record. */
#include <stdint.h>
#include <stdio.h>

#include "requant.h"

int main(void)
{
    int64_t acc64;
    int32_t r[8];

    while (fread(&acc64, sizeof acc64, 1, stdin) == 1) {
        int32_t out[3];
        if (fread(r, sizeof r, 1, stdin) != 1) {
            return 2;
        }
        out[0] = qe_offset_clamp(r[0], r[5], r[6], r[7]);
        out[1] = qe_requantize_output(r[1], r[2], r[3], r[5], r[6], r[7]);
        out[2] = qe_offset_clamp(qe_multiply_by_quantized_multiplier_64(acc64, r[2], r[4]), r[5],
                                 r[6], r[7]);
        if (fwrite(out, sizeof out, 1, stdout) != 1) {
            return 3;
        }
    }
    return fflush(stdout) == 0 ? 0 : 3;
}
