/* DEQUANTIZE int8 -> float32, optimized variant "cortex-m0" (see ../README.md): the reference's
 * results (../../dequantize.c: the float product scale * (q - zero_point), rounded once, which
 * is TF Lite Micro's) without soft float. On cores without an FPU every output paid an int-to-
 * float conversion and a float multiply in the library: ~175 instructions on the micro:bit.
 *
 * For a normal positive scale = ms * 2^(E - 150) (ms its 24-bit significand, E its biased
 * exponent, 1 <= E <= 245) the product with n = q - zero_point (0 < |n| <= 255) is computed in
 * integers: p = |n| * ms is exact (< 2^32); with s = bitlen(p) - 24 (0..8), r = p >> s rounded
 * to nearest, ties to even, the float is (E + s - 1) * 2^23 + r with n's sign (r = 2^24 after
 * rounding up carries into the exponent by itself), always normal: E + s + 1 <= 254. n = 0
 * gives +0.0f, as the product does. Other scales (zero, denormal, huge, negative, NaN) take the
 * reference's float product. tests/test_kernels_optimized_quantize.py compares every int8 input
 * with the float product on the host (ASan/UBSan) and on QEMU microbit, over scales at the
 * ends of the fast path and random ones. The int16 DEQUANTIZE is the reference's. */
#include <stdint.h>

#include "../../quantize.h"

#define qe_dequantize_s8_f32 qe_dequantize_s8_f32_reference
#include "../../dequantize.c"
#undef qe_dequantize_s8_f32

static uint32_t product_bits(uint32_t e, uint32_t ms, int32_t n)
{
    uint32_t a, p, t, s, r, sign;
    if (n == 0) {
        return 0u;
    }
    sign = (n < 0) ? 0x80000000u : 0u;
    a = (uint32_t)((n < 0) ? -n : n);
    p = a * ms;                                  /* exact: a < 2^8, ms < 2^24 */
    t = p >> 24;
    s = 0u;
    if (t >= 16u) {
        t >>= 4;
        s = 4u;
    }
    if (t >= 4u) {
        t >>= 2;
        s += 2u;
    }
    if (t >= 2u) {
        t >>= 1;
        s += 1u;
    }
    s += t;                                      /* bitlen(p) - 24 */
    r = p >> s;
    if (s != 0u) {
        const uint32_t half = 1u << (s - 1u), rem = p & ((half << 1) - 1u);
        r += (rem > half || (rem == half && (r & 1u))) ? 1u : 0u;
    }
    return sign | (((e + s - 1u) << 23) + r);
}

/* the float's bits through a union (C99 TC3): memcpy is a library call with -fno-builtin */
typedef union {
    uint32_t u;
    float f;
} float_bits_t;

void qe_dequantize_s8_f32(const qe_affine_params_t *p, const int8_t *input, float *output)
{
    float_bits_t v;
    uint32_t e, ms, i;
    const uint32_t n = p->size;
    const int32_t zp = p->zero_point;
    v.f = p->scale;
    e = v.u >> 23;                               /* sign bit included: negative scales fail */
    if (e == 0u || e > 245u) {
        qe_dequantize_s8_f32_reference(p, input, output);
        return;
    }
    ms = (v.u & 0x007FFFFFu) | 0x00800000u;
    for (i = 0; i < n; ++i) {
        v.u = product_bits(e, ms, (int32_t)input[i] - zp);
        output[i] = v.f;
    }
}
