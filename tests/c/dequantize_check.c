/* Compares an optimized DEQUANTIZE variant (firmware/core/kernels/optimized/<v>/dequantize.c)
 * with the reference, both in this one binary (the variant carries the reference renamed
 * qe_dequantize_s8_f32_reference), over every int8 input. Used by
 * tests/test_kernels_optimized_quantize.py on the host and on an emulated Cortex-M (files through
 * semihosting, as fc_kernels_check.c).
 *
 * Input, repeated cases: int32 zero_point, uint32 scale (float bits). Output: per case the
 * reference's 256 floats (inputs -128..127), then the variant's. Exit 0 when all matched (bit
 * for bit), 1 when one did not, 2 on bad input. */
#include <stdint.h>
#include <string.h>

#include "kernels/quantize.h"

void qe_dequantize_s8_f32_reference(const qe_affine_params_t *p, const int8_t *input,
                                    float *output);

#define IN_FILE "dq_cases.bin"
#define OUT_FILE "dq_out.bin"
#include "checker_io.h"

static int8_t q[256];
static float out_ref[256], out_opt[256];

int main(void)
{
    int32_t h[2];
    int status = 0, i;

    if (!io_open()) {
        return io_exit(2);
    }
    for (i = 0; i < 256; ++i) {
        q[i] = (int8_t)(i - 128);
    }
    while (io_read(h, sizeof h)) {
        qe_affine_params_t p;
        if (h[0] < -128 || h[0] > 127) {
            return io_exit(2);
        }
        memcpy(&p.scale, &h[1], sizeof p.scale);
        p.zero_point = h[0];
        p.size = 256u;
        qe_dequantize_s8_f32_reference(&p, q, out_ref);
        qe_dequantize_s8_f32(&p, q, out_opt);
        io_write(out_ref, sizeof out_ref);
        io_write(out_opt, sizeof out_opt);
        if (memcmp(out_ref, out_opt, sizeof out_ref) != 0) {
            status = 1;
        }
    }
    return io_exit(status);
}
