/* Compares the CONV_2D int8 kernel of the variants without SIMD (cortex-m0, rv32: conv.h's
 * qe_conv_s8_rows on the generator's rows filter) with the reference, in one binary: the
 * variant's conv.c defines the fast qe_conv_s8_rows, carries the portable one renamed
 * qe_conv_s8_rows_reference and the reference qe_conv_s8 under its own name. Used by
 * tests/test_conv_rows.py on the host (portable C), on microbit (ARMv6-M asm) and on hifive1
 * (rv32) under QEMU, files through semihosting (checker_io.h).
 *
 * Input (host: stdin; board: conv_cases.bin), repeated cases: the int32 header[24] of
 * tests/c/conv_kernels_check.c (kind 0), the input, the filter, the bias if any, the
 * multipliers and shifts, then int32 padded_depth, has_rq, wide_h, wide_w, n_steps, words[padded_out_c * padded_depth],
 * bias'[padded_out_c], rq[12 * padded_out_c] if has_rq, steps[n_steps] (padded_out_c: out_c rounded up to 4).
 * The boards' buffers are small (MAX_*: 16 KiB of RAM); the test sends them cases that fit.
 * Output (host: stdout; board: conv_out.bin): per case qe_conv_s8's output bytes, then the
 * variant's. Exit status 0 when every case matched (the portable rows definition too), 1 when
 * one did not, 2 on bad input. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv.h"

void qe_conv_s8_rows_reference(const qe_conv_s8_rows_params_t *p, const int8_t *input,
                               const int32_t *filter, const int32_t *bias, int8_t *output,
                               int32_t *scratch);

#if (defined(__arm__) || defined(__riscv)) && defined(QE_ROWS_CHECK_LAYERS)
/* microbit, hifive1 (16 KiB of RAM), built for whole layers (MinAtar's), no step tables */
#define MAX_IN 1024
#define MAX_F 1024
#define MAX_OUT 1024
#define MAX_CH 16
#define MAX_WORDS 1024
#define MAX_SCRATCH 800
#define MAX_STEPS 1
#elif defined(__arm__) || defined(__riscv)   /* ... and for step tables, on smaller layers */
#define MAX_IN 1024
#define MAX_F 1024
#define MAX_OUT 512
#define MAX_CH 16
#define MAX_WORDS 512
#define MAX_SCRATCH 512
#define MAX_STEPS 1040      /* four channels' full-range step tables */
#else
#define MAX_IN 16384
#define MAX_F 16384
#define MAX_OUT 16384
#define MAX_CH 256
#define MAX_WORDS 8192
#define MAX_SCRATCH 8192
#define MAX_STEPS 16384
#endif
#define IN_FILE "conv_cases.bin"
#define OUT_FILE "conv_out.bin"

#include "checker_io.h"

static int8_t input_buf[MAX_IN + 4], filter_buf[MAX_F + 4];
static int32_t bias[MAX_CH], multipliers[MAX_CH];
static int8_t shifts[MAX_CH];
static int8_t out_ref[MAX_OUT + 1], out_opt[MAX_OUT + 1], out_pref[MAX_OUT + 1];
static int32_t scratch[MAX_SCRATCH], steps[MAX_STEPS];
static int32_t words[MAX_WORDS], bias_p[MAX_CH], rq[QE_CONV_RQ_WORDS * MAX_CH];

int main(void)
{
    int32_t h[24], e[5];
    int status = 0;

    if (!io_open()) {
        return io_exit(2);
    }
    while (io_read(h, sizeof h)) {
        qe_conv_s8_rows_params_t pp;
        qe_conv_s8_params_t *p = &pp.c;
        const uint32_t n_in = (uint32_t)(h[1] * h[2] * h[3] * h[4]);
        const uint32_t n_out = (uint32_t)(h[1] * h[5] * h[6] * h[7]);
        const uint32_t n_f = (uint32_t)(h[7] * h[8] * h[9] * h[4]);
        const uint32_t out_c = (uint32_t)h[7], padded_c = (out_c + 3u) & ~3u;
        const int has_bias = h[21] != 0;
        int8_t *const in = input_buf + (h[22] & 3);
        int8_t *const f = filter_buf + (h[23] & 3);
        uint32_t n_w;
        if (h[0] != 0 || n_in > MAX_IN || n_f > MAX_F || n_out > MAX_OUT || padded_c > MAX_CH
            || !io_read(in, n_in) || !io_read(f, n_f)
            || (has_bias && !io_read(bias, 4u * out_c))
            || !io_read(multipliers, 4u * out_c) || !io_read(shifts, out_c)
            || !io_read(e, sizeof e) || e[0] <= 0 || (e[0] & 1)
            || e[0] > (int32_t)QE_CONV_ROWS_MAX_DEPTH || e[2] <= 0 || e[3] <= 0
            || (uint32_t)e[2] * (uint32_t)e[3] * (uint32_t)h[4] + (uint32_t)e[0] + padded_c > MAX_SCRATCH) {
            return io_exit(2);
        }
        n_w = padded_c * (uint32_t)e[0];
        if (n_w > MAX_WORDS || !io_read(words, 4u * n_w) || !io_read(bias_p, 4u * padded_c)
            || (e[1] && !io_read(rq, 4u * QE_CONV_RQ_WORDS * padded_c))
            || e[4] < 0 || e[4] > MAX_STEPS || (e[4] && !io_read(steps, 4u * (uint32_t)e[4]))) {
            return io_exit(2);
        }
        memset(&pp, 0, sizeof pp);
        p->g.batches = (uint16_t)h[1];
        p->g.in_h = (uint16_t)h[2];
        p->g.in_w = (uint16_t)h[3];
        p->g.in_c = (uint16_t)h[4];
        p->g.out_h = (uint16_t)h[5];
        p->g.out_w = (uint16_t)h[6];
        p->g.out_c = (uint16_t)h[7];
        p->g.k_h = (uint16_t)h[8];
        p->g.k_w = (uint16_t)h[9];
        p->g.stride_h = (uint16_t)h[10];
        p->g.stride_w = (uint16_t)h[11];
        p->g.dil_h = (uint16_t)h[12];
        p->g.dil_w = (uint16_t)h[13];
        p->g.pad_top = (uint16_t)h[14];
        p->g.pad_left = (uint16_t)h[15];
        p->g.depth_multiplier = (uint16_t)h[16];
        p->input_offset = h[17];
        p->output_offset = h[18];
        p->activation_min = h[19];
        p->activation_max = h[20];
        p->multipliers = multipliers;
        p->shifts = shifts;
        pp.rq = e[1] ? rq : QE_FLASH_NULL;
        pp.steps = e[4] ? steps : QE_FLASH_NULL;
        pp.padded_depth = (uint16_t)e[0];
        pp.wide_h = (uint16_t)e[2];
        pp.wide_w = (uint16_t)e[3];
        memset(out_ref, 0x5A, sizeof out_ref);
        memset(out_opt, 0xA5, sizeof out_opt);
        memset(out_pref, 0x3C, sizeof out_pref);
        qe_conv_s8(p, in, f, has_bias ? bias : QE_FLASH_NULL, out_ref);
        memset(scratch, 0x77, sizeof scratch);
        qe_conv_s8_rows(&pp, in, words, bias_p, out_opt, scratch);
        qe_conv_s8_rows_reference(&pp, in, words, bias_p, out_pref, scratch);
        if (memcmp(out_ref, out_opt, n_out) != 0 || memcmp(out_ref, out_pref, n_out) != 0
            || (uint8_t)out_opt[n_out] != 0xA5u || (uint8_t)out_pref[n_out] != 0x3Cu) {
            status = 1;
        }
        io_write(out_ref, n_out);
        io_write(out_opt, n_out);
    }
    return io_exit(status);
}
