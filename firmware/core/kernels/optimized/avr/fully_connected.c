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
#define QE_AVR_PUSH_SAVED                                                                \
    "push r2\n\tpush r3\n\tpush r4\n\tpush r5\n\tpush r6\n\tpush r7\n\tpush r8\n\tpush r9\n\t" \
    "push r10\n\tpush r11\n\tpush r12\n\tpush r13\n\tpush r14\n\tpush r15\n\tpush r16\n\t" \
    "push r17\n\tpush r28\n\tpush r29\n\t"
#define QE_AVR_POP_SAVED                                                                 \
    "pop r29\n\tpop r28\n\tpop r17\n\tpop r16\n\tpop r15\n\tpop r14\n\tpop r13\n\tpop r12\n\t" \
    "pop r11\n\tpop r10\n\tpop r9\n\tpop r8\n\tpop r7\n\tpop r6\n\tpop r5\n\tpop r4\n\t" \
    "pop r3\n\tpop r2\n\t"
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

/* One batch, every row group, with the generator's output stage (params fast = 1; see
 * fully_connected.h and converters/ops/optimized/avr/fully_connected.py, avr_output_stage): per
 * group the dot product above, its four 24-bit sums pushed on the stack, then per output: + bias' (LPM),
 * compared with sat_low / sat_high (saturated: activation_min / max, no multiply), else the
 * accumulator (24 bits then) times m' (5 bytes): two rows of five MULs when it fits 16 bits,
 * three otherwise, each row's 48 bits built without carries out, the low byte never kept (only
 * its carries matter, and it has none: row 0 adds nothing to it); minus m' * 2^16 (2^24) when
 * negative (the bytes were read unsigned); + r' (bytes 3..7); byte 4 + byte_moves of that, +
 * the offset, is the output. The registers are saved once per batch. The context (ctx_t below,
 * in RAM, Y): the pointers the groups advance, the rows left, the constants. */
typedef struct {
    const int8_t *x;                 /*  0: this batch's input */
    const QE_FLASH int8_t *stream;   /*  2: the next group's stream */
    const QE_FLASH int32_t *bias;    /*  4: the next group's bias' */
    int8_t *out;                     /*  6: the next group's outputs */
    uint16_t rows_left;              /*  8 */
    int32_t sat_low;                 /* 10 */
    int32_t sat_high;                /* 14 */
    uint8_t m_prime[5];              /* 18 */
    uint8_t round[2][5];             /* 23: x >= 0, 28: x < 0 */
    uint8_t byte_moves;              /* 33 */
    uint8_t offset;                  /* 34: the output offset's low byte */
    uint8_t out_min;                 /* 35: activation_min's low byte */
    uint8_t out_max;                 /* 36 */
    uint8_t pad_rows;                /* 37: the current group's padding rows (the asm's) */
} qe_avr_fc_ctx_t;

typedef char qe_avr_fc_ctx_layout[(offsetof(qe_avr_fc_ctx_t, rows_left) == 8
                                   && offsetof(qe_avr_fc_ctx_t, sat_low) == 10
                                   && offsetof(qe_avr_fc_ctx_t, m_prime) == 18
                                   && offsetof(qe_avr_fc_ctx_t, round) == 23
                                   && offsetof(qe_avr_fc_ctx_t, byte_moves) == 33
                                   && offsetof(qe_avr_fc_ctx_t, pad_rows) == 37) ? 1 : -1];

void qe_avr_fc_batch(qe_avr_fc_ctx_t *ctx);

/* t = r16..r21 = A * m' (48 bits; m' in r4..r8, zero in r2) */
#define QE_AVR_ROW5(A)                                                                   \
    "mul " A ", r4\n\tmovw r16, r0\n\tmul " A ", r6\n\tmovw r18, r0\n\t"                 \
    "mul " A ", r8\n\tmovw r20, r0\n\t"                                                  \
    "mul " A ", r5\n\tadd r17, r0\n\tadc r18, r1\n\tadc r19, r2\n\t"                     \
    "mul " A ", r7\n\tadd r19, r0\n\tadc r20, r1\n\tadc r21, r2\n\t"
/* row 0 straight into p1..p5 = r9..r13 (its byte 0 is final and not needed); p6, p7 cleared */
#define QE_AVR_ROW0                                                                      \
    "mul r22, r4\n\tmov r9, r1\n\tmul r22, r6\n\tmovw r10, r0\n\tmul r22, r8\n\tmovw r12, r0\n\t" \
    "mul r22, r5\n\tadd r9, r0\n\tadc r10, r1\n\tadc r11, r2\n\t"                        \
    "mul r22, r7\n\tadd r11, r0\n\tadc r12, r1\n\tadc r13, r2\n\t"                       \
    "clr r14\n\tclr r15\n\t"

/* Registers in the output stage: r0:1 MUL, r2 zero, r3 outputs left in the group (4..1),
 * r4..r8 m', r9..r15 the product's bytes 1..7, r16..r21 a row (and temporaries), r22..r25 the
 * accumulator, X the outputs, Y the context, Z the bias' (flash). */
__asm__(
    ".section .text.qe_avr_fc_batch,\"ax\",@progbits\n"
    ".global qe_avr_fc_batch\n"
    ".type qe_avr_fc_batch, @function\n"
    "qe_avr_fc_batch:\n\t"
    QE_AVR_PUSH_SAVED
    "movw r28, r24\n"
    "10:\n\t"                                   /* a row group */
    "ldd r26, Y+0\n\tldd r27, Y+1\n\t"
    "ldd r30, Y+2\n\tldd r31, Y+3\n\t"
    QE_AVR_CLEAR_SUMS
    QE_AVR_DOT
    "std Y+2, r30\n\tstd Y+3, r31\n\t"
    /* the sums on the stack, row 0's bytes on top */
    "push r21\n\tpush r20\n\tpush r19\n\tpush r18\n\tpush r17\n\tpush r16\n\t"
    "push r15\n\tpush r14\n\tpush r13\n\tpush r12\n\tpush r11\n\tpush r10\n\t"
    "clr r2\n\t"
    "ldd r30, Y+4\n\tldd r31, Y+5\n\t"
    "ldd r26, Y+6\n\tldd r27, Y+7\n\t"
    "ldd r4, Y+18\n\tldd r5, Y+19\n\tldd r6, Y+20\n\tldd r7, Y+21\n\tldd r8, Y+22\n\t"
    /* this group's rows: min(4, rows_left); its padding rows 4 - that */
    "ldd r24, Y+8\n\tldd r25, Y+9\n\t"
    "ldi r16, 4\n\t"
    "cpi r24, 4\n\t"
    "cpc r25, r2\n\t"
    "brsh 11f\n\t"
    "mov r16, r24\n"
    "11:\n\t"
    "sub r24, r16\n\tsbc r25, r2\n\t"
    "std Y+8, r24\n\tstd Y+9, r25\n\t"
    "ldi r17, 4\n\tsub r17, r16\n\tstd Y+37, r17\n\t"
    "ldi r16, 4\n\tmov r3, r16\n"
    "12:\n\t"                                   /* an output */
    "pop r22\n\tpop r23\n\tpop r24\n\t"
    "mov r25, r24\n\tlsl r25\n\tsbc r25, r25\n\t"
    "lpm r16, Z+\n\tlpm r17, Z+\n\tlpm r18, Z+\n\tlpm r19, Z+\n\t"
    "add r22, r16\n\tadc r23, r17\n\tadc r24, r18\n\tadc r25, r19\n\t"
    /* acc <= sat_low: activation_min */
    "ldd r16, Y+10\n\tldd r17, Y+11\n\tldd r18, Y+12\n\tldd r19, Y+13\n\t"
    "cp r16, r22\n\tcpc r17, r23\n\tcpc r18, r24\n\tcpc r19, r25\n\t"
    "brlt 13f\n\t"
    "ldd r16, Y+35\n\t"
    "rjmp 19f\n"
    "13:\n\t"                                   /* acc >= sat_high: activation_max */
    "ldd r16, Y+14\n\tldd r17, Y+15\n\tldd r18, Y+16\n\tldd r19, Y+17\n\t"
    "cp r22, r16\n\tcpc r23, r17\n\tcpc r24, r18\n\tcpc r25, r19\n\t"
    "brlt 14f\n\t"
    "ldd r16, Y+36\n\t"
    "rjmp 19f\n"
    "14:\n\t"                                   /* between: 24 bits; 16 when r24 is r23's sign */
    "mov r16, r23\n\tlsl r16\n\tsbc r16, r16\n\t"
    "cp r16, r24\n\t"
    "brne 15f\n\t"
    QE_AVR_ROW0
    QE_AVR_ROW5("r23")
    "add r9, r16\n\tadc r10, r17\n\tadc r11, r18\n\tadc r12, r19\n\tadc r13, r20\n\t"
    "adc r14, r21\n\tadc r15, r2\n\t"
    "sbrs r25, 7\n\t"
    "rjmp 16f\n\t"
    "sub r10, r4\n\tsbc r11, r5\n\tsbc r12, r6\n\tsbc r13, r7\n\tsbc r14, r8\n\tsbc r15, r2\n\t"
    "rjmp 16f\n"
    "15:\n\t"
    QE_AVR_ROW0
    QE_AVR_ROW5("r23")
    "add r9, r16\n\tadc r10, r17\n\tadc r11, r18\n\tadc r12, r19\n\tadc r13, r20\n\t"
    "adc r14, r21\n\tadc r15, r2\n\t"
    QE_AVR_ROW5("r24")
    "add r10, r16\n\tadc r11, r17\n\tadc r12, r18\n\tadc r13, r19\n\tadc r14, r20\n\t"
    "adc r15, r21\n\t"
    "sbrs r25, 7\n\t"
    "rjmp 16f\n\t"
    "sub r11, r4\n\tsbc r12, r5\n\tsbc r13, r6\n\tsbc r14, r7\n\tsbc r15, r8\n"
    "16:\n\t"                                   /* + r'[acc < 0] at bytes 3..7 */
    "sbrc r25, 7\n\t"
    "rjmp 17f\n\t"
    "ldd r16, Y+23\n\tldd r17, Y+24\n\tldd r18, Y+25\n\tldd r19, Y+26\n\tldd r20, Y+27\n\t"
    "rjmp 18f\n"
    "17:\n\t"
    "ldd r16, Y+28\n\tldd r17, Y+29\n\tldd r18, Y+30\n\tldd r19, Y+31\n\tldd r20, Y+32\n"
    "18:\n\t"
    "add r11, r16\n\tadc r12, r17\n\tadc r13, r18\n\tadc r14, r19\n\tadc r15, r20\n\t"
    "ldd r16, Y+33\n\t"                         /* byte 4 + byte_moves, into r12 */
    "tst r16\n\t"
    "breq 21f\n"
    "20:\n\t"
    "mov r12, r13\n\tmov r13, r14\n\tmov r14, r15\n\t"
    "dec r16\n\t"
    "brne 20b\n"
    "21:\n\t"
    "ldd r16, Y+34\n\t"
    "add r16, r12\n"
    "19:\n\t"                                   /* the output, unless a padding row */
    "ldd r17, Y+37\n\t"
    "cp r17, r3\n\t"
    "brsh 22f\n\t"
    "st X+, r16\n"
    "22:\n\t"
    "dec r3\n\t"
    "breq 23f\n\t"
    "rjmp 12b\n"
    "23:\n\t"
    "std Y+4, r30\n\tstd Y+5, r31\n\t"
    "std Y+6, r26\n\tstd Y+7, r27\n\t"
    "ldd r24, Y+8\n\tldd r25, Y+9\n\t"
    "or r24, r25\n\t"
    "breq 24f\n\t"
    "rjmp 10b\n"
    "24:\n\t"
    "clr r1\n\t"
    QE_AVR_POP_SAVED
    "ret\n"
    ".size qe_avr_fc_batch, .-qe_avr_fc_batch\n"
    ".text\n");

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

/* The generator's output stage (p->fast), as the AVR asm computes it, for the host tests. */
static int8_t avr_fast_output(const qe_fc_s8_avr_params_t *p, int32_t x)
{
    uint64_t m = 0u, r = 0u;
    int64_t v;
    int i;
    if (x <= p->sat_low) {
        return (int8_t)p->activation_min;
    }
    if (x >= p->sat_high) {
        return (int8_t)p->activation_max;
    }
    for (i = 4; i >= 0; --i) {
        m = (m << 8) | p->m_prime[i];
        r = (r << 8) | p->round[x < 0][i];
    }
    /* |x| <= 2^23 here (the generator's condition for fast), m < 2^40, r < 2^64 / 256 */
    v = (int64_t)x * (int64_t)m + (int64_t)(r << 24);
    return (int8_t)(uint8_t)((uint8_t)((uint64_t)v >> (8u * (4u + p->byte_moves)))
                             + (uint8_t)p->output_offset);
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
