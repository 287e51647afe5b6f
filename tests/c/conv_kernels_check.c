/* Compares the optimized CONV_2D and DEPTHWISE_CONV_2D int8 kernels of a variant
 * (firmware/core/kernels/optimized/<v>/conv.c, depthwise_conv.c) with the reference ones, all in
 * this one binary: the variant's files define the fast qe_conv_s8 / qe_depthwise_conv_s8 and
 * carry the reference ones renamed *_reference. Used by tests/test_conv_kernels_optimized.py on
 * the host (portable C) and on an emulated Cortex-M4 (the DSP path; files through semihosting,
 * as tests/c/fc_kernels_check.c, whose I/O code this reuses).
 *
 * Input (host: stdin; board: conv_cases.bin), repeated cases:
 *   int32 header[24] = kind (0: CONV_2D, 1: DEPTHWISE_CONV_2D), batches, in_h, in_w, in_c,
 *       out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left,
 *       depth_multiplier, input_offset, output_offset, activation_min, activation_max,
 *       has_bias, input misalignment (0..3), filter misalignment (0..3)
 *   int8 input[batches * in_h * in_w * in_c], int8 filter[out_c * k_h * k_w * (kind 0: in_c, 1: 1)],
 *   int32 bias[out_c] if has_bias, int32 multipliers[out_c], int8 shifts[out_c]
 *   kind 2 (CONV_2D on the packed filter, conv.h's qe_conv_s8_packed) then has: int32
 *   padded_depth, int32 has_mm, int32 words[padded_out_c * padded_depth / 2], int32
 *   bias'[padded_out_c], int32 mm[3 * padded_out_c] if has_mm (padded_out_c: out_c rounded up to
 *   4); the reference is qe_conv_s8_reference on the original filter, and the portable
 *   qe_conv_s8_packed_reference must equal it too (else status 1).
 *   kind 4 (DEPTHWISE_CONV_2D on the packed filter, depthwise_conv.h's
 *   qe_depthwise_conv_s8_packed; depth multiplier 1) then has: int32 padded_c, wide_h, wide_w,
 *   has_mm, int32 words[2 * k_h * k_w * padded_c / 4], int32 bias'[padded_c], int32
 *   mm[3 * padded_c] if has_mm; compared as kind 2 (with qe_depthwise_conv_s8_reference).
 *   kind 5 (CONV_2D on the widened image, conv.h's qe_conv_s8_wide; dil_w 1) then has: int32
 *   in_cp, wide_h, wide_w, has_mm, int32 words[padded_out_c * k_h * k_w * in_cp / 2], int32
 *   bias'[padded_out_c], int32 mm[3 * padded_out_c] if has_mm; compared as kind 2.
 *   kind 3 (MAX_POOL_2D, qe_max_pool_s8; out_c = in_c, activation_min/max the clamp) has only
 *   the input after the header (no filter, bias, multipliers or shifts).
 * Output (host: stdout; board: conv_out.bin): per case the reference's output bytes, then the
 * variant's. Exit status 0 when every case matched, 1 when one did not, 2 on bad input. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/depthwise_conv.h"
#include "kernels/pooling.h"

void qe_conv_s8_reference(const qe_conv_s8_params_t *p, const int8_t *input,
                          const int8_t *filter, const int32_t *bias, int8_t *output);
void qe_conv_s8_packed_reference(const qe_conv_s8_packed_params_t *p, const int8_t *input,
                                 const int32_t *filter, const int32_t *bias, int8_t *output);
void qe_depthwise_conv_s8_packed_reference(const qe_dw_s8_packed_params_t *p,
                                           const int8_t *input, const int32_t *filter,
                                           const int32_t *bias, int8_t *output, int16_t *scratch);
void qe_conv_s8_wide_reference(const qe_conv_s8_wide_params_t *p, const int8_t *input,
                               const int32_t *filter, const int32_t *bias, int8_t *output,
                               int16_t *scratch);
void qe_max_pool_s8_reference(const qe_pool_s8_params_t *p, const int8_t *input, int8_t *output);
void qe_depthwise_conv_s8_reference(const qe_conv_s8_params_t *p, const int8_t *input,
                                    const int8_t *filter, const int32_t *bias, int8_t *output);

#define MAX_IN 16384
#define MAX_F 16384
#define MAX_OUT 16384
#define MAX_CH 512

#define IN_FILE "conv_cases.bin"
#define OUT_FILE "conv_out.bin"
#include "checker_io.h"

static int8_t input_buf[MAX_IN + 4], filter_buf[MAX_F + 4];
static int32_t bias[MAX_CH], multipliers[MAX_CH];
static int8_t shifts[MAX_CH];
static int8_t out_ref[MAX_OUT + 1], out_opt[MAX_OUT + 1], out_pref[MAX_OUT + 1];
#define MAX_WORDS 8192
static int32_t words[MAX_WORDS], bias_p[MAX_CH], mm[3 * MAX_CH];
#define MAX_SCRATCH 32768
static int16_t scratch[MAX_SCRATCH / 2] __attribute__((aligned(16)));

int main(void)
{
    int32_t h[24];
    int status = 0;

    if (!io_open()) {
        return io_exit(2);
    }
    while (io_read(h, sizeof h)) {
        qe_conv_s8_params_t p;
        const uint32_t kind = (uint32_t)h[0];
        const uint32_t n_in = (uint32_t)(h[1] * h[2] * h[3] * h[4]);
        const uint32_t n_out = (uint32_t)(h[1] * h[5] * h[6] * h[7]);
        const uint32_t n_f = (kind == 3u) ? 0u : (uint32_t)(h[7] * h[8] * h[9] * ((kind == 1u || kind == 4u) ? 1 : h[4]));
        const uint32_t out_c = (uint32_t)h[7];
        const int has_bias = h[21] != 0 && kind != 3u;
        int8_t *const in = input_buf + (h[22] & 3);
        int8_t *const f = filter_buf + (h[23] & 3);
        int k;

        if (kind > 5u || n_in > MAX_IN || n_f > MAX_F || n_out > MAX_OUT || out_c > MAX_CH
            || !io_read(in, n_in) || (n_f > 0u && !io_read(f, n_f))
            || (has_bias && !io_read(bias, 4u * out_c))
            || (kind != 3u && (!io_read(multipliers, 4u * out_c) || !io_read(shifts, out_c)))) {
            return io_exit(2);
        }
        memset(&p, 0, sizeof p);
        p.g.batches = (uint16_t)h[1];
        p.g.in_h = (uint16_t)h[2];
        p.g.in_w = (uint16_t)h[3];
        p.g.in_c = (uint16_t)h[4];
        p.g.out_h = (uint16_t)h[5];
        p.g.out_w = (uint16_t)h[6];
        p.g.out_c = (uint16_t)h[7];
        p.g.k_h = (uint16_t)h[8];
        p.g.k_w = (uint16_t)h[9];
        p.g.stride_h = (uint16_t)h[10];
        p.g.stride_w = (uint16_t)h[11];
        p.g.dil_h = (uint16_t)h[12];
        p.g.dil_w = (uint16_t)h[13];
        p.g.pad_top = (uint16_t)h[14];
        p.g.pad_left = (uint16_t)h[15];
        p.g.depth_multiplier = (uint16_t)h[16];
        p.input_offset = h[17];
        p.output_offset = h[18];
        p.activation_min = h[19];
        p.activation_max = h[20];
        p.multipliers = multipliers;
        p.shifts = shifts;
        memset(out_ref, 0x5A, sizeof out_ref);
        memset(out_opt, 0xA5, sizeof out_opt);
        if (kind == 5u) {
            qe_conv_s8_wide_params_t pp;
            int32_t e[4];
            uint32_t padded_c = (out_c + 3u) & ~3u, n_w;
            if (!io_read(e, sizeof e) || e[0] <= 0 || (e[0] & 1) || padded_c > MAX_CH
                || (uint32_t)e[0] * (uint32_t)e[1] * (uint32_t)e[2] * 2u > MAX_SCRATCH) {
                return io_exit(2);
            }
            n_w = padded_c * (uint32_t)(h[8] * h[9]) * (uint32_t)e[0] / 2u;
            if (n_w > MAX_WORDS || !io_read(words, 4u * n_w) || !io_read(bias_p, 4u * padded_c)
                || (e[3] && !io_read(mm, 12u * padded_c))) {
                return io_exit(2);
            }
            pp.c = p;
            pp.mm = e[3] ? mm : QE_FLASH_NULL;
            pp.in_cp = (uint16_t)e[0];
            pp.wide_h = (uint16_t)e[1];
            pp.wide_w = (uint16_t)e[2];
            memset(out_pref, 0x3C, sizeof out_pref);
            memset(scratch, 0x77, sizeof scratch);
            qe_conv_s8_reference(&p, in, f, has_bias ? bias : QE_FLASH_NULL, out_ref);
            qe_conv_s8_wide(&pp, in, words, bias_p, out_opt, scratch);
            qe_conv_s8_wide_reference(&pp, in, words, bias_p, out_pref, scratch);
            if (memcmp(out_ref, out_pref, n_out) != 0 || (uint8_t)out_pref[n_out] != 0x3Cu) {
                status = 1;
            }
        } else if (kind == 4u) {
            qe_dw_s8_packed_params_t pp;
            int32_t e[4];
            uint32_t n_w;
            if (!io_read(e, sizeof e) || e[0] <= 0 || (e[0] & 3) || e[0] > (int32_t)MAX_CH
                || (uint32_t)e[0] * (uint32_t)e[1] * (uint32_t)e[2] * 2u > MAX_SCRATCH) {
                return io_exit(2);
            }
            n_w = (uint32_t)(h[8] * h[9]) * (uint32_t)e[0] / 2u;
            if (n_w > MAX_WORDS || !io_read(words, 4u * n_w) || !io_read(bias_p, 4u * (uint32_t)e[0])
                || (e[3] && !io_read(mm, 12u * (uint32_t)e[0]))) {
                return io_exit(2);
            }
            pp.c = p;
            pp.mm = e[3] ? mm : QE_FLASH_NULL;
            pp.padded_c = (uint16_t)e[0];
            pp.wide_h = (uint16_t)e[1];
            pp.wide_w = (uint16_t)e[2];
            memset(out_pref, 0x3C, sizeof out_pref);
            memset(scratch, 0x77, sizeof scratch);
            qe_depthwise_conv_s8_reference(&p, in, f, has_bias ? bias : QE_FLASH_NULL, out_ref);
            qe_depthwise_conv_s8_packed(&pp, in, words, bias_p, out_opt, scratch);
            qe_depthwise_conv_s8_packed_reference(&pp, in, words, bias_p, out_pref, scratch);
            if (memcmp(out_ref, out_pref, n_out) != 0 || (uint8_t)out_pref[n_out] != 0x3Cu) {
                status = 1;
            }
        } else if (kind == 3u) {
            qe_pool_s8_params_t pp;
            pp.g = p.g;
            pp.activation_min = p.activation_min;
            pp.activation_max = p.activation_max;
            qe_max_pool_s8_reference(&pp, in, out_ref);
            qe_max_pool_s8(&pp, in, out_opt);
        } else if (kind == 2u) {
            qe_conv_s8_packed_params_t pp;
            int32_t pd_mm[2];
            uint32_t padded_c = (out_c + 3u) & ~3u, n_w;
            if (!io_read(pd_mm, sizeof pd_mm) || pd_mm[0] <= 0 || (pd_mm[0] & 3)) {
                return io_exit(2);
            }
            n_w = padded_c * (uint32_t)pd_mm[0] / 2u;
            if (n_w > MAX_WORDS || padded_c > MAX_CH || !io_read(words, 4u * n_w)
                || !io_read(bias_p, 4u * padded_c)
                || (pd_mm[1] && !io_read(mm, 12u * padded_c))) {
                return io_exit(2);
            }
            pp.c = p;
            pp.mm = pd_mm[1] ? mm : QE_FLASH_NULL;
            pp.padded_depth = (uint16_t)pd_mm[0];
            memset(out_pref, 0x3C, sizeof out_pref);
            qe_conv_s8_reference(&p, in, f, has_bias ? bias : QE_FLASH_NULL, out_ref);
            qe_conv_s8_packed(&pp, in, words, bias_p, out_opt);
            qe_conv_s8_packed_reference(&pp, in, words, bias_p, out_pref);
            if (memcmp(out_ref, out_pref, n_out) != 0 || (uint8_t)out_pref[n_out] != 0x3Cu) {
                status = 1;
            }
        } else if (kind == 0u) {
            qe_conv_s8_reference(&p, in, f, has_bias ? bias : QE_FLASH_NULL, out_ref);
            qe_conv_s8(&p, in, f, has_bias ? bias : QE_FLASH_NULL, out_opt);
        } else {
            qe_depthwise_conv_s8_reference(&p, in, f, has_bias ? bias : QE_FLASH_NULL, out_ref);
            qe_depthwise_conv_s8(&p, in, f, has_bias ? bias : QE_FLASH_NULL, out_opt);
        }
        io_write(out_ref, n_out);
        io_write(out_opt, n_out);
        /* the variant must write exactly its outputs: the byte after them keeps its fill */
        k = memcmp(out_ref, out_opt, n_out);
        if (k != 0 || (uint8_t)out_opt[n_out] != 0xA5u) {
            status = 1;
        }
    }
    return io_exit(status);
}
