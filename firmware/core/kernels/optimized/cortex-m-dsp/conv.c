/* CONV_2D, optimized variant "cortex-m-dsp" (see ../README.md): qe_conv_s8 with exactly the
 * reference's results (../../conv.c), computed with fewer instructions. The float32 kernel is the
 * reference's, compiled in here from its source; the reference int8 kernel comes along renamed
 * qe_conv_s8_reference (the tests compare both in one binary; --gc-sections drops it).
 *
 * Per output pixel, the input window is gathered once into a contiguous column,
 *     col[(ky * k_w + kx) * in_c + c] = input[iy][ix][c],
 * the order of the filter's rows [out_c][k_h][k_w][in_c], with the input's zero point
 * (-input_offset) where the window lies in the padding. Then every output channel is one dot
 * product of that column with its filter row: the FULLY_CONNECTED loops of dsp.h (two channels
 * per pass, four int8 per SMLAD pair), the requantization inlined.
 *
 * Why the integers are the reference's, bit for bit: a padded point contributes
 * f * (zero_point + input_offset) = f * 0 = 0, exactly what the reference's skipping adds; every
 * other term is the reference's f * (x + input_offset), and the generator admits only filters
 * whose worst-case sum of |terms| (and |bias|) fits int32, so no order of the additions can
 * overflow or change the total. The requantization is requant.h's arithmetic (dsp.h:
 * requant_s8), per output channel as the reference's.
 *
 * A window deeper than COL_MAX values (k_h * k_w * in_c) has no room in the column buffer on
 * the stack: those convolutions run the reference loop. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../conv.h"   /* the real prototypes, checked against the definitions below */
#include "dsp.h"

#define qe_conv_s8 qe_conv_s8_reference
#include "../../conv.c"
#undef qe_conv_s8

/* Column buffer: 1 KiB of stack (a 3x3 window of 113 channels, a 5x5 one of 40). */
#define COL_MAX 1024u

/* n bytes from src to dst, four at a time, inline: a call to memcpy or memset costs more than
 * the few bytes of a window row. NOT_A_LIBCALL, an empty asm statement, keeps gcc from turning
 * these loops back into such calls (-ftree-loop-distribute-patterns, on at -O2). */
#if defined(__GNUC__)
#define NOT_A_LIBCALL() __asm__ volatile("")
#else
#define NOT_A_LIBCALL() ((void)0)
#endif


static inline void copy_bytes(int8_t *dst, const int8_t *src, uint32_t n)
{
    uint32_t v;
    for (; n >= 4u; n -= 4u, src += 4, dst += 4) {
        memcpy(&v, src, 4);
        memcpy(dst, &v, 4);
        NOT_A_LIBCALL();
    }
    for (; n > 0u; --n) {
        *dst++ = *src++;
        NOT_A_LIBCALL();
    }
}

static inline void fill_bytes(int8_t *dst, uint32_t word, uint32_t n)
{
    for (; n >= 4u; n -= 4u, dst += 4) {
        memcpy(dst, &word, 4);
        NOT_A_LIBCALL();
    }
    for (; n > 0u; --n) {
        *dst++ = (int8_t)word;
        NOT_A_LIBCALL();
    }
}

/* The input window whose top-left tap is at (iy0, ix0) in `image`, as col[] (see the top): the
 * rows of taps inside the image [ky0, ky1) and the columns [kx0, kx1) copied, the rest the
 * padding value (pad4: the zero point in all four bytes). */
static inline void gather_window(const qe_window_t *g, const int8_t *image, int32_t iy0,
                                 int32_t ix0, uint32_t ky0, uint32_t ky1, uint32_t kx0,
                                 uint32_t kx1, uint32_t pad4, int8_t *col)
{
    const uint32_t in_c = g->in_c, row_bytes = (uint32_t)g->k_w * in_c;
    uint32_t ky, kx;

    for (ky = 0; ky < g->k_h; ++ky, col += row_bytes) {
        const int8_t *src;
        if (ky < ky0 || ky >= ky1 || kx0 == kx1) {
            fill_bytes(col, pad4, row_bytes);
            continue;
        }
        src = image + ((uint32_t)(iy0 + (int32_t)(g->dil_h * ky)) * g->in_w
                       + (uint32_t)(ix0 + (int32_t)(g->dil_w * kx0))) * in_c;
        fill_bytes(col, pad4, kx0 * in_c);
        if (g->dil_w == 1u) {                 /* the inside taps of a row are contiguous */
            copy_bytes(col + kx0 * in_c, src, (kx1 - kx0) * in_c);
        } else {
            for (kx = kx0; kx < kx1; ++kx, src += (uint32_t)g->dil_w * in_c) {
                copy_bytes(col + kx * in_c, src, in_c);
            }
        }
        fill_bytes(col + kx1 * in_c, pad4, (g->k_w - kx1) * in_c);
    }
}

void qe_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input, const QE_FLASH int8_t *filter,
                const QE_FLASH int32_t *bias, int8_t *output)
{
    /* copies: the int8 stores below may alias *p, so the compiler would reload fields of it */
    const qe_window_t geo = p->g, *const g = &geo;
    const uint32_t depth = (uint32_t)g->k_h * g->k_w * g->in_c, out_c = g->out_c;
    const int32_t io = p->input_offset, output_offset = p->output_offset;
    const int32_t act_min = p->activation_min, act_max = p->activation_max;
    const QE_FLASH int32_t *const mults = p->multipliers;
    const QE_FLASH int8_t *const shifts = p->shifts;
    /* the zero point in four bytes: an int8 (the generator admits only int8 zero points) */
    const uint32_t pad4 = ((uint32_t)(-io) & 0xFFu) * 0x01010101u;
    int8_t col[COL_MAX];
    requant_t rq;
    uint32_t b, oy, ox, oc, ky0, ky1, kx0, kx1;

    if (depth > COL_MAX) {
        qe_conv_s8_reference(p, input, filter, bias, output);
        return;
    }
    for (b = 0; b < g->batches; ++b) {
        const int8_t *image = input + (uint32_t)b * g->in_h * g->in_w * g->in_c;
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = (int32_t)(oy * g->stride_h) - (int32_t)g->pad_top;
            inside_taps(iy0, g->dil_h, g->k_h, g->in_h, &ky0, &ky1);
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = (int32_t)(ox * g->stride_w) - (int32_t)g->pad_left;
                int8_t *out = output + ((b * g->out_h + oy) * g->out_w + ox) * out_c;
                inside_taps(ix0, g->dil_w, g->k_w, g->in_w, &kx0, &kx1);
                gather_window(g, image, iy0, ix0, ky0, ky1, kx0, kx1, pad4, col);
                for (oc = 0; oc + 1 < out_c; oc += 2) {
                    int32_t acc[2] = {0, 0};
                    dot_2rows(col, filter + oc * depth, filter + (oc + 1) * depth, depth, io, acc);
                    if (bias != QE_FLASH_NULL) {
                        acc[0] += bias[oc];
                        acc[1] += bias[oc + 1];
                    }
                    requant_init(&rq, mults[oc], shifts[oc], output_offset, act_min, act_max);
                    out[oc] = requant_s8(&rq, acc[0]);
                    requant_init(&rq, mults[oc + 1], shifts[oc + 1], output_offset, act_min,
                                 act_max);
                    out[oc + 1] = requant_s8(&rq, acc[1]);
                }
                if (oc < out_c) {
                    int32_t acc = dot_1row(col, filter + oc * depth, depth, io);
                    if (bias != QE_FLASH_NULL) {
                        acc += bias[oc];
                    }
                    requant_init(&rq, mults[oc], shifts[oc], output_offset, act_min, act_max);
                    out[oc] = requant_s8(&rq, acc);
                }
            }
        }
    }
}
