/* FULLY_CONNECTED with int4 weights, optimized variant "cortex-m0" (and "rv32", which includes
 * this file; see ../README.md): qe_fully_connected_s4_pairs on the generator's row-pair layout
 * (../../fully_connected_s4.h), exactly the reference's results. Plain C: the same code is the
 * ARMv6-M build's, the RISC-V build's and the host tests'.
 *
 * Per input d and group of four rows: two bytes of the stream, each two rows' nibbles; the byte
 * indexes S4_PAIR[] (65536 * hi + lo, both int4), and one 32-bit multiply by x[d] is both rows'
 * products: sum01 += x * S4_PAIR[byte0], sum23 += x * S4_PAIR[byte1] (LDRB, LSLS, LDR, MULS, ADDS
 * per two MACs on ARMv6-M). After a chunk of at most QE_S4_PAIRS_CHUNK inputs each sum is
 * 65536 H + L with |L|, |H| <= 31 * 1024 < 2^15, so L is its low half sign-extended and H =
 * (sum - L) / 65536, exactly (unsigned sums: the wrap of 65536 H is undone by the same
 * arithmetic). The zero points are in bias' (the group's four words after its bytes). Output
 * stage for right shifts: requant_right_output (requant_right.h, no long multiply), else
 * requant.h's. Products |x * S4_PAIR| < 2^26: no overflow. */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected_s4.h"
#include "../../../requant.h"

#if defined(__AVR__)
#error "the cortex-m0 kernels read weights through plain pointers; AVR boards use the reference (__flash)"
#endif

#define qe_fully_connected_s4_pairs qe_fully_connected_s4_pairs_reference
#include "../../fully_connected_s4.c"
#undef qe_fully_connected_s4_pairs

#include "requant_right.h"          /* requant_right_t, requant_right_output */

/* 65536 * (high nibble as int4) + (low nibble as int4), for every byte */
#define S4P(b) ((int32_t)(((((b) >> 4) ^ 8) - 8) * 65536) + (int32_t)((((b) & 15) ^ 8) - 8))
#define S4P4(b) S4P(b), S4P((b) + 1), S4P((b) + 2), S4P((b) + 3)
#define S4P16(b) S4P4(b), S4P4((b) + 4), S4P4((b) + 8), S4P4((b) + 12)
#define S4P64(b) S4P16(b), S4P16((b) + 16), S4P16((b) + 32), S4P16((b) + 48)
static const int32_t S4_PAIR[256] = {S4P64(0), S4P64(64), S4P64(128), S4P64(192)};

/* the low half as an int16 and the high half of a chunk's two-row sum, into acc[0], acc[1] */
static inline void s4_split(uint32_t s, int32_t *acc)
{
    const int32_t lo = (int32_t)(int16_t)(uint16_t)(s & 0xFFFFu);
    acc[0] += lo;
    acc[1] += (int32_t)(s - (uint32_t)lo) >> 16;   /* exact: a multiple of 65536 (gcc: ASR) */
}

void qe_fully_connected_s4_pairs(const qe_fc_s8_params_t *p, const int8_t *input,
                                 const QE_FLASH uint32_t *stream, int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t group_words = (2u * n + 3u) / 4u + 4u;
    requant_right_t rr;
    const int right = requant_right_init(&rr, p->output_multiplier, p->output_shift,
                                         p->output_offset, p->activation_min, p->activation_max);
    uint32_t b, o, r;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *const in = input + b * n;
        int8_t *const out = output + b * rows;
        const uint32_t *group = stream;
        for (o = 0; o < rows; o += 4u, group += group_words) {
            const uint8_t *wb = (const uint8_t *)group;
            const int32_t *const bias = (const int32_t *)(group + group_words - 4u);
            int32_t acc[4];
            uint32_t d = 0;
            acc[0] = bias[0];
            acc[1] = bias[1];
            acc[2] = bias[2];
            acc[3] = bias[3];
            while (d < n) {
                const int8_t *x = in + d;
                const int8_t *const x_end = in + ((n - d > QE_S4_PAIRS_CHUNK) ? d + QE_S4_PAIRS_CHUNK : n);
                uint32_t s01 = 0, s23 = 0;
                d = (uint32_t)(x_end - in);
                if ((x_end - x) & 1) {
                    const int32_t xv = *x++;
                    s01 += (uint32_t)(xv * S4_PAIR[wb[0]]);
                    s23 += (uint32_t)(xv * S4_PAIR[wb[1]]);
                    wb += 2;
                }
                while (x != x_end) {            /* two inputs a pass */
                    const int32_t x0 = x[0], x1 = x[1];
                    s01 += (uint32_t)(x0 * S4_PAIR[wb[0]]);
                    s23 += (uint32_t)(x0 * S4_PAIR[wb[1]]);
                    s01 += (uint32_t)(x1 * S4_PAIR[wb[2]]);
                    s23 += (uint32_t)(x1 * S4_PAIR[wb[3]]);
                    x += 2;
                    wb += 4;
                }
                s4_split(s01, acc);
                s4_split(s23, acc + 2);
            }
            for (r = 0; r < 4u && o + r < rows; ++r) {
                out[o + r] = (int8_t)(right ? requant_right_output(&rr, acc[r])
                                            : qe_requantize_output(acc[r], p->output_multiplier,
                                                                   p->output_shift,
                                                                   p->output_offset,
                                                                   p->activation_min,
                                                                   p->activation_max));
            }
        }
    }
}
