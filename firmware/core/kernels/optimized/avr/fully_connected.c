/* FULLY_CONNECTED, optimized variant "avr" (see ../README.md): qe_fully_connected_s8_avr for
 * 8-bit AVR cores with the hardware multiplier (avr5: ATmega328P), on the generator's chunked
 * stream (../../fully_connected.h, qe_fc_s8_avr_params_t): int8 weights in flash with both zero
 * points folded in, four rows per pass, the depth cut by the generator into chunks whose sums
 * provably fit 16 bits.
 *
 * Per input of a chunk (qe_avr_fc_dot4, below): one LD of the input, then per row LPM of the
 * weight, MULS (8 x 8 -> 16, signed) and a 16-bit ADD/ADC into the row's chunk sum: 33 cycles per
 * 4 MACs with the loop (8.25 / MAC). The first input of a chunk moves the products in (MOVW)
 * instead of adding; at the end of a chunk each row's 16-bit sum is sign-extended into its 24-bit
 * running sum (6 cycles per row). All 16 + 12 sums live in registers.
 *
 * Why the integers are the reference's: a chunk's true sum lies in int16 for every input (the
 * generator's bound), so the 16-bit sum, which wraps modulo 2^16 in between, ends exact; the
 * rows' whole dot products lie in 24 bits (sum |w'| <= 65535), so the 24-bit running sums,
 * wrapping likewise, end exact too; acc = bias' + dot is then the reference's int32 accumulator
 * (fully_connected.h). The output stage is requant.h's. Without __AVR__ (the host) the dot
 * product is the same walk in C with the same 16- and 24-bit wrapping sums, so the host tests
 * (ASan/UBSan) cover the layout and the chunking too. The other FULLY_CONNECTED functions are the
 * reference's, included below with the avr one renamed out of the way (*_reference, which the
 * tests compare against). */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected.h"
#include "../../../requant.h"
#include "avr_fc.h"

#define qe_fully_connected_s8_avr qe_fully_connected_s8_avr_reference
#include "../../fully_connected.c"
#undef qe_fully_connected_s8_avr

/* sums[r] = sum_d w'[r][d] * x[d] for one row group's stream at w (the four rows' dot products,
 * sign-extended from 24 bits); returns the stream past the group's 0 byte. */
const QE_FLASH int8_t *qe_avr_fc_dot4(const int8_t *x, const QE_FLASH int8_t *w, int32_t *sums);

#if defined(__AVR__)

#if !defined(__AVR_HAVE_MUL__)
#error "the avr kernels need the hardware multiplier (MULS): avr4/avr5/avr6 cores"
#endif

/* The dot product of one row group, in registers: X = the input, Z = the group's stream, the
 * running sums r10-12, r13-15, r16-18, r19-21 (low byte first) cleared before; chunk sums r2:3,
 * r4:5, r6:7, r8:9; r23 the chunk's length, r24 the input, r25 the weight (MULS takes r16-r31),
 * r22 a sign byte. Leaves Z past the group's 0 byte. Labels 1-6. */
#define QE_AVR_MAC_FIRST(LO) "lpm r25, Z+\n\tmuls r24, r25\n\tmovw " LO ", r0\n\t"
#define QE_AVR_MAC(LO, HI) "lpm r25, Z+\n\tmuls r24, r25\n\tadd " LO ", r0\n\tadc " HI ", r1\n\t"
#define QE_AVR_FLUSH(LO, HI, S0, S1, S2)                                                 \
    "mov r22, " HI "\n\tlsl r22\n\tsbc r22, r22\n\t"                                     \
    "add " S0 ", " LO "\n\tadc " S1 ", " HI "\n\tadc " S2 ", r22\n\t"
#define QE_AVR_CLEAR_SUMS                                                                \
    "clr r10\n\tclr r11\n\tclr r12\n\tclr r13\n\tclr r14\n\tclr r15\n\t"                 \
    "clr r16\n\tclr r17\n\tclr r18\n\tclr r19\n\tclr r20\n\tclr r21\n"
#define QE_AVR_STEP                                                                      \
    "ld r24, X+\n\t"                                                                     \
    QE_AVR_MAC("r2", "r3") QE_AVR_MAC("r4", "r5") QE_AVR_MAC("r6", "r7") QE_AVR_MAC("r8", "r9")
#define QE_AVR_DOT                                                                       \
    "1:\n\t"                                    /* a chunk: its length, 0 ends the group */ \
    "lpm r23, Z+\n\t"                                                                    \
    "tst r23\n\t"                                                                        \
    "brne 5f\n\t"                                                                        \
    "rjmp 4f\n"                                                                           \
    "5:\n\t"                                                                             \
    "ld r24, X+\n\t"                            /* its first input: the products moved in */ \
    QE_AVR_MAC_FIRST("r2") QE_AVR_MAC_FIRST("r4") QE_AVR_MAC_FIRST("r6") QE_AVR_MAC_FIRST("r8") \
    "dec r23\n\t"                              /* the others: added, 16 bits; an odd one */ \
    "breq 3f\n\t"                              /* first, then two per loop */           \
    "sbrs r23, 0\n\t"                                                                    \
    "rjmp 6f\n\t"                                                                        \
    QE_AVR_STEP                                                                          \
    "dec r23\n\t"                                                                        \
    "breq 3f\n"                                                                           \
    "6:\n\t"                                                                             \
    "lsr r23\n"                                                                           \
    "2:\n\t"                                                                             \
    QE_AVR_STEP QE_AVR_STEP                                                              \
    "dec r23\n\t"                                                                        \
    "brne 2b\n"                                                                           \
    "3:\n\t"                                    /* end of chunk: into the 24-bit sums */ \
    QE_AVR_FLUSH("r2", "r3", "r10", "r11", "r12") QE_AVR_FLUSH("r4", "r5", "r13", "r14", "r15") \
    QE_AVR_FLUSH("r6", "r7", "r16", "r17", "r18") QE_AVR_FLUSH("r8", "r9", "r19", "r20", "r21") \
    "rjmp 1b\n"                                                                           \
    "4:\n\t"
#define QE_AVR_STORE(S0, S1, S2)                                                         \
    "st Y+, " S0 "\n\tst Y+, " S1 "\n\tst Y+, " S2 "\n\t"                                \
    "mov r22, " S2 "\n\tlsl r22\n\tsbc r22, r22\n\tst Y+, r22\n\t"

/* avr-gcc's ABI: x in r24:25, w in r22:23, sums in r20:21, the result in r24:25; r2-r17, r28-r29
 * are the callee's to save, r1 must be 0 on return. X = x, Z = w, Y = sums. */
__asm__(
    ".section .text.qe_avr_fc_dot4,\"ax\",@progbits\n"
    ".global qe_avr_fc_dot4\n"
    ".type qe_avr_fc_dot4, @function\n"
    "qe_avr_fc_dot4:\n\t"
    QE_AVR_PUSH_SAVED
    "movw r26, r24\n\t"
    "movw r30, r22\n\t"
    "movw r28, r20\n\t"
    QE_AVR_CLEAR_SUMS
    QE_AVR_DOT
    QE_AVR_STORE("r10", "r11", "r12") QE_AVR_STORE("r13", "r14", "r15")
    QE_AVR_STORE("r16", "r17", "r18") QE_AVR_STORE("r19", "r20", "r21")
    "movw r24, r30\n\t"
    "clr r1\n\t"
    QE_AVR_POP_SAVED
    "ret\n"
    ".size qe_avr_fc_dot4, .-qe_avr_fc_dot4\n"
    ".text\n");

void qe_avr_fc_batch(qe_avr_fc_ctx_t *ctx);

#define QE_AVR_PUSH_SUMS                                                                 \
    "push r21\n\tpush r20\n\tpush r19\n\tpush r18\n\tpush r17\n\tpush r16\n\t" \
    "push r15\n\tpush r14\n\tpush r13\n\tpush r12\n\tpush r11\n\tpush r10\n\t"

QE_AVR_BATCH_ASM("qe_avr_fc_batch", QE_AVR_CLEAR_SUMS, QE_AVR_DOT, QE_AVR_PUSH_SUMS)

#else /* not AVR (the host): the same walk in C, with the same wrapping 16- and 24-bit sums */

const QE_FLASH int8_t *qe_avr_fc_dot4(const int8_t *x, const QE_FLASH int8_t *w, int32_t *sums)
{
    uint32_t run[QE_FC_AVR_ROWS] = {0u, 0u, 0u, 0u};
    uint32_t len, r;
    while ((len = (uint8_t)*w++) != 0u) {
        uint16_t chunk[QE_FC_AVR_ROWS] = {0u, 0u, 0u, 0u};
        for (; len > 0u; --len, ++x) {
            for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
                /* MULS: the exact 16-bit product; ADD/ADC: modulo 2^16 */
                const int16_t prod = (int16_t)((int16_t)*w++ * (int16_t)*x);
                chunk[r] = (uint16_t)(chunk[r] + (uint16_t)prod);
            }
        }
        for (r = 0; r < QE_FC_AVR_ROWS; ++r) {   /* sign-extended into the 24-bit sum */
            const uint32_t c = chunk[r];
            run[r] = (run[r] + (c & 0x8000u ? c | 0xFFFF0000u : c)) & 0xFFFFFFu;
        }
    }
    for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
        sums[r] = (int32_t)(run[r] & 0x7FFFFFu) - (int32_t)(run[r] & 0x800000u);
    }
    return w;
}


#endif /* __AVR__ */

void qe_fully_connected_s8_avr(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                               const QE_FLASH int8_t *stream, const QE_FLASH int32_t *bias,
                               int8_t *output)
{
    const uint16_t n = p->accum_depth, rows = p->output_depth;
    const int32_t multiplier = p->output_multiplier, shift = p->output_shift;
    const int32_t offset = p->output_offset, act_min = p->activation_min,
                  act_max = p->activation_max;
    uint16_t b, o, r;

#if defined(__AVR__)
    if (p->fast) {
        qe_avr_fc_ctx_t c;
        c.sat_low = p->sat_low;
        c.sat_high = p->sat_high;
        for (r = 0; r < 5u; ++r) {
            c.m_prime[r] = p->m_prime[r];
            c.round[0][r] = p->round[0][r];
            c.round[1][r] = p->round[1][r];
        }
        c.byte_moves = p->byte_moves;
        c.offset = (uint8_t)offset;
        c.out_min = (uint8_t)act_min;
        c.out_max = (uint8_t)act_max;
        for (b = 0; b < p->batches; ++b) {
            c.x = input + (uint32_t)b * n;
            c.stream = stream;
            c.bias = bias;
            c.out = output + (uint32_t)b * rows;
            c.rows_left = rows;
            qe_avr_fc_batch(&c);
        }
        return;
    }
#endif
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + (uint32_t)b * n;
        int8_t *out = output + (uint32_t)b * rows;
        const QE_FLASH int8_t *s = stream;
        const QE_FLASH int32_t *bp = bias;
        for (o = 0; o < rows; o += QE_FC_AVR_ROWS, bp += QE_FC_AVR_ROWS) {
            int32_t acc[QE_FC_AVR_ROWS];
            const uint16_t left = (uint16_t)(rows - o);
            const uint16_t count = (left < QE_FC_AVR_ROWS) ? left : (uint16_t)QE_FC_AVR_ROWS;
            s = qe_avr_fc_dot4(in, s, acc);
            for (r = 0; r < count; ++r) {
                /* bias' + dot is the reference's accumulator (no overflow: fully_connected.h) */
                acc[r] += bp[r];
#if !defined(__AVR__)
                if (p->fast) {
                    out[o + r] = avr_fast_output(p, acc[r]);
                    continue;
                }
#endif
                out[o + r] = (int8_t)qe_requantize_output(acc[r], multiplier, shift, offset,
                                                          act_min, act_max);
            }
        }
    }
}
