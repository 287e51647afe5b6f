/* What the cortex-m0 variant's files share (see ../README.md): the output stage for right
 * shifts without a long multiply, requant_right_t (fully_connected.c and fully_connected_s4.c).
 * Moved here from fully_connected.c unchanged. */
#ifndef QE_CORTEX_M0_REQUANT_RIGHT_H
#define QE_CORTEX_M0_REQUANT_RIGHT_H

#include <stdint.h>

/* The output stage for right shifts (shift = -e, e >= 1), without a long multiply (ARMv6-M has
 * none; the reference's int64 products cost a library call each). The same exact formula as the
 * cortex-m-dsp variant (its dsp.h, requant_right_t, says why it is TFLM's double rounding):
 *     scaled = floor((x * m + 2^30 + 2^(30+e) - (x < 0) * 2^31) / 2^(31+e)),
 * with the 64-bit sum built from four 16 x 16-bit products (x = xh * 2^16 + xl, m = mh * 2^16
 * + ml, xl and ml unsigned): every product and every partial high word fits 32 bits. The high
 * word shifted by e - 1 is the result. Then requant.h's output stage. */
typedef struct {
    uint32_t ml, mh;            /* the multiplier's low and high 16 bits (it is >= 0) */
    uint32_t round_lo[2];       /* 2^30 + 2^(30+e), and the same - 2^31 (for x < 0): low words */
    int32_t round_hi[2];        /* ... and high words */
    uint32_t hi_shift;          /* e - 1 */
    int32_t lo_bound;           /* act_min - offset, act_max - offset: requant.h's clamp in the */
    int32_t hi_bound;           /* offset-shifted domain (int16 zero points: no overflow) */
    int32_t offset;
} requant_right_t;

/* Inlined into every caller: with three callers in one file (the row pairs, the packed rows,
 * the byte lanes) gcc -O2 called it out of line instead, 16 instructions a FULLY_CONNECTED on
 * ARMv6-M (CartPole int8 on the micro:bit 13,592 -> 13,640 when the byte lanes came). */
static inline __attribute__((always_inline)) int requant_right_init(
    requant_right_t *r, int32_t multiplier, int32_t shift, int32_t offset, int32_t act_min,
    int32_t act_max)
{
    const int32_t e = (shift < 0) ? -shift : 1;      /* (shift >= 0: not used) */
    const uint64_t round = ((uint64_t)1 << 30) + ((uint64_t)1 << (30 + e));
    const uint64_t round_neg = round - ((uint64_t)1 << 31);   /* >= 2^30: no wrap */
    r->ml = (uint32_t)multiplier & 0xFFFFu;
    r->mh = (uint32_t)multiplier >> 16;
    r->round_lo[0] = (uint32_t)round;
    r->round_hi[0] = (int32_t)(round >> 32);
    r->round_lo[1] = (uint32_t)round_neg;
    r->round_hi[1] = (int32_t)(round_neg >> 32);
    r->hi_shift = (uint32_t)(e - 1);
    r->lo_bound = (int32_t)((uint32_t)act_min - (uint32_t)offset);
    r->hi_bound = (int32_t)((uint32_t)act_max - (uint32_t)offset);
    r->offset = offset;
    return shift <= -1 && multiplier >= 0;
}

#if defined(__ARM_ARCH_6M__)
/* requant_right_output in 26 + 10 instructions: the C below, scheduled by hand into the 7 low
 * registers MULS/ADCS need (gcc's own schedule took ~60). The struct's field offsets are the
 * asm's: ml 0, mh 4, round_lo 8/12, round_hi 16/20, hi_shift 24, lo_bound 28, hi_bound 32,
 * offset 36. */
static inline int32_t requant_right_output(const requant_right_t *r, int32_t x)
{
    uint32_t xl, xh, lo, hi, t;
    __asm(".syntax unified\n\t"
          "uxth %[xl], %[x]\n\t"                 /* x = xh * 2^16 + xl */
          "asrs %[xh], %[x], #16\n\t"
          "lsrs %[x], %[x], #31\n\t"             /* x: neg */
          "ldr %[t], [%[r], #0]\n\t"             /* ml */
          "movs %[lo], %[xl]\n\t"
          "muls %[lo], %[t], %[lo]\n\t"          /* lo = xl * ml */
          "muls %[t], %[xh], %[t]\n\t"           /* t = xh * ml (mid_h) */
          "ldr %[hi], [%[r], #4]\n\t"            /* mh */
          "muls %[xl], %[hi], %[xl]\n\t"         /* xl = xl * mh (mid_l) */
          "muls %[hi], %[xh], %[hi]\n\t"         /* hi = xh * mh */
          "lsls %[xh], %[t], #16\n\t"            /* hi:lo += mid_h * 2^16 */
          "asrs %[t], %[t], #16\n\t"
          "adds %[lo], %[lo], %[xh]\n\t"
          "adcs %[hi], %[hi], %[t]\n\t"
          "lsls %[xh], %[xl], #16\n\t"           /* hi:lo += mid_l * 2^16 */
          "lsrs %[xl], %[xl], #16\n\t"
          "adds %[lo], %[lo], %[xh]\n\t"
          "adcs %[hi], %[hi], %[xl]\n\t"
          "lsls %[x], %[x], #2\n\t"              /* hi:lo += round[neg] */
          "adds %[x], %[x], %[r]\n\t"
          "ldr %[t], [%[x], #8]\n\t"
          "ldr %[xl], [%[x], #16]\n\t"
          "adds %[lo], %[lo], %[t]\n\t"
          "adcs %[hi], %[hi], %[xl]\n\t"
          "ldr %[t], [%[r], #24]\n\t"            /* >> (e - 1) */
          "asrs %[hi], %[hi], %[t]\n\t"
          "ldr %[t], [%[r], #28]\n\t"            /* clamp to [lo_bound, hi_bound] */
          "cmp %[hi], %[t]\n\t"
          "bge 1f\n\t"
          "movs %[hi], %[t]\n"
          "1:\n\t"
          "ldr %[t], [%[r], #32]\n\t"
          "cmp %[hi], %[t]\n\t"
          "ble 2f\n\t"
          "movs %[hi], %[t]\n"
          "2:\n\t"
          "ldr %[t], [%[r], #36]\n\t"            /* + offset */
          "adds %[hi], %[hi], %[t]"
          : [x] "+&l"(x), [xl] "=&l"(xl), [xh] "=&l"(xh), [lo] "=&l"(lo), [hi] "=&l"(hi),
            [t] "=&l"(t)
          : [r] "l"(r)
          : "cc", "memory");
    (void)lo;
    return (int32_t)hi;
}
#else
static inline int32_t requant_right_output(const requant_right_t *r, int32_t x)
{
    const uint32_t xl = (uint32_t)x & 0xFFFFu;
    const int32_t xh = x >> 16;                          /* arithmetic: x = xh * 2^16 + xl */
    const int32_t mid_h = xh * (int32_t)r->ml;           /* |.| < 2^31 */
    const uint32_t mid_l = xl * r->mh;                   /* < 2^31 */
    const uint32_t neg = (uint32_t)x >> 31;
    uint32_t lo = xl * r->ml, s;                         /* < 2^32 */
    int32_t hi = xh * (int32_t)r->mh;
    /* hi:lo += mid_h * 2^16, mid_l * 2^16, round: each a 64-bit add, the carry by comparison */
    s = lo + ((uint32_t)mid_h << 16);
    hi += (mid_h >> 16) + (int32_t)(s < lo);
    lo = s;
    s = lo + (mid_l << 16);
    hi += (int32_t)(mid_l >> 16) + (int32_t)(s < lo);
    lo = s;
    s = lo + r->round_lo[neg];
    hi += r->round_hi[neg] + (int32_t)(s < lo);
    hi >>= r->hi_shift;                                 /* the requantized value; then requant.h's */
    if (hi < r->lo_bound) {                             /* clamp, in the offset-shifted domain */
        hi = r->lo_bound;
    }
    if (hi > r->hi_bound) {
        hi = r->hi_bound;
    }
    return hi + r->offset;
}

#endif

#endif
