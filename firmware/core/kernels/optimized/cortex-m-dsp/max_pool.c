/* MAX_POOL_2D, optimized variant "cortex-m-dsp" (see ../README.md): qe_max_pool_s8 with exactly
 * the reference's results (../../max_pool.c), four channels at a time. The float32 kernel and
 * qe_pool_window (shared with average_pool.c) are the reference's, compiled in here from its
 * source; the reference int8 kernel comes along renamed qe_max_pool_s8_reference (the tests
 * compare both in one binary; --gc-sections drops it).
 *
 * The per-byte signed maximum of two words in two instructions: SSUB8 sets the four GE flags
 * where a[i] - b[i] >= 0 (signed bytes: the difference is computed exactly, in 9 bits), SEL
 * takes a's byte where the flag is set, else b's: max(a[i], b[i]) in every byte, and with the
 * operands swapped the minimum. Per output pixel and four channels: the running maximum starts at
 * -128 in every byte (the reference's initial value), one 32-bit load + SSUB8 + SEL per window
 * tap inside the image (the same taps as the reference: the window clipped by qe_pool_window),
 * then the clamp to [activation_min, activation_max] as a maximum and a minimum with those
 * bounds in all four bytes (skipped for the full int8 range, where it is the identity), and one
 * 32-bit store. The order of a maximum's operands does not change it, so this is the reference's
 * value exactly (max(-128, v...) = max(v...): the reference's initial -128 is the identity). A
 * 2x2 VALID window (the common pool) is four loads and three maxima, found without
 * qe_pool_window. The last in_c % 4 channels: the reference's loop, one channel at a time. Without
 * the DSP extension the same structure with the bytes in C (the host tests). */
#include <stdint.h>
#include <string.h>

#include "../../pooling.h"   /* the real prototypes, checked against the definitions below */
#include "dsp.h"

#define qe_max_pool_s8 qe_max_pool_s8_reference
#include "../../max_pool.c"
#undef qe_max_pool_s8

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
static inline uint32_t max_s8x4(uint32_t a, uint32_t b)
{
    uint32_t r;
    __asm("ssub8 %0, %1, %2\n\tsel %0, %1, %2" : "=&r"(r) : "r"(a), "r"(b) : "cc");
    return r;
}
#else
static inline uint32_t max_s8x4(uint32_t a, uint32_t b)
{
    uint32_t r = 0, k;
    for (k = 0; k < 32u; k += 8u) {
        const int8_t x = (int8_t)(a >> k), y = (int8_t)(b >> k);
        r |= (uint32_t)(uint8_t)(x >= y ? x : y) << k;
    }
    return r;
}
#endif

/* min(a, b) per byte: the same SSUB8 (GE where a >= b), SEL taking b's byte there, else a's */
static inline uint32_t min_s8x4(uint32_t a, uint32_t b)
{
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    uint32_t r;
    __asm("ssub8 %0, %1, %2\n\tsel %0, %2, %1" : "=&r"(r) : "r"(a), "r"(b) : "cc");
    return r;
#else
    uint32_t r = 0, k;
    for (k = 0; k < 32u; k += 8u) {
        const int8_t x = (int8_t)(a >> k), y = (int8_t)(b >> k);
        r |= (uint32_t)(uint8_t)(x >= y ? y : x) << k;
    }
    return r;
#endif
}

void qe_max_pool_s8(const qe_pool_s8_params_t *p, const int8_t *input, int8_t *output)
{
    /* copies: the int8 stores below may alias *p, so the compiler would reload fields of it */
    const qe_window_t geo = p->g, *const g = &geo;
    const int32_t act_min = p->activation_min, act_max = p->activation_max;
    const uint32_t in_c = g->in_c, c4 = in_c & ~3u, row_step = (uint32_t)g->in_w * in_c;
    const uint32_t lo4 = ((uint32_t)act_min & 0xFFu) * 0x01010101u;
    const uint32_t hi4 = ((uint32_t)act_max & 0xFFu) * 0x01010101u;
    const int clamp = act_min > -128 || act_max < 127;
    qe_pool_window_t w;
    uint32_t b, oy, ox, c;
    int32_t fy, fx;

    /* the common 2x2 window, VALID (every window whole): four loads and three maxima per four
     * channels, the window found by arithmetic (no qe_pool_window) */
    if (g->k_h == 2u && g->k_w == 2u && g->pad_top == 0u && g->pad_left == 0u
        && (uint32_t)(g->out_h - 1) * g->stride_h + 2u <= g->in_h
        && (uint32_t)(g->out_w - 1) * g->stride_w + 2u <= g->in_w && g->out_h > 0u
        && g->out_w > 0u) {
        const uint32_t x_step = (uint32_t)g->stride_w * in_c;
        int8_t *out = output;
        for (b = 0; b < g->batches; ++b) {
            const int8_t *image = input + (uint32_t)b * g->in_h * row_step;
            for (oy = 0; oy < g->out_h; ++oy) {
                const int8_t *x = image + oy * g->stride_h * row_step;
                for (ox = 0; ox < g->out_w; ++ox, x += x_step, out += in_c) {
                    for (c = 0; c < c4; c += 4u) {
                        uint32_t v00, v01, v10, v11, m;
                        memcpy(&v00, x + c, 4);
                        memcpy(&v01, x + in_c + c, 4);
                        memcpy(&v10, x + row_step + c, 4);
                        memcpy(&v11, x + row_step + in_c + c, 4);
                        m = max_s8x4(max_s8x4(v00, v01), max_s8x4(v10, v11));
                        if (clamp) {
                            m = min_s8x4(max_s8x4(m, lo4), hi4);
                        }
                        memcpy(out + c, &m, 4);
                    }
                    for (; c < in_c; ++c) {
                        int32_t mx = x[c];
                        mx = (x[in_c + c] > mx) ? x[in_c + c] : mx;
                        mx = (x[row_step + c] > mx) ? x[row_step + c] : mx;
                        mx = (x[row_step + in_c + c] > mx) ? x[row_step + in_c + c] : mx;
                        mx = (mx < act_min) ? act_min : mx;
                        mx = (mx > act_max) ? act_max : mx;
                        out[c] = (int8_t)mx;
                    }
                }
            }
        }
        return;
    }
    for (b = 0; b < g->batches; ++b) {
        const int8_t *image = input + (uint32_t)b * g->in_h * row_step;
        for (oy = 0; oy < g->out_h; ++oy) {
            for (ox = 0; ox < g->out_w; ++ox) {
                int8_t *out = output + ((b * g->out_h + oy) * g->out_w + ox) * in_c;
                const int8_t *first;
                qe_pool_window(g, (int32_t)oy, (int32_t)ox, &w);
                /* (an empty window, wholly in the padding, which the generator never makes,
                 * reads nothing: -128 clamped, as the reference) */
                first = (w.y_start >= w.y_end || w.x_start >= w.x_end)
                            ? image
                            : image + (uint32_t)(w.iy0 + w.y_start) * row_step
                                  + (uint32_t)(w.ix0 + w.x_start) * in_c;
                for (c = 0; c < c4; c += 4u) {
                    uint32_t m = 0x80808080u;
                    const int8_t *row = first + c;
                    for (fy = w.y_start; fy < w.y_end; ++fy, row += row_step) {
                        const int8_t *x = row;
                        for (fx = w.x_start; fx < w.x_end; ++fx, x += in_c) {
                            uint32_t v;
                            memcpy(&v, x, 4);
                            m = max_s8x4(v, m);
                        }
                    }
                    if (clamp) {
                        m = min_s8x4(max_s8x4(m, lo4), hi4);
                    }
                    memcpy(out + c, &m, 4);
                }
                for (; c < in_c; ++c) {
                    int32_t mx = -128;
                    const int8_t *row = first + c;
                    for (fy = w.y_start; fy < w.y_end; ++fy, row += row_step) {
                        const int8_t *x = row;
                        for (fx = w.x_start; fx < w.x_end; ++fx, x += in_c) {
                            if (*x > mx) {
                                mx = *x;
                            }
                        }
                    }
                    if (mx < act_min) {
                        mx = act_min;
                    }
                    if (mx > act_max) {
                        mx = act_max;
                    }
                    out[c] = (int8_t)mx;
                }
            }
        }
    }
}
