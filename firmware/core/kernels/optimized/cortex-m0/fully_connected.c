/* FULLY_CONNECTED, optimized variant "cortex-m0" (see ../README.md): qe_fully_connected_s8_packed
 * for ARMv6-M cores (Cortex-M0/M0+: no DSP extension, no long multiply, LDM/MULS on the low
 * registers only), on the generator's packed layout (../../fully_connected.h): the weights are
 * int16 pairs with both zero points folded in, four rows interleaved, so the inner loop is loads,
 * one sign extension per weight, MULS and ADD:
 *
 *  - the input is widened once per batch into a stack buffer of int32, per quad of inputs in the
 *    order x0, x2, x1, x3 -- the partners of each weight word's low and high halves;
 *  - per half quad: LDM of the two inputs, then per two rows LDM of two weight words, and per
 *    weight SXTH (low half) or ASRS #16 (high half), MULS, ADD into the row's accumulator
 *    (which lives in a high register: ADD accepts those). 27 instructions per 8 MACs.
 *
 * Why the integers are the reference's: the products are exact in 32 bits (|w'| <= 255,
 * |x| <= 128) and the sums wrap like the reference's int32 sum, which the generator's bounds keep
 * from overflowing in any order (fully_connected.h). The output stage for right shifts
 * (requant_right_output below) builds TFLM's 64-bit product from 16-bit halves; other shifts take
 * requant.h's. Without __ARM_ARCH_6M__ (the host) the inner loop is the same walk in C, so the
 * host tests (ASan/UBSan) cover the widening, the layout and the output stage too. The other
 * FULLY_CONNECTED functions are the reference's, included below with the packed one renamed out
 * of the way (*_reference, which the tests compare against). */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected.h"
#include "../../../requant.h"

#if defined(__AVR__)
#error "the cortex-m0 kernels read weights through plain pointers; AVR boards use the reference (__flash)"
#endif

#define qe_fully_connected_s8_packed qe_fully_connected_s8_packed_reference
#define qe_fully_connected_s8_pairs qe_fully_connected_s8_pairs_reference
#define qe_fully_connected_s8_bytes qe_fully_connected_s8_bytes_reference
#include "../../fully_connected.c"
#undef qe_fully_connected_s8_packed
#undef qe_fully_connected_s8_pairs
#undef qe_fully_connected_s8_bytes

/* The input of one batch as int32 in the weight words' order, zeros past accum_depth. */
static void widen_input(const int8_t *in, uint32_t n, uint32_t padded, int32_t *xb)
{
    uint32_t d;
    for (d = 0; d < padded; d += 4u) {
        xb[d] = (d < n) ? in[d] : 0;
        xb[d + 1u] = (d + 2u < n) ? in[d + 2u] : 0;
        xb[d + 2u] = (d + 1u < n) ? in[d + 1u] : 0;
        xb[d + 3u] = (d + 3u < n) ? in[d + 3u] : 0;
    }
}

#include "requant_right.h"          /* requant_right_t, requant_right_output */

#if defined(__ARM_ARCH_6M__)

/* Two rows of one half quad: the weight words in r4, r5 (LDM), the inputs in r2 (low halves'
 * partner) and r3 (high halves'). */
#define TWO_ROWS(A, B)                                                            \
    "ldm %[w]!, {r4, r5}\n\t"                                                     \
    "sxth r6, r4\n\t"                                                             \
    "muls r6, r2, r6\n\t"                                                         \
    "add " A ", r6\n\t"                                                           \
    "asrs r4, r4, #16\n\t"                                                        \
    "muls r4, r3, r4\n\t"                                                         \
    "add " A ", r4\n\t"                                                           \
    "sxth r6, r5\n\t"                                                             \
    "muls r6, r2, r6\n\t"                                                         \
    "add " B ", r6\n\t"                                                           \
    "asrs r5, r5, #16\n\t"                                                        \
    "muls r5, r3, r5\n\t"                                                         \
    "add " B ", r5\n\t"

#define HALF_QUAD                                                                 \
    "ldm %[x]!, {r2, r3}\n\t"                                                     \
    TWO_ROWS("%[a0]", "%[a1]")                                                    \
    TWO_ROWS("%[a2]", "%[a3]")

/* acc[0..3] += one row group's weights times the widened input */
static void group_dot(const int32_t *x, const int32_t *x_end, const int32_t **wp, int32_t acc[4])
{
    const int32_t *w = *wp;
    /* the accumulators in high registers (ADD Rd, Rm takes any), the rest low */
    register int32_t a0 __asm("r8") = acc[0];
    register int32_t a1 __asm("r9") = acc[1];
    register int32_t a2 __asm("r10") = acc[2];
    register int32_t a3 __asm("r11") = acc[3];
    while (x != x_end) {
        /* gcc hands inline asm over in divided syntax on Thumb-1; ours is unified */
        __asm volatile(".syntax unified\n\t" HALF_QUAD HALF_QUAD
                       : [x] "+l"(x), [w] "+l"(w), [a0] "+r"(a0), [a1] "+r"(a1),
                         [a2] "+r"(a2), [a3] "+r"(a3)
                       :
                       : "r2", "r3", "r4", "r5", "r6", "cc", "memory");
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
    *wp = w;
}

#else /* not ARMv6-M (the host): the same loop in C, for the tests */

static void group_dot(const int32_t *x, const int32_t *x_end, const int32_t **wp, int32_t acc[4])
{
    const int32_t *w = *wp;
    uint32_t r;
    for (; x != x_end; x += 2) {                /* a half quad: two inputs, four words */
        for (r = 0; r < 4u; ++r, ++w) {
            const uint32_t bits = (uint32_t)*w;
            const int32_t lo = (int32_t)(bits & 0xFFFFu) - (int32_t)((bits & 0x8000u) << 1);
            const int32_t hi = (int32_t)(bits >> 16) - (int32_t)((bits >> 15) & 0x10000u);
            acc[r] += lo * x[0] + hi * x[1];
        }
    }
    *wp = w;
}

#endif /* __ARM_ARCH_6M__ */

void qe_fully_connected_s8_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH int32_t *weights, const QE_FLASH int32_t *bias,
                                  int8_t *output)
{
    const uint32_t n = p->accum_depth, padded = p->padded_depth, rows = p->output_depth;
    const int32_t multiplier = p->output_multiplier, shift = p->output_shift;
    const int32_t offset = p->output_offset, act_min = p->activation_min,
                  act_max = p->activation_max;
    int32_t xb[QE_FC_PACKED_MAX_DEPTH];
    requant_right_t rr;
    const int fast = requant_right_init(&rr, multiplier, shift, offset, act_min, act_max);
    uint32_t b, o, r;

    for (b = 0; b < p->batches; ++b) {
        int8_t *out = output + b * rows;
        const int32_t *w = (const int32_t *)weights;
        widen_input(input + b * n, n, padded, xb);
        for (o = 0; o < rows; o += QE_FC_PACKED_ROWS) {
            int32_t acc[4];
            acc[0] = bias[o];
            acc[1] = bias[o + 1u];
            acc[2] = bias[o + 2u];
            acc[3] = bias[o + 3u];
            group_dot(xb, xb + padded, &w, acc);
            if (fast) {
                for (r = 0; r < QE_FC_PACKED_ROWS && o + r < rows; ++r) {
                    out[o + r] = (int8_t)requant_right_output(&rr, acc[r]);
                }
            } else {
                for (r = 0; r < QE_FC_PACKED_ROWS && o + r < rows; ++r) {
                    out[o + r] = (int8_t)qe_requantize_output(acc[r], multiplier, shift, offset,
                                                              act_min, act_max);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------ pairs layout
 * qe_fully_connected_s8_pairs on the generator's chunked row pairs (../../fully_connected.h):
 * one MULS of a weight word (65536 w'_hi + w'_lo) by the widened input x is both rows' products,
 * and the chunk's 32-bit sum of those is 65536 H + L with L, H the rows' int16 chunk sums (the
 * generator's bound), so per input of a four-row pass: two words by one LDM, two MULS, two ADDS
 * (6 instructions for 4 MACs; per two inputs one LDM of the inputs and the loop's CMP/BNE: 13
 * per 8 MACs). At a chunk's end each packed sum is split, L = SXTH, H = (S - L) >> 16, into the
 * rows' int32 accumulators (r8-r11). */
#if defined(__ARM_ARCH_6M__)

static const int32_t *pairs_group(const int32_t *x, const int32_t *w, int32_t acc[4])
{
    register int32_t a0 __asm("r8") = acc[0];
    register int32_t a1 __asm("r9") = acc[1];
    register int32_t a2 __asm("r10") = acc[2];
    register int32_t a3 __asm("r11") = acc[3];
    __asm volatile(".syntax unified\n"
                   "1:\n\t"
                   "ldm %[w]!, {r4}\n\t"            /* a chunk: 4 L, 0 ends the group */
                   "cmp r4, #0\n\t"
                   "beq 9f\n\t"
                   "adds r5, %[x], r4\n\t"
                   "mov r12, r5\n\t"                /* the chunk's end in the input */
                   "movs r2, #0\n\t"
                   "movs r3, #0\n\t"
                   "lsrs r4, r4, #3\n\t"            /* an odd input first (L's bit 0) */
                   "bcc 3f\n\t"
                   "ldm %[x]!, {r4}\n\t"
                   "ldm %[w]!, {r6, r7}\n\t"
                   "muls r6, r4, r6\n\t"
                   "muls r7, r4, r7\n\t"
                   "adds r2, r2, r6\n\t"
                   "adds r3, r3, r7\n\t"
                   "cmp %[x], r12\n\t"
                   "beq 5f\n"
                   "3:\n\t"                         /* then two per pass */
                   "ldm %[x]!, {r4, r5}\n\t"
                   "ldm %[w]!, {r6, r7}\n\t"
                   "muls r6, r4, r6\n\t"
                   "muls r7, r4, r7\n\t"
                   "adds r2, r2, r6\n\t"
                   "adds r3, r3, r7\n\t"
                   "ldm %[w]!, {r6, r7}\n\t"
                   "muls r6, r5, r6\n\t"
                   "muls r7, r5, r7\n\t"
                   "adds r2, r2, r6\n\t"
                   "adds r3, r3, r7\n\t"
                   "cmp %[x], r12\n\t"
                   "bne 3b\n"
                   "5:\n\t"                         /* split the packed sums */
                   "sxth r4, r2\n\t"
                   "subs r2, r2, r4\n\t"
                   "asrs r2, r2, #16\n\t"
                   "add %[a0], r4\n\t"
                   "add %[a1], r2\n\t"
                   "sxth r4, r3\n\t"
                   "subs r3, r3, r4\n\t"
                   "asrs r3, r3, #16\n\t"
                   "add %[a2], r4\n\t"
                   "add %[a3], r3\n\t"
                   "b 1b\n"
                   "9:\n\t"
                   : [x] "+l"(x), [w] "+l"(w), [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2),
                     [a3] "+r"(a3)
                   :
                   : "r2", "r3", "r4", "r5", "r6", "r7", "r12", "cc", "memory");
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
    return w;
}

#elif !defined(QE_FC_PAIRS_GROUP_OWN) /* the host (and the rv32 variant off RISC-V, whose file
       * has its own walk on RISC-V): the same walk in C, wrapping 32-bit packed sums split at
       * each chunk's end */

static const int32_t *pairs_group(const int32_t *x, const int32_t *w, int32_t acc[4])
{
    int32_t len;
    while ((len = *w++ / 4) != 0) {                     /* the word is 4 L */
        uint32_t s01 = 0u, s23 = 0u;
        int32_t lo;
        /* two inputs a pass (18 instructions per 8 MACs for rv32 with gcc -O2; on RISC-V
         * rv32/fully_connected.c walks in asm instead) */
        for (; len >= 2; len -= 2, x += 2, w += 4) {
            s01 += (uint32_t)w[0] * (uint32_t)x[0] + (uint32_t)w[2] * (uint32_t)x[1];
            s23 += (uint32_t)w[1] * (uint32_t)x[0] + (uint32_t)w[3] * (uint32_t)x[1];
        }
        if (len != 0) {                                /* modulo 2^32, as MULS, ADDS */
            s01 += (uint32_t)w[0] * (uint32_t)*x;
            s23 += (uint32_t)w[1] * (uint32_t)*x;
            ++x;
            w += 2;
        }
        lo = (int32_t)(s01 & 0xFFFFu) - (int32_t)((s01 & 0x8000u) << 1);   /* SXTH */
        acc[0] += lo;
        acc[1] += (int32_t)((s01 - (uint32_t)lo) >> 16) - (int32_t)((s01 - (uint32_t)lo) >> 31 << 16);
        lo = (int32_t)(s23 & 0xFFFFu) - (int32_t)((s23 & 0x8000u) << 1);
        acc[2] += lo;
        acc[3] += (int32_t)((s23 - (uint32_t)lo) >> 16) - (int32_t)((s23 - (uint32_t)lo) >> 31 << 16);
    }
    return w;
}

#endif /* __ARM_ARCH_6M__ */

/* One output through the step table (fully_connected.h): u outside [0, span] is saturated;
 * otherwise b, the output byte or one less, corrected by one compare with the table. */
static inline int8_t steps_output(const uint32_t *steps, int32_t a, uint32_t lo, uint32_t span,
                                  uint32_t mul, uint32_t add, int32_t sat_low, int32_t act_min,
                                  int32_t act_max)
{
    const uint32_t u = (uint32_t)a - lo;
    uint32_t b;
    if (u > span) {
        return (int8_t)(a <= sat_low ? act_min : act_max);
    }
    b = (u * mul + add) >> 24;
    b = (b + (u >= steps[b])) & 0xFFu;
    return (int8_t)((int32_t)b - (int32_t)((b & 0x80u) << 1));   /* the byte as int8 */
}

#if defined(__ARM_ARCH_6M__)
/* Whole row groups with the step table, in one asm block (gcc kept the output stage's
 * constants on the stack and spilled around the MAC loop: ~26 instructions an output and ~50 a
 * group). Per group: the bias' by one LDM, the chunks as pairs_group, then per output MOV,
 * SUBS, CMP, BHI (saturated: the bound's side), MOVS, MULS, ADDS, LSRS #24, LSLS, LDR, CMP, BCC
 * (+ ADDS, B), STRB: 13-15 instructions, the constants in r0, r4-r6, r12. The context (field
 * offsets are the asm's) lives in lr across the block. */
typedef struct {
    const int32_t *xb;          /* 0: the widened input */
    const int32_t *bias;        /* 4: the next group's bias' (advanced) */
    int8_t *out;                /* 8: the next group's outputs (advanced) */
    const int8_t *out_end;      /* 12: past the last whole group's outputs */
    uint32_t lo;                /* 16: steps_lo */
    uint32_t span;              /* 20: sat_above - steps_lo */
    uint32_t mul;               /* 24 */
    uint32_t add;               /* 28 */
    const uint32_t *steps;      /* 32 */
    int32_t act_min;            /* 36 */
    int32_t act_max;            /* 40 */
    const int32_t *w;           /* 44: the stream, kept here during the outputs */
} steps_groups_t;

#define STEPS_OUT(ACC, K)                                                         \
    "mov r2, " ACC "\n\t"                                                         \
    "subs r2, r2, r5\n\t"                 /* u = a - lo */                        \
    "cmp r2, r12\n\t"                                                             \
    "bhi 7f\n\t"                                                                  \
    "movs r3, r2\n\t"                                                             \
    "muls r3, r0, r3\n\t"                                                         \
    "adds r3, r3, r4\n\t"                                                         \
    "lsrs r3, r3, #24\n\t"                /* b: the byte or one less */           \
    "lsls r1, r3, #2\n\t"                                                         \
    "ldr r1, [r6, r1]\n\t"                                                        \
    "cmp r2, r1\n\t"                                                              \
    "bcc 8f\n\t"                                                                  \
    "adds r3, r3, #1\n\t"                                                         \
    "b 8f\n"                                                                      \
    "7:\n\t"                              /* saturated: a < lo or a > sat_above */ \
    "mov r1, lr\n\t"                                                              \
    "ldr r3, [r1, #36]\n\t"                                                       \
    "adds r2, r2, r5\n\t"                                                         \
    "cmp r2, r5\n\t"                                                              \
    "blt 8f\n\t"                                                                  \
    "ldr r3, [r1, #40]\n"                                                         \
    "8:\n\t"                                                                      \
    "strb r3, [r7, #" K "]\n\t"

static const int32_t *steps_groups(steps_groups_t *ctx, const int32_t *stream)
{
    register steps_groups_t *c __asm("r0") = ctx;
    register const int32_t *w __asm("r1") = stream;
    __asm volatile(".syntax unified\n\t"
                   "mov lr, r0\n\t"
                   "mov r3, r0\n"
                   "0:\n\t"                         /* a group: bias', x = xb (r3 = lr) */
                   "ldr r2, [r3, #4]\n\t"
                   "ldm r2!, {r4, r5, r6, r7}\n\t"
                   "str r2, [r3, #4]\n\t"
                   "mov r8, r4\n\t"
                   "mov r9, r5\n\t"
                   "mov r10, r6\n\t"
                   "mov r11, r7\n\t"
                   "ldr r0, [r3, #0]\n"
                   "1:\n\t"                         /* a chunk: 4 L, 0 ends the group */
                   "ldm r1!, {r4}\n\t"
                   "cmp r4, #0\n\t"
                   "beq 6f\n\t"
                   "adds r5, r0, r4\n\t"
                   "mov r12, r5\n\t"
                   "movs r2, #0\n\t"
                   "movs r3, #0\n\t"
                   "lsrs r4, r4, #3\n\t"
                   "bcc 3f\n\t"
                   "ldm r0!, {r4}\n\t"
                   "ldm r1!, {r6, r7}\n\t"
                   "muls r6, r4, r6\n\t"
                   "muls r7, r4, r7\n\t"
                   "adds r2, r2, r6\n\t"
                   "adds r3, r3, r7\n\t"
                   "cmp r0, r12\n\t"
                   "beq 5f\n"
                   "3:\n\t"
                   "ldm r0!, {r4, r5}\n\t"
                   "ldm r1!, {r6, r7}\n\t"
                   "muls r6, r4, r6\n\t"
                   "muls r7, r4, r7\n\t"
                   "adds r2, r2, r6\n\t"
                   "adds r3, r3, r7\n\t"
                   "ldm r1!, {r6, r7}\n\t"
                   "muls r6, r5, r6\n\t"
                   "muls r7, r5, r7\n\t"
                   "adds r2, r2, r6\n\t"
                   "adds r3, r3, r7\n\t"
                   "cmp r0, r12\n\t"
                   "bne 3b\n"
                   "5:\n\t"
                   "sxth r4, r2\n\t"
                   "subs r2, r2, r4\n\t"
                   "asrs r2, r2, #16\n\t"
                   "add r8, r4\n\t"
                   "add r9, r2\n\t"
                   "sxth r4, r3\n\t"
                   "subs r3, r3, r4\n\t"
                   "asrs r3, r3, #16\n\t"
                   "add r10, r4\n\t"
                   "add r11, r3\n\t"
                   "b 1b\n"
                   "6:\n\t"                         /* the group's four outputs */
                   "mov r3, lr\n\t"
                   "str r1, [r3, #44]\n\t"
                   "ldr r0, [r3, #24]\n\t"
                   "ldr r4, [r3, #28]\n\t"
                   "ldr r5, [r3, #16]\n\t"
                   "ldr r6, [r3, #32]\n\t"
                   "ldr r7, [r3, #8]\n\t"
                   "ldr r2, [r3, #20]\n\t"
                   "mov r12, r2\n\t"
                   STEPS_OUT("r8", "0")
                   STEPS_OUT("r9", "1")
                   STEPS_OUT("r10", "2")
                   STEPS_OUT("r11", "3")
                   "adds r7, r7, #4\n\t"
                   "mov r3, lr\n\t"
                   "str r7, [r3, #8]\n\t"
                   "ldr r1, [r3, #44]\n\t"
                   "ldr r2, [r3, #12]\n\t"
                   "cmp r7, r2\n\t"
                   "beq 9f\n\t"                     /* (BNE does not reach back that far) */
                   "b 0b\n"
                   "9:\n\t"
                   : "+l"(c), "+l"(w)
                   :
                   : "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "lr",
                     "cc", "memory");
    return w;
}
#undef STEPS_OUT
#endif /* __ARM_ARCH_6M__ */

void qe_fully_connected_s8_pairs(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                 const QE_FLASH int32_t *stream, const QE_FLASH int32_t *bias,
                                 int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const int32_t multiplier = p->output_multiplier, shift = p->output_shift;
    const int32_t offset = p->output_offset, act_min = p->activation_min,
                  act_max = p->activation_max, sat_low = p->sat_low, sat_above = p->sat_above;
    int32_t xb[QE_FC_PACKED_MAX_DEPTH];
    requant_right_t rr;
    const int fast = requant_right_init(&rr, multiplier, shift, offset, act_min, act_max);
    /* the step table (fully_connected.h): one multiply, one load, one compare an output */
    const uint32_t *const steps = p->steps;
    const uint32_t s_lo = (uint32_t)p->steps_lo, s_span = (uint32_t)sat_above - s_lo;
    const uint32_t s_mul = p->steps_mul, s_add = p->steps_add;
    uint32_t b, o, r, d;

    for (b = 0; b < p->batches; ++b) {
        int8_t *out = output + b * rows;
        const int32_t *w = (const int32_t *)stream;
        const int8_t *in = input + b * n;
        for (d = 0; d + 4u <= n; d += 4u) {              /* four a pass: ~3 instructions each */
            const int32_t x0 = in[d], x1 = in[d + 1u], x2 = in[d + 2u], x3 = in[d + 3u];
            xb[d] = x0;
            xb[d + 1u] = x1;
            xb[d + 2u] = x2;
            xb[d + 3u] = x3;
        }
        for (; d < n; ++d) {
            xb[d] = in[d];
        }
        o = 0;
#if defined(__ARM_ARCH_6M__) || defined(QE_FC_STEPS_GROUPS_OWN)   /* (rv32: its file's) */
        if (steps != NULL && rows >= QE_FC_PAIRS_ROWS) {      /* the whole groups in asm */
            steps_groups_t g;
            g.xb = xb;
            g.bias = (const int32_t *)bias;
            g.out = out;
            g.out_end = out + (rows / QE_FC_PAIRS_ROWS) * QE_FC_PAIRS_ROWS;
            g.lo = s_lo;
            g.span = s_span;
            g.mul = s_mul;
            g.add = s_add;
            g.steps = steps;
            g.act_min = act_min;
            g.act_max = act_max;
            w = steps_groups(&g, w);
            o = (rows / QE_FC_PAIRS_ROWS) * QE_FC_PAIRS_ROWS;
        }
#endif
        for (; o < rows; o += QE_FC_PAIRS_ROWS) {
            int32_t acc[4];
            acc[0] = bias[o];
            acc[1] = bias[o + 1u];
            acc[2] = bias[o + 2u];
            acc[3] = bias[o + 3u];
            w = pairs_group(xb, w, acc);
            if (steps != NULL && o + QE_FC_PAIRS_ROWS <= rows) {   /* a whole group */
                int8_t *const g = out + o;
                g[0] = steps_output(steps, acc[0], s_lo, s_span, s_mul, s_add, sat_low, act_min, act_max);
                g[1] = steps_output(steps, acc[1], s_lo, s_span, s_mul, s_add, sat_low, act_min, act_max);
                g[2] = steps_output(steps, acc[2], s_lo, s_span, s_mul, s_add, sat_low, act_min, act_max);
                g[3] = steps_output(steps, acc[3], s_lo, s_span, s_mul, s_add, sat_low, act_min, act_max);
            } else if (steps != NULL) {
                for (r = 0; r < QE_FC_PAIRS_ROWS && o + r < rows; ++r) {
                    out[o + r] = steps_output(steps, acc[r], s_lo, s_span, s_mul, s_add,
                                              sat_low, act_min, act_max);
                }
            } else if (fast && o + QE_FC_PAIRS_ROWS <= rows) {     /* a whole group, unrolled */
                int8_t *const g = out + o;
#define QE_M0_PAIRS_OUT(a)                                                                \
    (int8_t)((a) <= sat_low ? act_min : (a) > sat_above ? act_max : requant_right_output(&rr, (a)))
                g[0] = QE_M0_PAIRS_OUT(acc[0]);
                g[1] = QE_M0_PAIRS_OUT(acc[1]);
                g[2] = QE_M0_PAIRS_OUT(acc[2]);
                g[3] = QE_M0_PAIRS_OUT(acc[3]);
#undef QE_M0_PAIRS_OUT
            } else if (fast) {
                for (r = 0; r < QE_FC_PAIRS_ROWS && o + r < rows; ++r) {
                    /* saturated: the generator's bounds say so, no requantization */
                    const int32_t a = acc[r];
                    out[o + r] = (int8_t)(a <= sat_low ? act_min
                                          : a > sat_above ? act_max
                                                          : requant_right_output(&rr, a));
                }
            } else {
                for (r = 0; r < QE_FC_PAIRS_ROWS && o + r < rows; ++r) {
                    out[o + r] = (int8_t)qe_requantize_output(acc[r], multiplier, shift, offset,
                                                              act_min, act_max);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------ byte lanes
 * qe_fully_connected_s8_bytes on the generator's byte-lane layout (../../fully_connected.h), for
 * layers deeper than QE_FC_PACKED_MAX_DEPTH (MinAtar's 1,024 -> 128): one word holds one input's
 * weights of four rows as offset-binary bytes u_k = w' + 128 (the int8 weights' flash, where the
 * row pairs would take twice that: MinAtar's 1,024 x 128 layer would not fit the micro:bit's 256
 * KB). Per input the word and its right shifts by 8, 16 and 24 are multiplied by x and summed
 * (S_0..S_3, wrapping): u_k = (word >> 8k) - 256 (word >> 8(k+1)), so row k's sum of u x is
 * S_k - 256 S_(k+1) modulo 2^32, and its accumulator bias' - 128 X + that (X: the input's sum,
 * taken while widening it), modulo 2^32 the reference's int32 accumulator and so equal to it
 * (fully_connected.h). Exact for any depth and any weights, with no chunks: the cost per MAC does
 * not depend on the weights (the row pairs' chunks get short when the weights are large). */
#if defined(__ARM_ARCH_6M__)

/* One input of a row group: its x in X, its word in W (both low registers; W is consumed), r6
 * the temporary: LSRS, MULS, ADD per row but the last (MULS, ADD): 11 instructions per 4 MACs. */
#define BYTES_ONE(X, W)                                                           \
    "lsrs r6, " W ", #8\n\t"                                                      \
    "muls " W ", " X ", " W "\n\t"                                                \
    "add %[s0], " W "\n\t"                                                        \
    "lsrs " W ", r6, #8\n\t"                                                      \
    "muls r6, " X ", r6\n\t"                                                      \
    "add %[s1], r6\n\t"                                                           \
    "lsrs r6, " W ", #8\n\t"                                                      \
    "muls " W ", " X ", " W "\n\t"                                                \
    "add %[s2], " W "\n\t"                                                        \
    "muls r6, " X ", r6\n\t"                                                      \
    "add %[s3], r6\n\t"

/* two inputs: one LDM of the widened inputs, one of the two words */
#define BYTES_TWO                                                                 \
    "ldm %[x]!, {r2, r3}\n\t"                                                     \
    "ldm %[w]!, {r4, r5}\n\t"                                                     \
    BYTES_ONE("r2", "r4")                                                         \
    BYTES_ONE("r3", "r5")

/* s[0..3] = S_0..S_3 of one row group over x[0 .. x_end) (a multiple of 8 inputs, >= 8): eight
 * inputs a pass, 98 instructions per 32 MACs; the sums in r8-r11 (ADD takes high registers). */
static const uint32_t *bytes_group(const int32_t *x, const int32_t *x_end, const uint32_t *w,
                                   uint32_t s[4])
{
    register uint32_t s0 __asm("r8") = 0u;
    register uint32_t s1 __asm("r9") = 0u;
    register uint32_t s2 __asm("r10") = 0u;
    register uint32_t s3 __asm("r11") = 0u;
    __asm volatile(".syntax unified\n"
                   "1:\n\t"
                   BYTES_TWO BYTES_TWO BYTES_TWO BYTES_TWO
                   "cmp %[x], %[end]\n\t"
                   "bne 1b\n\t"
                   : [x] "+l"(x), [w] "+l"(w), [s0] "+r"(s0), [s1] "+r"(s1), [s2] "+r"(s2),
                     [s3] "+r"(s3)
                   : [end] "r"(x_end)
                   : "r2", "r3", "r4", "r5", "r6", "cc", "memory");
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
    return w;
}
#undef BYTES_ONE
#undef BYTES_TWO

#elif !defined(QE_FC_BYTES_GROUP_OWN) /* the host (and rv32 off RISC-V): the same sums in C */

static const uint32_t *bytes_group(const int32_t *x, const int32_t *x_end, const uint32_t *w,
                                   uint32_t s[4])
{
    uint32_t s0 = 0u, s1 = 0u, s2 = 0u, s3 = 0u;
    for (; x != x_end; ++x, ++w) {              /* modulo 2^32, as MULS and ADD */
        const uint32_t v = *w, xv = (uint32_t)*x;
        s0 += v * xv;
        s1 += (v >> 8) * xv;
        s2 += (v >> 16) * xv;
        s3 += (v >> 24) * xv;
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
    return w;
}

#endif /* __ARM_ARCH_6M__ */

void qe_fully_connected_s8_bytes(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                 const QE_FLASH uint32_t *words, const QE_FLASH int32_t *bias,
                                 int8_t *output, int32_t *scratch)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t padded = (n + QE_FC_BYTES_DEPTH_STEP - 1u) / QE_FC_BYTES_DEPTH_STEP
                            * QE_FC_BYTES_DEPTH_STEP;
    const int32_t multiplier = p->output_multiplier, shift = p->output_shift;
    const int32_t offset = p->output_offset, act_min = p->activation_min,
                  act_max = p->activation_max, sat_low = p->sat_low, sat_above = p->sat_above;
    requant_right_t rr;
    const int fast = requant_right_init(&rr, multiplier, shift, offset, act_min, act_max);
    const uint32_t *const steps = p->steps;
    const uint32_t s_lo = (uint32_t)p->steps_lo, s_span = (uint32_t)sat_above - s_lo;
    const uint32_t s_mul = p->steps_mul, s_add = p->steps_add;
    uint32_t b, o, r, d;

    for (b = 0; b < p->batches; ++b) {
        int8_t *out = output + b * rows;
        const uint32_t *w = (const uint32_t *)words;
        const int8_t *in = input + b * n;
        uint32_t sum = 0u, c;
        for (d = 0; d < n; ++d) {                       /* widened, and X = sum x */
            const int32_t v = in[d];
            scratch[d] = v;
            sum += (uint32_t)v;
        }
        for (; d < padded; ++d) {
            scratch[d] = 0;
        }
        c = 0u - (sum << 7);                            /* -128 X, modulo 2^32 */
        for (o = 0; o < rows; o += QE_FC_BYTES_ROWS) {
            uint32_t s[5];
            int32_t acc[4];
            w = bytes_group(scratch, scratch + padded, w, s);
            s[4] = 0u;
            for (r = 0; r < 4u; ++r) {                  /* bias' - 128 X + S_r - 256 S_(r+1) */
                acc[r] = (int32_t)((uint32_t)bias[o + r] + c + s[r] - (s[r + 1u] << 8));
            }
            for (r = 0; r < QE_FC_BYTES_ROWS && o + r < rows; ++r) {
                const int32_t a = acc[r];
                out[o + r] = steps != NULL
                    ? steps_output(steps, a, s_lo, s_span, s_mul, s_add, sat_low, act_min, act_max)
                    : fast ? (int8_t)(a <= sat_low ? act_min
                                      : a > sat_above ? act_max : requant_right_output(&rr, a))
                           : (int8_t)qe_requantize_output(a, multiplier, shift, offset, act_min,
                                                          act_max);
            }
        }
    }
}
