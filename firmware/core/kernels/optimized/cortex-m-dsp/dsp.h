/* The arithmetic the cortex-m-dsp kernels share (fully_connected.c, conv.c, depthwise_conv.c):
 * int8 dot products with SXTAB16/SXTB16 + SMLAD (or the same loops in portable C without the DSP
 * extension), the per-lane sign extensions, and the inlined requantization requant_s8 with its
 * constants prepared once per tensor or channel. Why each is exactly the reference's arithmetic:
 * fully_connected.c's header comment and the comments below. Static inline: each kernel file
 * compiles its own copy, and --gc-sections drops what a firmware does not call. */
#ifndef QE_CORTEX_M_DSP_H
#define QE_CORTEX_M_DSP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../../requant.h"       /* qe_offset_clamp: the shared output stage */

#if defined(__AVR__)
#error "the cortex-m-dsp kernels read weights through plain pointers; AVR boards use the reference (__flash)"
#endif

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>

/* Four int8 from any address (LDR: ARMv7E-M and ARMv8-M Mainline allow unaligned words). */
static inline uint32_t load_s8x4(const int8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Bytes 1 and 3 of b, sign-extended to 16-bit lanes, + a: SXTAB16 with its operand rotated by
 * 8 (gcc 12's arm_acle.h has no __ror, and a separate ROR would cost one more instruction). */
static inline int16x2_t sxtab16_ror8(int16x2_t a, uint32_t b)
{
    int16x2_t r;
    __asm("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

static inline int16x2_t sxtb16_ror8(uint32_t b)
{
    int16x2_t r;
    __asm("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(b));
    return r;
}

/* acc[r] += sum_{d<n} w_r[d] * (x[d] + io) for the rows w0 and w1. */
static inline void dot_2rows(const int8_t *x, const int8_t *w0, const int8_t *w1, uint32_t n,
                             int32_t io, int32_t acc[2])
{
    const int16x2_t io2 = (int16x2_t)(((uint32_t)io & 0xFFFFu) * 0x00010001u);
    const int8_t *const x_end = x + (n & ~3u);
    int32_t a0 = acc[0], a1 = acc[1];
    uint32_t xv, wv;
    int16x2_t x02, x13;

    while (x != x_end) {
        xv = load_s8x4(x);
        x02 = __sxtab16(io2, xv);            /* x[0] + io, x[2] + io */
        x13 = sxtab16_ror8(io2, xv);         /* x[1] + io, x[3] + io */
        wv = load_s8x4(w0);
        a0 = __smlad(__sxtb16(wv), x02, a0);
        a0 = __smlad(sxtb16_ror8(wv), x13, a0);
        wv = load_s8x4(w1);
        a1 = __smlad(__sxtb16(wv), x02, a1);
        a1 = __smlad(sxtb16_ror8(wv), x13, a1);
        x += 4;
        w0 += 4;
        w1 += 4;
    }
    for (n &= 3u; n > 0; --n) {
        const int32_t xi = (int32_t)*x++ + io;
        a0 += (int32_t)*w0++ * xi;
        a1 += (int32_t)*w1++ * xi;
    }
    acc[0] = a0;
    acc[1] = a1;
}

static inline int32_t dot_1row(const int8_t *x, const int8_t *w, uint32_t n, int32_t io)
{
    const int16x2_t io2 = (int16x2_t)(((uint32_t)io & 0xFFFFu) * 0x00010001u);
    const int8_t *const x_end = x + (n & ~3u);
    int32_t a = 0;
    uint32_t xv, wv;

    while (x != x_end) {
        xv = load_s8x4(x);
        wv = load_s8x4(w);
        a = __smlad(__sxtb16(wv), __sxtab16(io2, xv), a);
        a = __smlad(sxtb16_ror8(wv), sxtab16_ror8(io2, xv), a);
        x += 4;
        w += 4;
    }
    for (n &= 3u; n > 0; --n) {
        a += (int32_t)*w++ * ((int32_t)*x++ + io);
    }
    return a;
}

#else /* portable C: the same structure, one value at a time */

static inline void dot_2rows(const int8_t *x, const int8_t *w0, const int8_t *w1, uint32_t n,
                             int32_t io, int32_t acc[2])
{
    int32_t a0 = acc[0], a1 = acc[1];
    uint32_t d;

    for (d = 0; d < n; ++d) {
        const int32_t xi = (int32_t)x[d] + io;
        a0 += (int32_t)w0[d] * xi;
        a1 += (int32_t)w1[d] * xi;
    }
    acc[0] = a0;
    acc[1] = a1;
}

static inline int32_t dot_1row(const int8_t *x, const int8_t *w, uint32_t n, int32_t io)
{
    int32_t a = 0;
    uint32_t d;

    for (d = 0; d < n; ++d) {
        a += (int32_t)w[d] * ((int32_t)x[d] + io);
    }
    return a;
}

#endif /* __ARM_FEATURE_DSP */

/* sum_d (x[d] + io): times the weights' offset, the part of every row's sum that the offset adds. */
static inline int32_t sum_inputs(const int8_t *x, uint32_t n, int32_t io)
{
    int32_t s = 0;
    uint32_t d;

    for (d = 0; d < n; ++d) {
        s += (int32_t)x[d] + io;
    }
    return s;
}

/* qe_multiply_by_quantized_multiplier (requant.h) inlined as requant_scale, with its per-tensor
 * (or per-channel) constants prepared once:
 *  - SaturatingRoundingDoublingHighMul(a, m) is (a*m + nudge) / 2^31 truncated toward zero, with
 *    nudge 2^30 for a*m >= 0 and 1 - 2^30 below: for either sign that equals
 *    floor((a*m + 2^30) / 2^31), an arithmetic shift (for a*m < 0 truncation is
 *    floor((a*m + 1 - 2^30 + 2^31 - 1) / 2^31)). Its saturating case a == m == INT32_MIN cannot
 *    occur: multipliers are >= 0. |a*m| < 2^62, and the result fits int32.
 *  - RoundingDivideByPOT as in requant.c, with its mask and half-mask precomputed.
 * requant_s8 then adds the output offset and clamps through requant.h's shared output stage,
 * qe_offset_clamp, as every int8 kernel does. */
typedef struct {
    int32_t multiplier;
    int32_t left_shift;
    int32_t right_shift;
    int32_t mask;
    int32_t half;
    int32_t output_offset;
    int32_t act_min;
    int32_t act_max;
} requant_t;

static inline void requant_init(requant_t *r, int32_t multiplier, int32_t shift,
                                int32_t output_offset, int32_t act_min, int32_t act_max)
{
    r->multiplier = multiplier;
    r->left_shift = (shift > 0) ? shift : 0;
    r->right_shift = (shift > 0) ? 0 : -shift;
    r->mask = (int32_t)(((int64_t)1 << r->right_shift) - 1);
    r->half = r->mask >> 1;
    r->output_offset = output_offset;
    r->act_min = act_min;
    r->act_max = act_max;
}

static inline int32_t requant_scale(const requant_t *r, int32_t x)
{
    /* x * 2^left_shift in int32, wrapping as TFLM's does (requant.c) */
    const int64_t ab = (int64_t)(int32_t)((uint32_t)x << r->left_shift) * r->multiplier;
    const int32_t high = (int32_t)((ab + ((int64_t)1 << 30)) >> 31);
    const int32_t remainder = high & r->mask;
    const int32_t threshold = r->half + (int32_t)((uint32_t)high >> 31);
    return (high >> r->right_shift) + ((remainder > threshold) ? 1 : 0);
}

/* requant_scale, then the shared output stage (requant.h): + offset and clamp, overflow-free */
static inline int8_t requant_s8(const requant_t *r, int32_t acc)
{
    return (int8_t)qe_offset_clamp(requant_scale(r, acc), r->output_offset, r->act_min,
                                   r->act_max);
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* requant_scale for right shifts only (shift = -e, e >= 1: no left shift), in one 64-bit
 * multiply-add and one shift, 7 instructions instead of ~14. Exactly the reference's two
 * roundings: with P = x * m and high = floor((P + 2^30) / 2^31) (the doubling high multiply, as
 * in requant_scale above), RoundingDivideByPOT(high, e) = floor((high + 2^(e-1) - neg) / 2^e),
 * neg = (high < 0) (round half away from zero), and floor(floor(a / 2^31) / 2^e) =
 * floor(a / 2^(31+e)), so
 *     result = floor((P + 2^30 + 2^(30+e) - neg * 2^31) / 2^(31+e)),
 * exact in 64 bits (|P| < 2^62). neg may be taken as (x < 0): x < 0 with high >= 0 means
 * 0 <= P + 2^30 < 2^31 (m <= 2^31 - 1), i.e. high == 0, and then both neg = 0 and neg = 1 give
 * 0 (for e >= 1 the sum stays within [0, 2^(31+e))). The shift by 31 + e >= 32 is the high word
 * shifted by e - 1. tests/test_kernels_optimized.py checks it on QEMU against the reference. */
typedef struct {
    int32_t multiplier;
    uint32_t round_lo;          /* the low and high words of 2^30 + 2^(30+e) */
    int32_t round_hi;
    uint32_t hi_shift;          /* e - 1 */
    int32_t output_offset;
    int32_t act_min;
    int32_t act_max;
} requant_right_t;

/* 1 when the output stage can take this path (shift <= -1) */
static inline int requant_right_init(requant_right_t *r, int32_t multiplier, int32_t shift,
                                     int32_t output_offset, int32_t act_min, int32_t act_max)
{
    const int32_t e = (shift < 0) ? -shift : 1;      /* (shift >= 0: not used) */
    const uint64_t round = ((uint64_t)1 << 30) + ((uint64_t)1 << (30 + e));
    r->multiplier = multiplier;
    r->round_lo = (uint32_t)round;
    r->round_hi = (int32_t)(round >> 32);
    r->hi_shift = (uint32_t)(e - 1);
    r->output_offset = output_offset;
    r->act_min = act_min;
    r->act_max = act_max;
    return shift <= -1;
}

static inline int32_t requant_right_scale(const requant_right_t *r, int32_t x)
{
    uint32_t lo = r->round_lo, sign;
    int32_t hi = r->round_hi;
    __asm("smlal %[lo], %[hi], %[x], %[m]\n\t"       /* hi:lo = round + x * m */
          "and %[s], %[x], #0x80000000\n\t"          /* - 2^31 when x < 0: + (-1):0x80000000 */
          "adds %[lo], %[lo], %[s]\n\t"
          "adc %[hi], %[hi], %[x], asr #31"
          : [lo] "+&r"(lo), [hi] "+&r"(hi), [s] "=&r"(sign)
          : [x] "r"(x), [m] "r"(r->multiplier)
          : "cc");
    return hi >> r->hi_shift;
}

/* requant_right_scale + offset, clamped: the exact clamp(scaled + offset, act_min, act_max), as
 * requant.h's output stage: QADD saturates the sum to int32 (a saturated sum lies outside int8
 * as the exact one does), SSAT takes it to int8, then the fused activation's bounds (which lie
 * within int8). With full_range (act_min -128, act_max 127) the SSAT is the whole clamp. */
static inline int8_t requant_right_s8(const requant_right_t *r, int32_t acc, int full_range)
{
    int32_t v = __ssat(__qadd(requant_right_scale(r, acc), r->output_offset), 8);
    if (!full_range) {
        if (v < r->act_min) {
            v = r->act_min;
        }
        if (v > r->act_max) {
            v = r->act_max;
        }
    }
    return (int8_t)v;
}

/* The whole int8 output stage in four instructions (QADD, SMMLAR, ASR, SSAT; five with the sign
 * fix) + the store, for the common case: right shift e in [1, 21], a normalized multiplier m in
 * [2^30, 2^31), the full int8 range as the activation's bounds (act_min -128, act_max 127: no
 * activation, or RELU with output zero point -128). Exactly requant_right_s8 there, hence the
 * reference's two roundings, offset and clamp:
 *  - requant_right_scale's value + offset is, multiplying numerator and denominator by 2,
 *        floor((2P + 2^31 + 2^32 (2^(e-1) + offset 2^e - neg)) / 2^(32+e)),   P = x m,
 *    and floor(floor(a / 2^32) / 2^e) = floor(a / 2^(32+e)); SMMLAR(2x, m, ra) is
 *    floor((2x m + 2^31 + ra 2^32) / 2^32), so with ra = round - neg (round = 2^(e-1) +
 *    offset 2^e) the ASR by e of it is that value, and SSAT #8 is the clamp. The SMMLAR value
 *    fits int32: |2 x m / 2^32| < 2^30 and |ra| <= 129 * 2^21 < 2^28.
 *  - 2x is QADD(x, x): exact for |x| < 2^30. For x >= 2^30 it is 2^31 - 1, and the output is
 *    127 both ways: the stage is monotone in x, and at x = 2^30 - 1 already saturated (the
 *    doubling high multiply is >= 2^29, >> e >= 2^8 for e <= 21, + offset > 127); likewise
 *    x <= -2^30 gives 2x = -2^31 and -128 both ways (at x = -2^30 the value is -2^(29-e) <= -256,
 *    + offset < -128).
 *  - neg = (x < 0) (requant_right_t's argument). With output zero point -128 it may be dropped
 *    (mode REQUANT_MM_NOFIX): for x < 0 the exact value is <= 0 (m >= 0), and without neg the
 *    numerator 2P + 2^31 + 2^(31+e) is < 2^(32+e) for P <= 0, so the value is <= 0 too: both are
 *    -128 after + offset -128 and the clamp.
 * The packed FC kernel keeps m, round and e in registers for a group of four outputs;
 * tests/test_kernels_optimized.py checks it on QEMU against the reference (packed edge cases at
 * every shift, offsets -128 / 127 / others, the largest accumulators). */
typedef struct {
    int32_t multiplier;
    int32_t round;              /* 2^(e-1) + offset * 2^e */
    uint32_t shift;             /* e */
} requant_mm_t;

#define REQUANT_MM_NONE 0       /* not applicable: requant_right_s8 or requant_s8 */
#define REQUANT_MM_FIX 1        /* with the sign fix */
#define REQUANT_MM_NOFIX 2      /* output zero point -128: no sign fix */

static inline int requant_mm_init(requant_mm_t *r, int32_t multiplier, int32_t shift,
                                  int32_t output_offset, int32_t act_min, int32_t act_max)
{
    int32_t e;
    if (shift > -1 || shift < -21 || multiplier < ((int32_t)1 << 30) || act_min != -128
        || act_max != 127 || output_offset < -128 || output_offset > 127) {
        return REQUANT_MM_NONE;
    }
    e = -shift;
    r->multiplier = multiplier;
    r->round = ((int32_t)1 << (e - 1)) + output_offset * ((int32_t)1 << e);
    r->shift = (uint32_t)e;
    return (output_offset == -128) ? REQUANT_MM_NOFIX : REQUANT_MM_FIX;
}

/* The stage as instructions, for asm blocks that keep m, round and e in r4, r5, r6 (an LDM of
 * requant_mm_t's fields) and store through r11 (post-incremented): accumulator A (a register
 * name) is consumed; r8 is scratch (the sign fix's ra). _FIX: 6 instructions per output
 * (ADD of the sign, QADD, SMMLAR, ASR, SSAT, STRB), _NOFIX: 5. The only definition of this
 * output stage (fully_connected.c's packed kernel uses it). */
#define REQUANT_MM_FIX_ASM(A)                                                                     \
    "add.w r8, r5, " A ", asr #31\n\t" "qadd " A ", " A ", " A "\n\t"                       \
    "smmlar " A ", " A ", r4, r8\n\t" "asr " A ", " A ", r6\n\t" "ssat " A ", #8, " A "\n\t"  \
    "strb " A ", [r11], #1\n\t"
#define REQUANT_MM_NOFIX_ASM(A)                                                                   \
    "qadd " A ", " A ", " A "\n\t"                                                        \
    "smmlar " A ", " A ", r4, r5\n\t" "asr " A ", " A ", r6\n\t" "ssat " A ", #8, " A "\n\t"  \
    "strb " A ", [r11], #1\n\t"

/* requant_mm_t's stage (the instructions of REQUANT_MM_*_ASM) for one accumulator in C, for
 * kernels that keep per-channel constants: QADD, SMMLAR, ASR, SSAT (+ the sign fix's ADD when
 * fix), exactly requant_right_s8 under requant_mm_init's preconditions (the proof above). */
static inline int8_t requant_mm_s8(const requant_mm_t *r, int32_t x, int fix)
{
    const int32_t ra = fix ? r->round + (x >> 31) : r->round;
    int32_t v = __qadd(x, x);
    __asm("smmlar %0, %1, %2, %3" : "=r"(v) : "r"(v), "r"(r->multiplier), "r"(ra));
    return (int8_t)__ssat(v >> r->shift, 8);
}
#endif /* __ARM_FEATURE_DSP */

/* The filter taps of one window that lie inside the image, along one axis: [*lo, *hi) of the
 * k taps at p0 + d * k (the reference skips the others: the padding). */
static inline void inside_taps(int32_t p0, uint32_t d, uint32_t k, uint32_t size, uint32_t *lo,
                               uint32_t *hi)
{
    uint32_t a = 0, b = k;
    while (a < b && p0 + (int32_t)(d * a) < 0) {
        ++a;
    }
    while (b > a && p0 + (int32_t)(d * (b - 1u)) >= (int32_t)size) {
        --b;
    }
    *lo = a;
    *hi = b;
}

#endif /* QE_CORTEX_M_DSP_H */
