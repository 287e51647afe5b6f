/* FULLY_CONNECTED with int4 weights, optimized variant "avr" (see ../README.md):
 * qe_fully_connected_s4_avr for 8-bit AVR cores with the hardware multiplier (avr5: ATmega328P),
 * on the generator's int4 stream (../../fully_connected_s4.h): u = w' + 8 in nibbles, two rows
 * per byte, four rows per pass, the depth cut into chunks whose sums provably fit 16 bits, as
 * the int8 stream of fully_connected.c.
 *
 * Per input of a chunk (QE_AVR_S4_STEP): one LD of the input; per byte (two rows) one LPM, then
 * the low nibble by MOV + ANDI, the high one by SWAP + ANDI, each multiplied by MULSU (the signed
 * input times the unsigned nibble: x * u exactly, 16 bits) and added into the row's 16-bit chunk
 * sum: 32 cycles per 4 MACs (int8's stream: 30; half its LPMs, but two unpacking instructions a
 * weight). The chunk sums go into 24-bit running sums as in the int8 kernel; those start at
 * -8 X (X = the batch's input sum, once per batch), so they end at sum_d u x - 8 X = sum_d w' x.
 * The output stage is the int8 kernel's (avr_fc.h: the same routine around this dot product),
 * with the generator's constants (avr_output_stage, or for left shifts avr_output_stage_left:
 * avr/fully_connected_s4.py); other stages requant.h's. Without __AVR__ (the host) the same
 * walk in C with the same wrapping 16- and 24-bit sums. The other int4 functions are the
 * reference's, included below with the avr one renamed out of the way (*_reference). */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected_s4.h"
#include "../../../requant.h"
#include "avr_fc.h"

#define qe_fully_connected_s4_avr qe_fully_connected_s4_avr_reference
#include "../../fully_connected_s4.c"
#undef qe_fully_connected_s4_avr

/* sums[r] = the start value (sums[0]'s low 24 bits on entry) + sum_d u[r][d] * x[d] for one row
 * group's stream at w, sign-extended from 24 bits; returns the stream past the group's 0 byte. */
const QE_FLASH uint8_t *qe_avr_fc_s4_dot4(const int8_t *x, const QE_FLASH uint8_t *w,
                                          int32_t *sums);

#if defined(__AVR__)

#if !defined(__AVR_HAVE_MUL__)
#error "the avr kernels need the hardware multiplier (MULSU): avr4/avr5/avr6 cores"
#endif

/* The dot product of one row group, in registers: X = the input, Z = the group's stream, the
 * running sums r10-12, r13-15, r19-21, r22-24 (low byte first) set before (QE_AVR_S4_INIT_*);
 * chunk sums r2:3, r4:5, r6:7, r8:9; r25 the chunk's length, r16 the input, r18 the byte, r17
 * a nibble and the sign byte (MULSU takes r16-r23). Leaves Z past the group's 0 byte.
 * Labels 1-7. */
#define QE_AVR_S4_PAIR_FIRST(LO0, LO1)                                                   \
    "lpm r18, Z+\n\tmov r17, r18\n\tandi r17, 0x0F\n\tmulsu r16, r17\n\tmovw " LO0 ", r0\n\t" \
    "swap r18\n\tandi r18, 0x0F\n\tmulsu r16, r18\n\tmovw " LO1 ", r0\n\t"
#define QE_AVR_S4_PAIR(LO0, HI0, LO1, HI1)                                               \
    "lpm r18, Z+\n\tmov r17, r18\n\tandi r17, 0x0F\n\tmulsu r16, r17\n\t"                \
    "add " LO0 ", r0\n\tadc " HI0 ", r1\n\t"                                             \
    "swap r18\n\tandi r18, 0x0F\n\tmulsu r16, r18\n\t"                                   \
    "add " LO1 ", r0\n\tadc " HI1 ", r1\n\t"
#define QE_AVR_S4_STEP                                                                   \
    "ld r16, X+\n\t" QE_AVR_S4_PAIR("r2", "r3", "r4", "r5") QE_AVR_S4_PAIR("r6", "r7", "r8", "r9")
#define QE_AVR_S4_FLUSH(LO, HI, S0, S1, S2)                                              \
    "mov r17, " HI "\n\tlsl r17\n\tsbc r17, r17\n\t"                                     \
    "add " S0 ", " LO "\n\tadc " S1 ", " HI "\n\tadc " S2 ", r17\n\t"
/* every row's running sum = r10..r12 */
#define QE_AVR_S4_COPY_INIT                                                              \
    "mov r13, r10\n\tmov r14, r11\n\tmov r15, r12\n\t"                                   \
    "mov r19, r10\n\tmov r20, r11\n\tmov r21, r12\n\t"                                   \
    "mov r22, r10\n\tmov r23, r11\n\tmov r24, r12\n\t"
#define QE_AVR_S4_INIT_SUMS "ld r10, Y\n\tldd r11, Y+1\n\tldd r12, Y+2\n\t" QE_AVR_S4_COPY_INIT
#define QE_AVR_S4_INIT_CTX "ldd r10, Y+38\n\tldd r11, Y+39\n\tldd r12, Y+40\n\t" QE_AVR_S4_COPY_INIT
#define QE_AVR_S4_DOT                                                                    \
    "1:\n\t"                                    /* a chunk: its length, 0 ends the group */ \
    "lpm r25, Z+\n\t"                                                                    \
    "tst r25\n\t"                                                                        \
    "brne 5f\n\t"                                                                        \
    "rjmp 4f\n"                                                                           \
    "5:\n\t"                                                                             \
    "ld r16, X+\n\t"                            /* its first input: the products moved in */ \
    QE_AVR_S4_PAIR_FIRST("r2", "r4") QE_AVR_S4_PAIR_FIRST("r6", "r8")                    \
    "dec r25\n\t"                              /* the others: added, 16 bits; an odd one */ \
    "brne 7f\n\t"                              /* first, then two per loop */           \
    "rjmp 3f\n"                                                                           \
    "7:\n\t"                                                                             \
    "sbrs r25, 0\n\t"                                                                    \
    "rjmp 6f\n\t"                                                                        \
    QE_AVR_S4_STEP                                                                       \
    "dec r25\n\t"                                                                        \
    "brne 6f\n\t"                                                                        \
    "rjmp 3f\n"                                                                           \
    "6:\n\t"                                                                             \
    "lsr r25\n"                                                                           \
    "2:\n\t"                                                                             \
    QE_AVR_S4_STEP QE_AVR_S4_STEP                                                        \
    "dec r25\n\t"                                                                        \
    "brne 2b\n"                                                                           \
    "3:\n\t"                                    /* end of chunk: into the 24-bit sums */ \
    QE_AVR_S4_FLUSH("r2", "r3", "r10", "r11", "r12")                                     \
    QE_AVR_S4_FLUSH("r4", "r5", "r13", "r14", "r15")                                     \
    QE_AVR_S4_FLUSH("r6", "r7", "r19", "r20", "r21")                                     \
    QE_AVR_S4_FLUSH("r8", "r9", "r22", "r23", "r24")                                     \
    "rjmp 1b\n"                                                                           \
    "4:\n\t"
#define QE_AVR_S4_STORE(S0, S1, S2)                                                      \
    "st Y+, " S0 "\n\tst Y+, " S1 "\n\tst Y+, " S2 "\n\t"                                \
    "mov r17, " S2 "\n\tlsl r17\n\tsbc r17, r17\n\tst Y+, r17\n\t"
#define QE_AVR_S4_PUSH_SUMS                                                              \
    "push r24\n\tpush r23\n\tpush r22\n\tpush r21\n\tpush r20\n\tpush r19\n\t"           \
    "push r15\n\tpush r14\n\tpush r13\n\tpush r12\n\tpush r11\n\tpush r10\n\t"

/* avr-gcc's ABI: x in r24:25, w in r22:23, sums in r20:21, the result in r24:25; r2-r17, r28-r29
 * are the callee's to save, r1 must be 0 on return. X = x, Z = w, Y = sums. */
__asm__(
    ".section .text.qe_avr_fc_s4_dot4,\"ax\",@progbits\n"
    ".global qe_avr_fc_s4_dot4\n"
    ".type qe_avr_fc_s4_dot4, @function\n"
    "qe_avr_fc_s4_dot4:\n\t"
    QE_AVR_PUSH_SAVED
    "movw r26, r24\n\t"
    "movw r30, r22\n\t"
    "movw r28, r20\n\t"
    QE_AVR_S4_INIT_SUMS
    QE_AVR_S4_DOT
    QE_AVR_S4_STORE("r10", "r11", "r12") QE_AVR_S4_STORE("r13", "r14", "r15")
    QE_AVR_S4_STORE("r19", "r20", "r21") QE_AVR_S4_STORE("r22", "r23", "r24")
    "movw r24, r30\n\t"
    "clr r1\n\t"
    QE_AVR_POP_SAVED
    "ret\n"
    ".size qe_avr_fc_s4_dot4, .-qe_avr_fc_s4_dot4\n"
    ".text\n");

/* The int8 kernel's batch context and, at 38, the sums' start value (-8 X, low byte first). */
typedef struct {
    qe_avr_fc_ctx_t c;
    uint8_t init[3];                 /* 38 */
} qe_avr_fc_s4_ctx_t;

typedef char qe_avr_fc_s4_ctx_layout[(offsetof(qe_avr_fc_s4_ctx_t, init) == 38) ? 1 : -1];

void qe_avr_fc_s4_batch(qe_avr_fc_s4_ctx_t *ctx);

QE_AVR_BATCH_ASM("qe_avr_fc_s4_batch", QE_AVR_S4_INIT_CTX, QE_AVR_S4_DOT, QE_AVR_S4_PUSH_SUMS)

#else /* not AVR (the host): the same walk in C, with the same wrapping 16- and 24-bit sums */

const QE_FLASH uint8_t *qe_avr_fc_s4_dot4(const int8_t *x, const QE_FLASH uint8_t *w,
                                          int32_t *sums)
{
    const uint32_t init = (uint32_t)sums[0] & 0xFFFFFFu;
    uint32_t run[QE_FC_AVR_ROWS] = {init, init, init, init};
    uint32_t len, r;
    while ((len = *w++) != 0u) {
        uint16_t chunk[QE_FC_AVR_ROWS] = {0u, 0u, 0u, 0u};
        for (; len > 0u; --len, ++x, w += 2) {
            for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
                const uint32_t byte = w[r / 2u];
                const int16_t u = (int16_t)((r % 2u) ? byte >> 4 : byte & 15u);
                /* MULSU: the exact 16-bit product; ADD/ADC: modulo 2^16 */
                const int16_t prod = (int16_t)(u * (int16_t)*x);
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

/* -8 * sum_d x[d], modulo 2^24 (all the sums' start value needs) */
static uint32_t s4_avr_start(const int8_t *x, uint16_t n)
{
    uint32_t sum = 0u;
    uint16_t d;
    for (d = 0; d < n; ++d) {
        sum += (uint32_t)(int32_t)x[d];
    }
    return (0u - 8u * sum) & 0xFFFFFFu;
}

void qe_fully_connected_s4_avr(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                               const QE_FLASH uint8_t *stream, const QE_FLASH int32_t *bias,
                               int8_t *output)
{
    const uint16_t n = p->accum_depth, rows = p->output_depth;
    const int32_t multiplier = p->output_multiplier, shift = p->output_shift;
    const int32_t offset = p->output_offset, act_min = p->activation_min,
                  act_max = p->activation_max;
    uint16_t b, o, r;
#if defined(__AVR__)
    qe_avr_fc_s4_ctx_t c;
    if (p->fast) {
        c.c.sat_low = p->sat_low;
        c.c.sat_high = p->sat_high;
        for (r = 0; r < 5u; ++r) {
            c.c.m_prime[r] = p->m_prime[r];
            c.c.round[0][r] = p->round[0][r];
            c.c.round[1][r] = p->round[1][r];
        }
        c.c.byte_moves = p->byte_moves;
        c.c.offset = (uint8_t)offset;
        c.c.out_min = (uint8_t)act_min;
        c.c.out_max = (uint8_t)act_max;
    }
#endif
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + (uint32_t)b * n;
        int8_t *out = output + (uint32_t)b * rows;
        const uint32_t start = s4_avr_start(in, n);
        const QE_FLASH uint8_t *s = stream;
        const QE_FLASH int32_t *bp = bias;
#if defined(__AVR__)
        if (p->fast) {
            c.c.x = in;
            c.c.stream = (const QE_FLASH int8_t *)stream;
            c.c.bias = bias;
            c.c.out = out;
            c.c.rows_left = rows;
            c.init[0] = (uint8_t)start;
            c.init[1] = (uint8_t)(start >> 8);
            c.init[2] = (uint8_t)(start >> 16);
            qe_avr_fc_s4_batch(&c);
            continue;
        }
#endif
        for (o = 0; o < rows; o += QE_FC_AVR_ROWS, bp += QE_FC_AVR_ROWS) {
            int32_t acc[QE_FC_AVR_ROWS];
            const uint16_t left = (uint16_t)(rows - o);
            const uint16_t count = (left < QE_FC_AVR_ROWS) ? left : (uint16_t)QE_FC_AVR_ROWS;
            acc[0] = (int32_t)start;
            s = qe_avr_fc_s4_dot4(in, s, acc);
            for (r = 0; r < count; ++r) {
                /* bias' + dot is the reference's accumulator (fully_connected_s4.h) */
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
