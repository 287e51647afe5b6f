/* FULLY_CONNECTED with packed int4 weights, optimized variant "cortex-m-dsp" (see ../README.md):
 * qe_fully_connected_s4 with exactly the reference's results (../../fully_connected_s4.c), on
 * the same TFLite packing (the generator's model.c is the same for every board).
 *
 * Eight weights per 32-bit load, unpacked by one AND each, no sign-extension: a weight moved
 * into the top nibble of a 16-bit lane is, read as an int16, 4096 times its int4 value. With M =
 * 0xF000F000 and the loaded word W holding w0..w7 (w0 in bits 0..3, little-endian bytes, low
 * nibble first), (W << 12) & M is the lane pair (4096 w0, 4096 w4), (W << 8) & M (4096 w1,
 * 4096 w5), (W << 4) & M (4096 w2, 4096 w6) and W & M (4096 w3, 4096 w7). The input is widened
 * once per batch into a stack buffer of int16 pairs in that order, (x0 + io, x4 + io),
 * (x1 + io, x5 + io), ..., so each SMLAD multiplies one lane pair: 4 AND (with the shift in the
 * operand) and 4 SMLAD per 8 weights and row, two rows sharing each load of 4 input pairs.
 *
 * Why the integers are the reference's, bit for bit: every product is exact (|4096 w| <= 32768,
 * |x + io| <= 255), and SMLAD adds in 32 bits; the sum is 4096 times the reference's
 * sum_d w (x + io), and |that| <= accum_depth * 8 * 255 * 4096 < 2^31 for accum_depth <= 256,
 * so no partial sum overflows in any order and dividing by 4096 is exact. The weights' offset
 * (-zero point) is folded in as in fully_connected.c's variant: + offset * sum_d (x + io). Odd
 * depths (rows that start mid-byte) and depths over 256 run the reference. A depth that is not a
 * multiple of 8 ends in a group padded with zero inputs: the nibbles read past a row's end (the
 * next row's; at the array's end a word filled only from the row's own bytes) add 0. */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected_s4.h"
#include "dsp.h"                     /* sum_inputs, requant_s8, requant_mm_s8 */

#define qe_fully_connected_s4 qe_fully_connected_s4_reference
#include "../../fully_connected_s4.c"
#undef qe_fully_connected_s4

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP

#define QE_S4_DSP_MAX_DEPTH 256u

/* x + io as int16 pairs in the lane order above, for ceil(n / 8) groups of 8: the last group's
 * lanes past the depth are 0, so the weights' bytes read beyond a row (the next row's, or a
 * zeroed word at the end) add nothing */
static void widen_s4_inputs(const int8_t *in, uint32_t n, uint32_t groups, int32_t io,
                            uint32_t *pairs)
{
    uint32_t g, k;

    for (g = 0; g < groups; ++g) {
        for (k = 0; k < 4u; ++k) {
            const uint32_t d = 8u * g + k;
            const uint32_t lo = (d < n) ? (uint16_t)(int16_t)((int32_t)in[d] + io) : 0u;
            const uint32_t hi = (d + 4u < n) ? (uint16_t)(int16_t)((int32_t)in[d + 4u] + io) : 0u;
            pairs[4u * g + k] = lo | (hi << 16);
        }
    }
}

/* (word << SH) & m as one AND with a shifted register operand (gcc would load the mask as an
 * immediate and shift apart) */
#define QE_S4_AND_LSL(SH)                                                                        \
    static inline uint32_t and_lsl##SH(uint32_t word, uint32_t m)                                \
    {                                                                                           \
        uint32_t r;                                                                             \
        __asm("and %0, %1, %2, lsl #" #SH : "=r"(r) : "r"(m), "r"(word));                       \
        return r;                                                                               \
    }
QE_S4_AND_LSL(12)
QE_S4_AND_LSL(8)
QE_S4_AND_LSL(4)

static inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);     /* LDR: unaligned words are allowed */
    return v;
}

/* acc[r] = sum_d 4096 w_r[d] (x[d] + io) over the whole groups of 8, rows w0 and w1 sharing
 * each input pair */
static inline void dot_s4_2rows(const uint8_t *w0, const uint8_t *w1, const uint32_t *pairs,
                                uint32_t groups, int32_t acc[2])
{
    const uint32_t m = 0xF000F000u;
    int32_t a0 = 0, a1 = 0;
    uint32_t g;

    for (g = 0; g < groups; ++g) {
        const uint32_t u0 = load_u32(w0 + 4u * g), u1 = load_u32(w1 + 4u * g);
        const uint32_t *x = pairs + 4u * g;
        a0 = __smlad((int16x2_t)and_lsl12(u0, m), (int16x2_t)x[0], a0);
        a1 = __smlad((int16x2_t)and_lsl12(u1, m), (int16x2_t)x[0], a1);
        a0 = __smlad((int16x2_t)and_lsl8(u0, m), (int16x2_t)x[1], a0);
        a1 = __smlad((int16x2_t)and_lsl8(u1, m), (int16x2_t)x[1], a1);
        a0 = __smlad((int16x2_t)and_lsl4(u0, m), (int16x2_t)x[2], a0);
        a1 = __smlad((int16x2_t)and_lsl4(u1, m), (int16x2_t)x[2], a1);
        a0 = __smlad((int16x2_t)(u0 & m), (int16x2_t)x[3], a0);
        a1 = __smlad((int16x2_t)(u1 & m), (int16x2_t)x[3], a1);
    }
    acc[0] = a0;
    acc[1] = a1;
}

/* one row's four lane pairs of a word of weights, for the group whose input pairs are x */
static inline int32_t dot_s4_word(uint32_t u, const uint32_t *x, int32_t acc)
{
    const uint32_t m = 0xF000F000u;
    acc = __smlad((int16x2_t)and_lsl12(u, m), (int16x2_t)x[0], acc);
    acc = __smlad((int16x2_t)and_lsl8(u, m), (int16x2_t)x[1], acc);
    acc = __smlad((int16x2_t)and_lsl4(u, m), (int16x2_t)x[2], acc);
    return __smlad((int16x2_t)(u & m), (int16x2_t)x[3], acc);
}

/* the last group's word of a row that ends the array: only its own bytes (1 to 4), zeros after */
static inline uint32_t load_u32_end(const uint8_t *p, uint32_t bytes)
{
    uint32_t v = 0;
    memcpy(&v, p, bytes);
    return v;
}

void qe_fully_connected_s4(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH uint8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth, groups = (n + 7u) / 8u;
    const uint32_t row_bytes = n / 2u, total = rows * row_bytes;
    const int32_t io = p->input_offset;
    uint32_t pairs[QE_S4_DSP_MAX_DEPTH / 2u];
    requant_t rq;
    requant_mm_t mm;
    int mode;
    uint32_t b, o;

    if ((n & 1u) != 0u || n > QE_S4_DSP_MAX_DEPTH) {
        qe_fully_connected_s4_reference(p, input, weights, bias, output);
        return;
    }
    requant_init(&rq, p->output_multiplier, p->output_shift, p->output_offset,
                 p->activation_min, p->activation_max);
    /* dsp.h's SMMLAR output stage where it applies (its preconditions, its proof), else requant_s8 */
    mode = requant_mm_init(&mm, p->output_multiplier, p->output_shift, p->output_offset,
                           p->activation_min, p->activation_max);
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        const int32_t base = (p->filter_offset != 0) ? p->filter_offset * sum_inputs(in, n, io) : 0;
        widen_s4_inputs(in, n, groups, io, pairs);
        for (o = 0; o < rows; o += 2u) {
            /* n even: rows start on a byte; an odd last row pairs with itself */
            const uint8_t *w0 = weights + o * row_bytes;
            const uint8_t *w1 = (o + 1u < rows) ? w0 + row_bytes : w0;
            /* the groups whose 4-byte words lie inside the array for both rows */
            const uint32_t inside = ((uint32_t)(w1 - weights) + 4u * groups <= total) ? groups
                                                                                     : groups - 1u;
            int32_t acc[2];
            uint32_t r;
            dot_s4_2rows(w0, w1, pairs, inside, acc);
            if (inside < groups) {
                const uint32_t last = row_bytes - 4u * inside;      /* 1..4 */
                acc[0] = dot_s4_word(load_u32_end(w0 + 4u * inside, last), pairs + 4u * inside,
                                     acc[0]);
                acc[1] = dot_s4_word(load_u32_end(w1 + 4u * inside, last), pairs + 4u * inside,
                                     acc[1]);
            }
            for (r = 0; r < 2u && o + r < rows; ++r) {
                /* exact: a multiple of 4096 (see above) */
                int32_t a = base + acc[r] / 4096;
                if (bias != QE_FLASH_NULL) {
                    a += bias[o + r];
                }
                out[o + r] = (mode != REQUANT_MM_NONE) ? requant_mm_s8(&mm, a, mode == REQUANT_MM_FIX)
                                                       : requant_s8(&rq, a);
            }
        }
    }
}

#else /* no DSP extension: the reference */

void qe_fully_connected_s4(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH uint8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    qe_fully_connected_s4_reference(p, input, weights, bias, output);
}

#endif
