/* Compares an optimized QUANTIZE variant (firmware/core/kernels/optimized/<v>/quantize.c) with
 * the reference, both in this one binary (the variant carries the reference renamed
 * qe_quantize_f32_s8_reference). Used by tests/test_kernels_optimized_quantize.py on the host
 * and on an emulated Cortex-M (files through semihosting, as fc_kernels_check.c).
 *
 * Input, repeated cases: int32 header[4] = n, zero_point, scale (float bits), inv (the
 * generator's floor(2^48 / significand) for qe_quantize_f32_s8_inv, or 0); float x[n].
 * Output: per case the reference's n int8, then the variant's. Exit 0 when all matched, 1 when
 * one did not, 2 on bad input. */
#include <stdint.h>
#include <string.h>

#include "kernels/quantize.h"

void qe_quantize_f32_s8_reference(const qe_affine_params_t *p, const float *input, int8_t *output);

#define MAX_N 1024
#define IN_FILE "q_cases.bin"
#define OUT_FILE "q_out.bin"
#include "checker_io.h"

static float x[MAX_N];
static int8_t out_ref[MAX_N], out_opt[MAX_N], out_inv[MAX_N];

int main(void)
{
    int32_t h[4];
    int status = 0;

    if (!io_open()) {
        return io_exit(2);
    }
    while (io_read(h, sizeof h)) {
        qe_affine_params_t p;
        if (h[0] <= 0 || h[0] > MAX_N || !io_read(x, 4u * (uint32_t)h[0])) {
            return io_exit(2);
        }
        memcpy(&p.scale, &h[2], sizeof p.scale);
        p.zero_point = h[1];
        p.size = (uint32_t)h[0];
        qe_quantize_f32_s8_reference(&p, x, out_ref);
        qe_quantize_f32_s8_inv(&p, (uint32_t)h[3], x, out_inv);
        if (memcmp(out_inv, out_ref, (uint32_t)h[0]) != 0) {
            status = 1;
        }
        qe_quantize_f32_s8(&p, x, out_opt);
        io_write(out_ref, p.size);
        io_write(out_opt, p.size);
        if (memcmp(out_ref, out_opt, p.size) != 0) {
            status = 1;
        }
    }
    return io_exit(status);
}
