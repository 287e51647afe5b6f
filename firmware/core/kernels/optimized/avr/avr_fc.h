/* What the avr variant's FULLY_CONNECTED kernels share (fully_connected.c: int8 weights,
 * fully_connected_s4.c: int4 weights; see ../README.md): the batch routine's context, the
 * register saves, and the batch routine itself (a row group's dot product, then the generator's
 * output stage, per group) as a macro of its dot product: the int8 and the int4 streams differ
 * only in how a group's four 24-bit sums are made (CLEAR_SUMS and DOT leave them in registers,
 * PUSH_SUMS pushes them, row 0's bytes on top). Moved here unchanged from fully_connected.c. */
#ifndef QE_AVR_FC_H
#define QE_AVR_FC_H

#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected.h"

#if defined(__AVR__)

#define QE_AVR_PUSH_SAVED                                                                \
    "push r2\n\tpush r3\n\tpush r4\n\tpush r5\n\tpush r6\n\tpush r7\n\tpush r8\n\tpush r9\n\t" \
    "push r10\n\tpush r11\n\tpush r12\n\tpush r13\n\tpush r14\n\tpush r15\n\tpush r16\n\t" \
    "push r17\n\tpush r28\n\tpush r29\n\t"
#define QE_AVR_POP_SAVED                                                                 \
    "pop r29\n\tpop r28\n\tpop r17\n\tpop r16\n\tpop r15\n\tpop r14\n\tpop r13\n\tpop r12\n\t" \
    "pop r11\n\tpop r10\n\tpop r9\n\tpop r8\n\tpop r7\n\tpop r6\n\tpop r5\n\tpop r4\n\t" \
    "pop r3\n\tpop r2\n\t"

/* One batch, every row group, with the generator's output stage (params fast = 1; see
 * fully_connected.h and converters/ops/optimized/avr/fully_connected.py, avr_output_stage): per
 * group the dot product (the kernel's DOT), its four 24-bit sums pushed on the stack, then per output: + bias' (LPM),
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

/* The batch routine NAME(qe_avr_fc_ctx_t *ctx), CLEAR_SUMS and DOT making a group's sums, PUSH_SUMS
 * pushing them. Registers in the output stage: r0:1 MUL, r2 zero, r3 outputs left in the group
 * (4..1), r4..r8 m', r9..r15 the product's bytes 1..7, r16..r21 a row (and temporaries),
 * r22..r25 the accumulator, X the outputs, Y the context, Z the bias' (flash). */
#define QE_AVR_BATCH_ASM(NAME, CLEAR_SUMS, DOT, PUSH_SUMS)                                        \
    __asm__(                                                                                      \
    ".section .text." NAME ",\"ax\",@progbits\n"                                                  \
    ".global " NAME "\n"                                                                          \
    ".type " NAME ", @function\n"                                                                 \
    NAME ":\n\t"                                                                                  \
    QE_AVR_PUSH_SAVED                                                                             \
    "movw r28, r24\n"                                                                             \
    "10:\n\t"                                   /* a row group */                                 \
    "ldd r26, Y+0\n\tldd r27, Y+1\n\t"                                                            \
    "ldd r30, Y+2\n\tldd r31, Y+3\n\t"                                                            \
    CLEAR_SUMS                                                                                    \
    DOT                                                                                           \
    "std Y+2, r30\n\tstd Y+3, r31\n\t"                                                            \
    PUSH_SUMS                                   /* the sums on the stack, row 0's bytes on top */ \
    "clr r2\n\t"                                                                                  \
    "ldd r30, Y+4\n\tldd r31, Y+5\n\t"                                                            \
    "ldd r26, Y+6\n\tldd r27, Y+7\n\t"                                                            \
    "ldd r4, Y+18\n\tldd r5, Y+19\n\tldd r6, Y+20\n\tldd r7, Y+21\n\tldd r8, Y+22\n\t"            \
    /* this group's rows: min(4, rows_left); its padding rows 4 - that */                         \
    "ldd r24, Y+8\n\tldd r25, Y+9\n\t"                                                            \
    "ldi r16, 4\n\t"                                                                              \
    "cpi r24, 4\n\t"                                                                              \
    "cpc r25, r2\n\t"                                                                             \
    "brsh 11f\n\t"                                                                                \
    "mov r16, r24\n"                                                                              \
    "11:\n\t"                                                                                     \
    "sub r24, r16\n\tsbc r25, r2\n\t"                                                             \
    "std Y+8, r24\n\tstd Y+9, r25\n\t"                                                            \
    "ldi r17, 4\n\tsub r17, r16\n\tstd Y+37, r17\n\t"                                             \
    "ldi r16, 4\n\tmov r3, r16\n"                                                                 \
    "12:\n\t"                                   /* an output */                                   \
    "pop r22\n\tpop r23\n\tpop r24\n\t"                                                           \
    "mov r25, r24\n\tlsl r25\n\tsbc r25, r25\n\t"                                                 \
    "lpm r16, Z+\n\tlpm r17, Z+\n\tlpm r18, Z+\n\tlpm r19, Z+\n\t"                                \
    "add r22, r16\n\tadc r23, r17\n\tadc r24, r18\n\tadc r25, r19\n\t"                            \
    /* acc <= sat_low: activation_min */                                                          \
    "ldd r16, Y+10\n\tldd r17, Y+11\n\tldd r18, Y+12\n\tldd r19, Y+13\n\t"                        \
    "cp r16, r22\n\tcpc r17, r23\n\tcpc r18, r24\n\tcpc r19, r25\n\t"                             \
    "brlt 13f\n\t"                                                                                \
    "ldd r16, Y+35\n\t"                                                                           \
    "rjmp 19f\n"                                                                                  \
    "13:\n\t"                                   /* acc >= sat_high: activation_max */             \
    "ldd r16, Y+14\n\tldd r17, Y+15\n\tldd r18, Y+16\n\tldd r19, Y+17\n\t"                        \
    "cp r22, r16\n\tcpc r23, r17\n\tcpc r24, r18\n\tcpc r25, r19\n\t"                             \
    "brlt 14f\n\t"                                                                                \
    "ldd r16, Y+36\n\t"                                                                           \
    "rjmp 19f\n"                                                                                  \
    "14:\n\t"                                   /* between: 24 bits; 16 when r24 is r23's sign */ \
    "mov r16, r23\n\tlsl r16\n\tsbc r16, r16\n\t"                                                 \
    "cp r16, r24\n\t"                                                                             \
    "brne 15f\n\t"                                                                                \
    QE_AVR_ROW0                                                                                   \
    QE_AVR_ROW5("r23")                                                                            \
    "add r9, r16\n\tadc r10, r17\n\tadc r11, r18\n\tadc r12, r19\n\tadc r13, r20\n\t"             \
    "adc r14, r21\n\tadc r15, r2\n\t"                                                             \
    "sbrs r25, 7\n\t"                                                                             \
    "rjmp 16f\n\t"                                                                                \
    "sub r10, r4\n\tsbc r11, r5\n\tsbc r12, r6\n\tsbc r13, r7\n\tsbc r14, r8\n\tsbc r15, r2\n\t"  \
    "rjmp 16f\n"                                                                                  \
    "15:\n\t"                                                                                     \
    QE_AVR_ROW0                                                                                   \
    QE_AVR_ROW5("r23")                                                                            \
    "add r9, r16\n\tadc r10, r17\n\tadc r11, r18\n\tadc r12, r19\n\tadc r13, r20\n\t"             \
    "adc r14, r21\n\tadc r15, r2\n\t"                                                             \
    QE_AVR_ROW5("r24")                                                                            \
    "add r10, r16\n\tadc r11, r17\n\tadc r12, r18\n\tadc r13, r19\n\tadc r14, r20\n\t"            \
    "adc r15, r21\n\t"                                                                            \
    "sbrs r25, 7\n\t"                                                                             \
    "rjmp 16f\n\t"                                                                                \
    "sub r11, r4\n\tsbc r12, r5\n\tsbc r13, r6\n\tsbc r14, r7\n\tsbc r15, r8\n"                   \
    "16:\n\t"                                   /* + r'[acc < 0] at bytes 3..7 */                 \
    "sbrc r25, 7\n\t"                                                                             \
    "rjmp 17f\n\t"                                                                                \
    "ldd r16, Y+23\n\tldd r17, Y+24\n\tldd r18, Y+25\n\tldd r19, Y+26\n\tldd r20, Y+27\n\t"       \
    "rjmp 18f\n"                                                                                  \
    "17:\n\t"                                                                                     \
    "ldd r16, Y+28\n\tldd r17, Y+29\n\tldd r18, Y+30\n\tldd r19, Y+31\n\tldd r20, Y+32\n"         \
    "18:\n\t"                                                                                     \
    "add r11, r16\n\tadc r12, r17\n\tadc r13, r18\n\tadc r14, r19\n\tadc r15, r20\n\t"            \
    "ldd r16, Y+33\n\t"                         /* byte 4 + byte_moves, into r12 */               \
    "tst r16\n\t"                                                                                 \
    "breq 21f\n"                                                                                  \
    "20:\n\t"                                                                                     \
    "mov r12, r13\n\tmov r13, r14\n\tmov r14, r15\n\t"                                            \
    "dec r16\n\t"                                                                                 \
    "brne 20b\n"                                                                                  \
    "21:\n\t"                                                                                     \
    "ldd r16, Y+34\n\t"                                                                           \
    "add r16, r12\n"                                                                              \
    "19:\n\t"                                   /* the output, unless a padding row */            \
    "ldd r17, Y+37\n\t"                                                                           \
    "cp r17, r3\n\t"                                                                              \
    "brsh 22f\n\t"                                                                                \
    "st X+, r16\n"                                                                                \
    "22:\n\t"                                                                                     \
    "dec r3\n\t"                                                                                  \
    "breq 23f\n\t"                                                                                \
    "rjmp 12b\n"                                                                                  \
    "23:\n\t"                                                                                     \
    "std Y+4, r30\n\tstd Y+5, r31\n\t"                                                            \
    "std Y+6, r26\n\tstd Y+7, r27\n\t"                                                            \
    "ldd r24, Y+8\n\tldd r25, Y+9\n\t"                                                            \
    "or r24, r25\n\t"                                                                             \
    "breq 24f\n\t"                                                                                \
    "rjmp 10b\n"                                                                                  \
    "24:\n\t"                                                                                     \
    "clr r1\n\t"                                                                                  \
    QE_AVR_POP_SAVED                                                                              \
    "ret\n"                                                                                       \
    ".size " NAME ", .-" NAME "\n"                                                                \
    ".text\n");

#else /* not AVR (the host) */

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

#endif
