/* CONV_2D, optimized variant "cortex-m0" (see ../README.md): qe_conv_s8_rows for ARMv6-M cores
 * (and, by rv32/conv.c's include, 32-bit RISC-V cores without SIMD), on the generator's rows
 * filter (../../conv.h): the input is widened once per batch into an int32 image in scratch,
 * padded with its zero point (the input offset is in bias'); per output pixel the window's rows
 * are copied from it into a column (LDM/STM, four words a pair), and each group of four output
 * channels is a FULLY_CONNECTED walk over the column:
 *
 *  - per two column values one LDM of both, then per value one LDM of the four channels' int32
 *    weights, four MULS and four ADDs into the accumulators (r8-r11): 19 instructions per 8 MACs,
 *    21 with the loop's CMP/BNE;
 *  - the output stage per channel: the generator's step tables (conv.h's steps; an asm loop,
 *    18 instructions an output), else its requant_right_t table (conv.h's rq: the saturation
 *    bounds first, else requant_right_output, TFLM's double rounding without a long multiply),
 *    else requant.h's.
 *
 * On RISC-V (rv32/conv.c includes this file) the window is not copied when dil_w is 1: the walk
 * reads the image's rows in place, two channel groups a pass in asm (eight accumulators: 25
 * instructions per 8 MACs), the outputs by the step tables in C.
 *
 * Why the integers are the reference's: the products are exact (|w| <= 127, |col| <= 128) and
 * every partial sum lies within the generator's int32 bound (conv.h). On the host the walks are
 * the same in C (the tests, ASan/UBSan). The other CONV_2D functions are
 * the reference's, included below with the rows one renamed out of the way (*_reference, which
 * the tests compare against). */
#include <stddef.h>
#include <stdint.h>

#include "../../conv.h"
#include "../../../requant.h"

#if defined(__AVR__)
#error "the cortex-m0 kernels read weights through plain pointers; AVR boards use the reference (__flash)"
#endif

#define qe_conv_s8_rows qe_conv_s8_rows_reference
#include "../../conv.c"
#undef qe_conv_s8_rows

#include "requant_right.h"          /* requant_right_t, requant_right_output */

/* conv.h's rq entry: requant_right_t's ten words, then the saturation bounds */
typedef struct {
    requant_right_t rr;
    int32_t sat_low;
    int32_t sat_above;
} conv_rq_t;

typedef char conv_rq_is_rq_words[(sizeof(conv_rq_t) == 4u * QE_CONV_RQ_WORDS) ? 1 : -1];

/* What one pixel's channel groups need (field offsets are the asm's) */
typedef struct {
    const int32_t *col;         /* 0: the column */
    const int32_t *bias;        /* 4: the next group's bias' (advanced) */
    int32_t *acc;               /* 8: the next group's accumulators (advanced) */
    const int32_t *acc_end;     /* 12: past the last group's */
} pixel_t;

#if defined(__ARM_ARCH_6M__)
#define QE_ROWS_COPY 1      /* ARMv6-M: the window is copied (LDM/STM) into the column */
#else
#define QE_ROWS_COPY 0      /* the others walk the image's rows (dil_w 1) */
#endif

#if defined(__ARM_ARCH_6M__)

#define ONE_VALUE(X)                                                              \
    "ldm r1!, {r4, r5, r6, r7}\n\t"                                               \
    "muls r4, " X ", r4\n\t"                                                      \
    "add r8, r4\n\t"                                                              \
    "muls r5, " X ", r5\n\t"                                                      \
    "add r9, r5\n\t"                                                              \
    "muls r6, " X ", r6\n\t"                                                      \
    "add r10, r6\n\t"                                                             \
    "muls r7, " X ", r7\n\t"                                                      \
    "add r11, r7\n\t"

/* Every channel group of one pixel: acc[o] = bias'[o] + the column times channel o's weights
 * (the column from col to col_end, an even count; w the filter; the context in lr). Per group:
 * bias' by one LDM into r8-r11, per two column values 21 instructions (LDM of both, per value
 * one LDM of four weights, four MULS and ADDs, CMP/BNE), the sums out by one STM. */
static void pixel_macs(pixel_t *ctx, const int32_t *col_end, const int32_t *w)
{
    register pixel_t *c __asm("r0") = ctx;
    register const int32_t *wr __asm("r1") = w;
    register const int32_t *e __asm("r12") = col_end;
    __asm volatile(".syntax unified\n\t"
                   "mov lr, r0\n"
                   "0:\n\t"                                  /* a group */
                   "mov r3, lr\n\t"
                   "ldr r2, [r3, #4]\n\t"
                   "ldm r2!, {r4, r5, r6, r7}\n\t"
                   "str r2, [r3, #4]\n\t"
                   "mov r8, r4\n\t"
                   "mov r9, r5\n\t"
                   "mov r10, r6\n\t"
                   "mov r11, r7\n\t"
                   "ldr r0, [r3, #0]\n"
                   "1:\n\t"
                   "ldm r0!, {r2, r3}\n\t"
                   ONE_VALUE("r2")
                   ONE_VALUE("r3")
                   "cmp r0, r12\n\t"
                   "bne 1b\n\t"
                   "mov r4, r8\n\t"
                   "mov r5, r9\n\t"
                   "mov r6, r10\n\t"
                   "mov r7, r11\n\t"
                   "mov r3, lr\n\t"
                   "ldr r2, [r3, #8]\n\t"
                   "stm r2!, {r4, r5, r6, r7}\n\t"
                   "str r2, [r3, #8]\n\t"
                   "ldr r0, [r3, #12]\n\t"
                   "cmp r2, r0\n\t"
                   "bne 0b\n\t"
                   : "+l"(c), "+l"(wr)
                   : "r"(e)
                   : "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "lr", "cc",
                     "memory");
}
#undef ONE_VALUE

/* The outputs of acc[0..n) by conv.h's step tables (each channel's block: lo, span, mul, add,
 * then its table; block the bytes from one to the next): 18 instructions an output (15
 * saturated). */
static void steps_outputs(const int32_t *acc, const int32_t *acc_end, const uint32_t *q,
                          int8_t *out, uint32_t block, int32_t act_min, int32_t act_max)
{
    register const int32_t *a __asm("r0") = acc;
    register const uint32_t *qr __asm("r1") = q;
    register int8_t *o __asm("r2") = out;
    register int32_t amin __asm("r8") = act_min;
    register uint32_t step __asm("r9") = block - 16u;
    register const int32_t *end __asm("r10") = acc_end;
    register int32_t amax __asm("r11") = act_max;
    __asm volatile(".syntax unified\n"
                   "1:\n\t"
                   "ldm r0!, {r3}\n\t"                     /* a */
                   "ldm r1!, {r4, r5, r6, r7}\n\t"         /* lo, span, mul, add */
                   "subs r3, r3, r4\n\t"                   /* u = a - lo */
                   "cmp r3, r5\n\t"
                   "bhi 7f\n\t"
                   "muls r6, r3, r6\n\t"
                   "adds r6, r6, r7\n\t"
                   "lsrs r6, r6, #24\n\t"                  /* k: the index or one less */
                   "lsls r7, r6, #2\n\t"
                   "ldr r7, [r1, r7]\n\t"                  /* t[k] */
                   "cmp r3, r7\n\t"                        /* C: u >= t[k] */
                   "mov r4, r8\n\t"
                   "adcs r6, r6, r4\n\t"                   /* act_min + k + C */
                   "b 8f\n"
                   "7:\n\t"                                /* saturated */
                   "adds r3, r3, r4\n\t"
                   "mov r6, r11\n\t"
                   "cmp r3, r4\n\t"
                   "bge 8f\n\t"
                   "mov r6, r8\n"
                   "8:\n\t"
                   "strb r6, [r2]\n\t"
                   "adds r2, r2, #1\n\t"
                   "add r1, r9\n\t"
                   "cmp r0, r10\n\t"
                   "bne 1b\n\t"
                   : "+l"(a), "+l"(qr), "+l"(o)
                   : "r"(amin), "r"(step), "r"(end), "r"(amax)
                   : "r3", "r4", "r5", "r6", "r7", "cc", "memory");
}

/* n int32 words from src to dst (n >= 1), four per LDM/STM pair */
static int32_t *copy_words(int32_t *dst, const int32_t *src, uint32_t n)
{
    __asm volatile(".syntax unified\n\t"
                   "subs %[n], %[n], #4\n\t"
                   "bcc 2f\n"
                   "1:\n\t"
                   "ldm %[s]!, {r4, r5, r6, r7}\n\t"
                   "stm %[d]!, {r4, r5, r6, r7}\n\t"
                   "subs %[n], %[n], #4\n\t"
                   "bcs 1b\n"
                   "2:\n\t"
                   "adds %[n], %[n], #4\n\t"
                   "beq 4f\n"
                   "3:\n\t"
                   "ldm %[s]!, {r4}\n\t"
                   "stm %[d]!, {r4}\n\t"
                   "subs %[n], %[n], #1\n\t"
                   "bne 3b\n"
                   "4:\n\t"
                   : [d] "+l"(dst), [s] "+l"(src), [n] "+l"(n)
                   :
                   : "r4", "r5", "r6", "r7", "cc", "memory");
    return dst;
}

#else /* the host and rv32: the same walks in C (wrapping as MULS/ADD) */

/* The window in segments: nseg runs of run int32 (run >= 1), from src, stride apart (int32):
 * the image rows themselves (no copy) when dil_w is 1, else the gathered column. */
typedef struct {
    const int32_t *src;
    uint32_t stride;
    uint32_t nseg;
    uint32_t run;
} segments_t;

#if defined(__riscv) && __riscv_xlen == 32 && defined(__riscv_mul)   /* rv32 with M: MUL */
/* RISC-V: two channel groups a pass in asm (eight accumulators in registers), per window value
 * one LW of it and per channel LW, MUL, ADD (the weights at constant offsets from the two
 * groups' pointers): 25 instructions per 8 MACs, eight values a loop pass (+4), per segment the
 * remainder (run mod 8) first, by blocks of 4, 2 and 1 values. */
#define QE_RV_MAC(A, W, X, K) "lw t2, " #K "(" W ")\n\tmul t2, t2, " X "\n\tadd " A ", " A ", t2\n\t"
#define QE_RV_VALUE(X, XOFF, K)                                                   \
    "lw " X ", " #XOFF "(%[x])\n\t"                                                \
    QE_RV_MAC("%[a0]", "%[w0]", X, K) QE_RV_MAC("%[a1]", "%[w0]", X, K + 4)        \
    QE_RV_MAC("%[a2]", "%[w0]", X, K + 8) QE_RV_MAC("%[a3]", "%[w0]", X, K + 12)   \
    QE_RV_MAC("%[b0]", "%[w1]", X, K) QE_RV_MAC("%[b1]", "%[w1]", X, K + 4)        \
    QE_RV_MAC("%[b2]", "%[w1]", X, K + 8) QE_RV_MAC("%[b3]", "%[w1]", X, K + 12)

static inline __attribute__((always_inline)) void two_groups(
    const segments_t *sg, const int32_t *w0, const int32_t *w1, const int32_t *bias, int32_t *acc)
{
    int32_t a0 = bias[0], a1 = bias[1], a2 = bias[2], a3 = bias[3];
    int32_t b0 = bias[4], b1 = bias[5], b2 = bias[6], b3 = bias[7];
    const int32_t *x = sg->src;
    const uint32_t rem = 4u * (sg->run & 7u), run = 4u * sg->run;
    const uint32_t skip = 4u * sg->stride - run;            /* segment end to the next start */
    uint32_t nseg = sg->nseg;
    const int32_t *e;
    __asm volatile("0:\n\t"                                 /* a segment */
                   "add %[e], %[x], %[run]\n\t"
                   "andi t0, %[rem], 16\n\t"             /* the remainder: 4, 2, 1 */
                   "beqz t0, 5f\n\t"
                   QE_RV_VALUE("t0", 0, 0)
                   QE_RV_VALUE("t0", 4, 16)
                   QE_RV_VALUE("t0", 8, 32)
                   QE_RV_VALUE("t0", 12, 48)
                   "addi %[x], %[x], 16\n\t"
                   "addi %[w0], %[w0], 64\n\t"
                   "addi %[w1], %[w1], 64\n"
                   "5:\n\t"
                   "andi t0, %[rem], 8\n\t"
                   "beqz t0, 6f\n\t"
                   QE_RV_VALUE("t0", 0, 0)
                   QE_RV_VALUE("t0", 4, 16)
                   "addi %[x], %[x], 8\n\t"
                   "addi %[w0], %[w0], 32\n\t"
                   "addi %[w1], %[w1], 32\n"
                   "6:\n\t"
                   "andi t0, %[rem], 4\n\t"
                   "beqz t0, 2f\n\t"
                   QE_RV_VALUE("t0", 0, 0)
                   "addi %[x], %[x], 4\n\t"
                   "addi %[w0], %[w0], 16\n\t"
                   "addi %[w1], %[w1], 16\n"
                   "2:\n\t"
                   "beq %[x], %[e], 4f\n"
                   "3:\n\t"
                   QE_RV_VALUE("t0", 0, 0)
                   QE_RV_VALUE("t0", 4, 16)
                   QE_RV_VALUE("t0", 8, 32)
                   QE_RV_VALUE("t0", 12, 48)
                   QE_RV_VALUE("t0", 16, 64)
                   QE_RV_VALUE("t0", 20, 80)
                   QE_RV_VALUE("t0", 24, 96)
                   QE_RV_VALUE("t0", 28, 112)
                   "addi %[x], %[x], 32\n\t"
                   "addi %[w0], %[w0], 128\n\t"
                   "addi %[w1], %[w1], 128\n\t"
                   "bne %[x], %[e], 3b\n"
                   "4:\n\t"
                   "add %[x], %[x], %[skip]\n\t"
                   "addi %[n], %[n], -1\n\t"
                   "bnez %[n], 0b\n\t"
                   : [x] "+r"(x), [w0] "+r"(w0), [w1] "+r"(w1), [a0] "+r"(a0), [a1] "+r"(a1),
                     [a2] "+r"(a2), [a3] "+r"(a3), [b0] "+r"(b0), [b1] "+r"(b1), [b2] "+r"(b2),
                     [b3] "+r"(b3), [n] "+r"(nseg), [e] "=&r"(e)
                   : [rem] "r"(rem), [run] "r"(run), [skip] "r"(skip)
                   : "t0", "t2", "memory");
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
    acc[4] = b0;
    acc[5] = b1;
    acc[6] = b2;
    acc[7] = b3;
}
#define QE_RV_VALUE1(X, XOFF, K)                                                  \
    "lw " X ", " #XOFF "(%[x])\n\t"                                                \
    QE_RV_MAC("%[a0]", "%[w0]", X, K) QE_RV_MAC("%[a1]", "%[w0]", X, K + 4)        \
    QE_RV_MAC("%[a2]", "%[w0]", X, K + 8) QE_RV_MAC("%[a3]", "%[w0]", X, K + 12)

/* the last single group (out_c mod 8 is 1..4): the same walk, 13 instructions per 4 MACs */
static inline __attribute__((always_inline)) void one_group(
    const segments_t *sg, const int32_t *w0, const int32_t *bias, int32_t *acc)
{
    int32_t a0 = bias[0], a1 = bias[1], a2 = bias[2], a3 = bias[3];
    const int32_t *x = sg->src;
    const uint32_t rem = 4u * (sg->run & 7u), run = 4u * sg->run;
    const uint32_t skip = 4u * sg->stride - run;            /* segment end to the next start */
    uint32_t nseg = sg->nseg;
    const int32_t *e;
    __asm volatile("0:\n\t"                                 /* a segment */
                   "add %[e], %[x], %[run]\n\t"
                   "andi t0, %[rem], 16\n\t"             /* the remainder: 4, 2, 1 */
                   "beqz t0, 5f\n\t"
                   QE_RV_VALUE1("t0", 0, 0)
                   QE_RV_VALUE1("t0", 4, 16)
                   QE_RV_VALUE1("t0", 8, 32)
                   QE_RV_VALUE1("t0", 12, 48)
                   "addi %[x], %[x], 16\n\t"
                   "addi %[w0], %[w0], 64\n\t"
                   "5:\n\t"
                   "andi t0, %[rem], 8\n\t"
                   "beqz t0, 6f\n\t"
                   QE_RV_VALUE1("t0", 0, 0)
                   QE_RV_VALUE1("t0", 4, 16)
                   "addi %[x], %[x], 8\n\t"
                   "addi %[w0], %[w0], 32\n\t"
                   "6:\n\t"
                   "andi t0, %[rem], 4\n\t"
                   "beqz t0, 2f\n\t"
                   QE_RV_VALUE1("t0", 0, 0)
                   "addi %[x], %[x], 4\n\t"
                   "addi %[w0], %[w0], 16\n\t"
                   "2:\n\t"
                   "beq %[x], %[e], 4f\n"
                   "3:\n\t"
                   QE_RV_VALUE1("t0", 0, 0)
                   QE_RV_VALUE1("t0", 4, 16)
                   QE_RV_VALUE1("t0", 8, 32)
                   QE_RV_VALUE1("t0", 12, 48)
                   QE_RV_VALUE1("t0", 16, 64)
                   QE_RV_VALUE1("t0", 20, 80)
                   QE_RV_VALUE1("t0", 24, 96)
                   QE_RV_VALUE1("t0", 28, 112)
                   "addi %[x], %[x], 32\n\t"
                   "addi %[w0], %[w0], 128\n\t"
                   "bne %[x], %[e], 3b\n"
                   "4:\n\t"
                   "add %[x], %[x], %[skip]\n\t"
                   "addi %[n], %[n], -1\n\t"
                   "bnez %[n], 0b\n\t"
                   : [x] "+r"(x), [w0] "+r"(w0), [a0] "+r"(a0), [a1] "+r"(a1),
                     [a2] "+r"(a2), [a3] "+r"(a3), [n] "+r"(nseg), [e] "=&r"(e)
                   : [rem] "r"(rem), [run] "r"(run), [skip] "r"(skip)
                   : "t0", "t2", "memory");
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}
#undef QE_RV_VALUE1
#undef QE_RV_VALUE
#undef QE_RV_MAC
#else
/* the host: two groups as the RISC-V walk, in C */
static void two_groups(const segments_t *sg, const int32_t *w0, const int32_t *w1,
                       const int32_t *bias, int32_t *acc)
{
    uint32_t a[8], r, n, k;
    const int32_t *x;
    for (r = 0; r < 8u; ++r) {
        a[r] = (uint32_t)bias[r];
    }
    for (n = 0, x = sg->src; n < sg->nseg; ++n, x += sg->stride) {
        for (k = 0; k < sg->run; ++k, w0 += 4, w1 += 4) {
            for (r = 0; r < 4u; ++r) {
                a[r] += (uint32_t)w0[r] * (uint32_t)x[k];
                a[4u + r] += (uint32_t)w1[r] * (uint32_t)x[k];
            }
        }
    }
    for (r = 0; r < 8u; ++r) {
        acc[r] = (int32_t)a[r];
    }
}

static void one_group(const segments_t *sg, const int32_t *w, const int32_t *bias, int32_t *acc)
{
    uint32_t a0 = (uint32_t)bias[0], a1 = (uint32_t)bias[1], a2 = (uint32_t)bias[2],
             a3 = (uint32_t)bias[3], n, k;
    const int32_t *x;
    for (n = 0, x = sg->src; n < sg->nseg; ++n, x += sg->stride) {
        for (k = 0; k < sg->run; ++k, w += 4) {
            const uint32_t v = (uint32_t)x[k];
            a0 += (uint32_t)w[0] * v;
            a1 += (uint32_t)w[1] * v;
            a2 += (uint32_t)w[2] * v;
            a3 += (uint32_t)w[3] * v;
        }
    }
    acc[0] = (int32_t)a0;
    acc[1] = (int32_t)a1;
    acc[2] = (int32_t)a2;
    acc[3] = (int32_t)a3;
}
#endif

/* Every channel group of one pixel (the host and rv32): two groups a pass, then a last single
 * one; pd int32 of weights per channel (the depth's padding weight, if any, is skipped: the
 * segments cover the depth) */
static void pixel_segments(const segments_t *sg, uint32_t pd, const int32_t *w,
                           const int32_t *bias, int32_t *acc, const int32_t *acc_end)
{
    while (acc != acc_end) {
        if (acc_end - acc >= 8) {
            two_groups(sg, w, w + 4u * pd, bias, acc);
            acc += 8;
            bias += 8;
            w += 8u * pd;
        } else {
            one_group(sg, w, bias, acc);
            acc += 4;
            bias += 4;
            w += 4u * pd;
        }
    }
}

static void steps_outputs(const int32_t *acc, const int32_t *acc_end, const uint32_t *q,
                          int8_t *out, uint32_t block, int32_t act_min, int32_t act_max)
{
    /* the bytes as uint8_t: STRB/SB keeps the low byte, no sign extension */
    uint8_t *o = (uint8_t *)out;
    const uint32_t min1 = (uint32_t)act_min + 1u;
    for (; acc != acc_end; ++acc, ++o, q = (const uint32_t *)((const char *)q + block)) {
        const int32_t a = *acc;
        const uint32_t u = (uint32_t)a - q[0];
        if (u > q[1]) {
            *o = (uint8_t)(a < (int32_t)q[0] ? act_min : act_max);
        } else {
            const uint32_t k = (u * q[2] + q[3]) >> 24;
            *o = (uint8_t)(min1 + k - (uint32_t)(u < q[4u + k]));
        }
    }
}

static int32_t *copy_words(int32_t *dst, const int32_t *src, uint32_t n)
{
    do {
        *dst++ = *src++;
    } while (--n != 0u);
    return dst;
}

#endif /* __ARM_ARCH_6M__ */

void qe_conv_s8_rows(const qe_conv_s8_rows_params_t *p, const int8_t *input,
                     const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias, int8_t *output,
                     int32_t *scratch)
{
    const qe_window_t *g = &p->c.g;
    const uint32_t pd = p->padded_depth, in_c = g->in_c, out_c = g->out_c;
    const uint32_t out_cp = (out_c + 3u) & ~3u;
    const uint32_t wide_h = p->wide_h, wide_w = p->wide_w, k_h = g->k_h, k_w = g->k_w;
    const uint32_t depth = k_h * k_w * in_c;
    const uint32_t row_words = wide_w * in_c;                   /* one image row */
    const uint32_t run = (g->dil_w == 1u) ? k_w * in_c : in_c;  /* words per copy */
    const uint32_t runs = (g->dil_w == 1u) ? 1u : k_w;          /* copies per window row */
    const uint32_t run_step = (uint32_t)g->dil_w * in_c, ky_step = (uint32_t)g->dil_h * row_words;
    const uint32_t ox_step = (uint32_t)g->stride_w * in_c, oy_step = (uint32_t)g->stride_h * row_words;
    const int32_t zero_point = -p->c.input_offset;
    const int32_t act_min = p->c.activation_min, act_max = p->c.activation_max;
    const conv_rq_t *const rq = (const conv_rq_t *)p->rq;
    const uint32_t *const steps = (const uint32_t *)p->steps;
    const uint32_t block = 4u * (uint32_t)(act_max - act_min + 5);   /* a step table's bytes */
    int32_t *const img = scratch;
    int32_t *const col = scratch + wide_h * row_words;
    int32_t *const acc = col + pd;                  /* out_cp accumulators */
    uint32_t b, y, xw, c, d, oy, ox, ky, kx, r;

    (void)requant_right_init;                       /* the generator ran it (conv.h's rq) */
    for (d = depth; d < pd; ++d) {                  /* the padding of the depth: weights 0 */
        col[d] = 0;
    }
    for (b = 0; b < g->batches; ++b) {
        const int8_t *in_b = input + b * g->in_h * g->in_w * in_c;
        int8_t *out = output + b * g->out_h * g->out_w * out_c;
        int32_t *dst = img;
        for (y = 0; y < wide_h; ++y) {              /* the widened, padded image */
            const uint32_t iy = y - g->pad_top;     /* (wraps when above: then >= in_h) */
            for (xw = 0; xw < wide_w; ++xw) {
                const uint32_t ix = xw - g->pad_left;
                if (iy < g->in_h && ix < g->in_w) {
                    const int8_t *src = in_b + (iy * g->in_w + ix) * in_c;
                    for (c = 0; c < in_c; ++c) {
                        *dst++ = src[c];
                    }
                } else {
                    for (c = 0; c < in_c; ++c) {
                        *dst++ = zero_point;
                    }
                }
            }
        }
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t *win = img + oy * oy_step;
            for (ox = 0; ox < g->out_w; ++ox, win += ox_step, out += out_c) {
                if (QE_ROWS_COPY || g->dil_w != 1u) {       /* the window into the column */
                    const int32_t *src = win;
                    int32_t *x = col;
                    for (ky = 0; ky < k_h; ++ky, src += ky_step) {   /* in the filter's order */
                        const int32_t *s = src;
                        for (kx = 0; kx < runs; ++kx, s += run_step) {
                            x = copy_words(x, s, run);
                        }
                    }
                }
#if defined(__ARM_ARCH_6M__)
                {
                    pixel_t px;
                    px.col = col;
                    px.bias = (const int32_t *)bias;
                    px.acc = acc;
                    px.acc_end = acc + out_cp;
                    pixel_macs(&px, col + pd, (const int32_t *)filter);
                }
#else
                {
                    segments_t sg;                  /* the image's rows, or the column */
                    sg.src = (g->dil_w == 1u) ? win : col;
                    sg.stride = (g->dil_w == 1u) ? ky_step : pd;
                    sg.nseg = (g->dil_w == 1u) ? k_h : 1u;
                    sg.run = (g->dil_w == 1u) ? run : depth;
                    pixel_segments(&sg, pd, (const int32_t *)filter, (const int32_t *)bias, acc,
                                   acc + out_cp);
                }
#endif
                if (steps != NULL) {
                    steps_outputs(acc, acc + out_c, steps, out, block, act_min, act_max);
                } else if (rq != NULL) {
                    for (r = 0; r < out_c; ++r) {
                        const conv_rq_t *q = &rq[r];
                        const int32_t a = acc[r];
                        out[r] = (int8_t)(a <= q->sat_low ? act_min
                                          : a > q->sat_above ? act_max
                                          : requant_right_output(&q->rr, a));
                    }
                } else {
                    for (r = 0; r < out_c; ++r) {
                        out[r] = (int8_t)qe_requantize_output(acc[r], p->c.multipliers[r],
                                                              p->c.shifts[r], p->c.output_offset,
                                                              act_min, act_max);
                    }
                }
            }
        }
    }
}
