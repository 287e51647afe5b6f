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
 *  - the output stage per channel from the generator's table (conv.h's rq): the saturation
 *    bounds first (a ReLU's negative half costs a compare), else requant_right_output (TFLM's
 *    double rounding without a long multiply, requant_right.h); without the table requant.h's.
 *
 * Why the integers are the reference's: the products are exact (|w| <= 127, |col| <= 128) and
 * every partial sum lies within the generator's int32 bound (conv.h). Without __ARM_ARCH_6M__
 * the walk is the same in C (the host tests, ASan/UBSan; rv32). The other CONV_2D functions are
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

#if defined(__ARM_ARCH_6M__)

#define ONE_VALUE(X)                                                              \
    "ldm %[w]!, {r4, r5, r6, r7}\n\t"                                             \
    "muls r4, " X ", r4\n\t"                                                      \
    "add %[a0], r4\n\t"                                                           \
    "muls r5, " X ", r5\n\t"                                                      \
    "add %[a1], r5\n\t"                                                           \
    "muls r6, " X ", r6\n\t"                                                      \
    "add %[a2], r6\n\t"                                                           \
    "muls r7, " X ", r7\n\t"                                                      \
    "add %[a3], r7\n\t"

/* acc[0..3] += one channel group's weights times the column (x to x_end, an even count) */
static const int32_t *rows_dot(const int32_t *x, const int32_t *x_end, const int32_t *w,
                               int32_t acc[4])
{
    register int32_t a0 __asm("r8") = acc[0];
    register int32_t a1 __asm("r9") = acc[1];
    register int32_t a2 __asm("r10") = acc[2];
    register int32_t a3 __asm("r11") = acc[3];
    register const int32_t *e __asm("r12") = x_end;
    __asm volatile(".syntax unified\n"
                   "1:\n\t"
                   "ldm %[x]!, {r2, r3}\n\t"
                   ONE_VALUE("r2")
                   ONE_VALUE("r3")
                   "cmp %[x], %[e]\n\t"
                   "bne 1b\n\t"
                   : [x] "+l"(x), [w] "+l"(w), [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2),
                     [a3] "+r"(a3)
                   : [e] "r"(e)
                   : "r2", "r3", "r4", "r5", "r6", "r7", "cc", "memory");
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
    return w;
}
#undef ONE_VALUE

#else /* the host and rv32: the same walk in C, two column values a pass (wrapping as MULS/ADD) */

static const int32_t *rows_dot(const int32_t *x, const int32_t *x_end, const int32_t *w,
                               int32_t acc[4])
{
    uint32_t a0 = (uint32_t)acc[0], a1 = (uint32_t)acc[1], a2 = (uint32_t)acc[2],
             a3 = (uint32_t)acc[3];
    for (; x != x_end; x += 2, w += 8) {
        const uint32_t x0 = (uint32_t)x[0], x1 = (uint32_t)x[1];
        a0 += (uint32_t)w[0] * x0 + (uint32_t)w[4] * x1;
        a1 += (uint32_t)w[1] * x0 + (uint32_t)w[5] * x1;
        a2 += (uint32_t)w[2] * x0 + (uint32_t)w[6] * x1;
        a3 += (uint32_t)w[3] * x0 + (uint32_t)w[7] * x1;
    }
    acc[0] = (int32_t)a0;
    acc[1] = (int32_t)a1;
    acc[2] = (int32_t)a2;
    acc[3] = (int32_t)a3;
    return w;
}

#endif /* __ARM_ARCH_6M__ */

#if defined(__ARM_ARCH_6M__)
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
#else
static int32_t *copy_words(int32_t *dst, const int32_t *src, uint32_t n)
{
    do {
        *dst++ = *src++;
    } while (--n != 0u);
    return dst;
}
#endif

/* One group's outputs (n <= 4 channels from o) */
static void group_outputs(const qe_conv_s8_rows_params_t *p, const conv_rq_t *rq,
                          const int32_t acc[4], uint32_t o, uint32_t n, int8_t *out)
{
    const int32_t act_min = p->c.activation_min, act_max = p->c.activation_max;
    uint32_t r;
    if (rq != NULL) {
        const conv_rq_t *q = rq + o;
        for (r = 0; r < n; ++r, ++q) {
            const int32_t a = acc[r];
            out[r] = (int8_t)(a <= q->sat_low ? act_min
                              : a > q->sat_above ? act_max : requant_right_output(&q->rr, a));
        }
    } else {
        for (r = 0; r < n; ++r) {
            out[r] = (int8_t)qe_requantize_output(acc[r], p->c.multipliers[o + r],
                                                  p->c.shifts[o + r], p->c.output_offset,
                                                  act_min, act_max);
        }
    }
}

void qe_conv_s8_rows(const qe_conv_s8_rows_params_t *p, const int8_t *input,
                     const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias, int8_t *output,
                     int32_t *scratch)
{
    const qe_window_t *g = &p->c.g;
    const uint32_t pd = p->padded_depth, in_c = g->in_c, out_c = g->out_c;
    const uint32_t wide_h = p->wide_h, wide_w = p->wide_w, k_h = g->k_h, k_w = g->k_w;
    const uint32_t depth = k_h * k_w * in_c;
    const uint32_t row_words = wide_w * in_c;                   /* one image row */
    const uint32_t run = (g->dil_w == 1u) ? k_w * in_c : in_c;  /* words per copy */
    const uint32_t runs = (g->dil_w == 1u) ? 1u : k_w;          /* copies per window row */
    const uint32_t run_step = (uint32_t)g->dil_w * in_c, ky_step = (uint32_t)g->dil_h * row_words;
    const uint32_t ox_step = (uint32_t)g->stride_w * in_c, oy_step = (uint32_t)g->stride_h * row_words;
    const int32_t zero_point = -p->c.input_offset;
    const conv_rq_t *const rq = (const conv_rq_t *)p->rq;
    int32_t *const img = scratch;
    int32_t *const col = scratch + wide_h * row_words;
    uint32_t b, y, xw, c, d, oy, ox, ky, kx, o;

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
            for (ox = 0; ox < g->out_w; ++ox, win += ox_step) {
                const int32_t *w = (const int32_t *)filter;
                const int32_t *src = win;
                int32_t *x = col;
                for (ky = 0; ky < k_h; ++ky, src += ky_step) {  /* the window, filter order */
                    const int32_t *s = src;
                    for (kx = 0; kx < runs; ++kx, s += run_step) {
                        x = copy_words(x, s, run);
                    }
                }
                for (o = 0; o < out_c; o += QE_CONV_ROWS) {
                    int32_t acc[4];
                    acc[0] = bias[o];
                    acc[1] = bias[o + 1u];
                    acc[2] = bias[o + 2u];
                    acc[3] = bias[o + 3u];
                    w = rows_dot(col, col + pd, w, acc);
                    group_outputs(p, rq, acc, o, (out_c - o < QE_CONV_ROWS) ? out_c - o
                                                                         : QE_CONV_ROWS, out + o);
                }
                out += out_c;
            }
        }
    }
}
