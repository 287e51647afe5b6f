/* QUANTIZE float32 -> int8, optimized variant "cortex-m0" (see ../README.md): the reference's
 * results (../../quantize.c) without soft float for normal values. Cores without an FPU
 * (ARMv6-M here) pay a library call for every float operation, and the reference's division,
 * its round half away from zero (truncate, convert back, subtract, compare twice, add) and its
 * range checks are seven to ten of them: ~800 instructions per value on the micro:bit.
 *
 * v = x / scale must be the very IEEE quotient the reference (and TFLM) rounds. For a normal x
 * and a normal positive scale (divide_bits) it is computed in integers: the significands'
 * quotient from one multiply by floor(2^48 / ms) (a long division once per call), corrected
 * by the exact remainder, rounded to nearest even; quotients below the normal range, zeros,
 * denormals, infinities and NaN divide in float as before (quantize_bits). Then the integer:
 *  - NaN -> -131072 + zero point, |v| >= 2^17 (incl. inf) -> +-131072 + zero point, as the
 *    reference's saturation (any such value clamps to int8 anyway);
 *  - otherwise |v| = m * 2^(e - 23) with the 24-bit significand m (|v| < 0.5 gives 0), and round
 *    half away from zero is floor(|v| + 1/2) = (m + 2^(22 - e)) >> (23 - e) for e in [-1, 16],
 *    with v's sign. The reference's t = trunc(v), frac = v - t (exact), frac >= 1/2 ? t + 1 : t
 *    (and the negative mirror) is that same integer.
 * tests/test_kernels_optimized_quantize.py compares both on the host (ASan/UBSan) and on QEMU
 * microbit over edge and random floats and scales (exact halves and their neighbours, random
 * bit patterns). The other QUANTIZE/DEQUANTIZE functions are the reference's, included below. */
#include <stdint.h>
#include <string.h>

#include "../../quantize.h"

#define qe_quantize_f32_s8 qe_quantize_f32_s8_reference
#define qe_quantize_f32_s8_inv qe_quantize_f32_s8_inv_reference
#include "../../quantize.c"
#undef qe_quantize_f32_s8
#undef qe_quantize_f32_s8_inv

/* The reference's integer for a float quotient v (given by its bits). */
static int32_t round_bits(uint32_t bits, int32_t zero_point)
{
    uint32_t mag, m;
    int32_t e, r;

    mag = bits & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) {                   /* NaN */
        return -131072 + zero_point;
    }
    if (mag >= 0x48000000u) {                  /* |v| >= 131072.0f, inf included */
        return ((bits >> 31) ? -131072 : 131072) + zero_point;
    }
    e = (int32_t)(mag >> 23) - 127;
    if (e < -1) {                              /* |v| < 0.5 (zeros and denormals too) */
        r = 0;
    } else {
        m = (mag & 0x007FFFFFu) | 0x00800000u;
        r = (int32_t)((m + (1u << (22 - e))) >> (23 - e));
    }
    return ((bits >> 31) ? -r : r) + zero_point;
}

static int32_t quantize_bits(const qe_affine_params_t *p, float x)
{
    const float v = x / p->scale;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return round_bits(bits, p->zero_point);
}

/* The IEEE quotient x / scale (round to nearest, ties to even) in integers, for normal x and a
 * normal positive scale whose quotient is not below the normal range (else the caller divides in
 * float): with significands a = mx (or 2 mx, so that a / ms lies in [1, 2)) and ms, the 24-bit
 * quotient Q = floor(a 2^23 / ms) comes from a * inv (inv = floor(2^48 / ms), once per call)
 * shifted right by 25, at most one too small, then fixed by the exact remainder
 * R = a 2^23 - Q ms (in [0, 2 ms): 32 bits suffice, modulo 2^32); the round bit and the sticky
 * bits are 2R against ms. Sets *out to round_bits' magnitude (before the sign and the zero
 * point) and returns the sign (+-1), or 0 (*out untouched) when the caller must divide. */
typedef struct {
    uint32_t ms;                /* the scale's significand, 2^23 <= ms < 2^24 */
    int32_t es;                 /* its unbiased exponent */
    uint32_t inv;               /* floor(2^48 / ms), in (2^24, 2^25] */
} scale_div_t;

static int scale_div_init(scale_div_t *d, float scale, uint32_t inv)
{
    uint32_t bits, num_hi, q = 0u, rem;
    int i;
    memcpy(&bits, &scale, sizeof bits);
    if ((bits >> 31) || ((bits >> 23) & 0xFFu) == 0u || ((bits >> 23) & 0xFFu) == 0xFFu) {
        return 0;
    }
    d->ms = (bits & 0x007FFFFFu) | 0x00800000u;
    d->es = (int32_t)((bits >> 23) & 0xFFu) - 127;
    if (inv != 0u) {                           /* the generator's floor(2^48 / ms) */
        d->inv = inv;
        return 1;
    }
    /* floor(2^48 / ms) by long division, one quotient bit at a time (25 bits: 2^48 / ms is in
     * (2^24, 2^25]): 2^48 = 2^23 * 2^25, starting from 2^23 < 2 ms; unrolled */
    num_hi = 1u << 23;
    rem = num_hi;
#define QE_M0_DIV_STEP                                                                    \
    rem <<= 1;                                                                            \
    q <<= 1;                                                                              \
    if (rem >= d->ms) {                                                                   \
        rem -= d->ms;                                                                     \
        q |= 1u;                                                                          \
    }
    for (i = 0; i < 5; ++i) {
        QE_M0_DIV_STEP QE_M0_DIV_STEP QE_M0_DIV_STEP QE_M0_DIV_STEP QE_M0_DIV_STEP
    }
#undef QE_M0_DIV_STEP
    d->inv = q;
    return 1;
}

static int divide_bits(const scale_div_t *d, float x, uint32_t *out)
{
    uint32_t bits, a, al, ah, il, ih, lo, t, q, r;
    int32_t e;
    memcpy(&bits, &x, sizeof bits);
    e = (int32_t)((bits >> 23) & 0xFFu);
    if (e == 0 || e == 0xFF) {                 /* zero, denormal, inf, NaN: in float */
        return 0;
    }
    a = (bits & 0x007FFFFFu) | 0x00800000u;
    e = e - 127 - d->es;                       /* the quotient's exponent */
    if (a < d->ms) {
        a <<= 1;                               /* a / ms in [1, 2) */
        e -= 1;
    }
    /* q = floor(a * inv / 2^25): a < 2^25, inv <= 2^25, in 16-bit halves */
    al = a & 0xFFFFu;
    ah = a >> 16;
    il = d->inv & 0xFFFFu;
    ih = d->inv >> 16;
    lo = al * il;
    t = (lo >> 16) + ah * il + al * ih;       /* < 2^27 */
    q = ah * ih * 128u + (t >> 9);
    r = (a << 23) - q * d->ms;                /* the exact remainder, modulo 2^32 */
    if (r >= d->ms) {
        q += 1u;
        r -= d->ms;
    }
    /* round to nearest, ties to even */
    if (2u * r > d->ms || (2u * r == d->ms && (q & 1u))) {
        q += 1u;
        if (q == (1u << 24)) {
            q = 1u << 23;
            e += 1;
        }
    }
    if (e < -126) {                            /* below the normal range: in float */
        return 0;
    }
    /* the quotient is +-q * 2^(e - 23), normal (or beyond the float range: inf): round_bits'
     * integer from q and e directly */
    if (e >= 17) {                             /* |v| >= 131072.0f, inf included */
        r = 131072u;
    } else if (e < -1) {                       /* |v| < 0.5 */
        r = 0u;
    } else {
        r = (q + (1u << (22 - e))) >> (23 - e);
    }
    *out = r;
    return (bits >> 31) ? -1 : 1;
}

/* inv: floor(2^48 / the scale's significand), computed by the generator (the long division
 * above is ~150 instructions a call), or 0: computed here. */
void qe_quantize_f32_s8_inv(const qe_affine_params_t *p, uint32_t inv, const float *input,
                            int8_t *output)
{
    uint32_t i;
    scale_div_t d = {0u, 0, 0u};
    const int fast = scale_div_init(&d, p->scale, inv);
    for (i = 0; i < p->size; ++i) {
        uint32_t mag;
        const int sign = fast ? divide_bits(&d, input[i], &mag) : 0;
        int32_t q = sign ? (sign > 0 ? (int32_t)mag : -(int32_t)mag) + p->zero_point
                         : quantize_bits(p, input[i]);
        if (q < -128) {
            q = -128;
        }
        if (q > 127) {
            q = 127;
        }
        output[i] = (int8_t)q;
    }
}

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    qe_quantize_f32_s8_inv(p, 0u, input, output);
}
