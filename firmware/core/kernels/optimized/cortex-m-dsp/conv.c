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
#define qe_conv_s8_packed qe_conv_s8_packed_reference
#define qe_conv_s8_wide qe_conv_s8_wide_reference
#include "../../conv.c"
#undef qe_conv_s8
#undef qe_conv_s8_packed
#undef qe_conv_s8_wide

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

/* ------------------------------------------------------------------------ the packed filter
 * qe_conv_s8_packed: the generator's layout (conv.h, qe_conv_s8_packed_params_t): the filter as
 * an FC's packed matrix [out_c][padded_depth] (fully_connected.h), the input offset folded into
 * bias'. Per output pixel the window is gathered once into an int8 column (col[d], the zero point
 * in the padding: conv.h says why that is exactly the reference's sum; the depth's padding up to
 * padded_depth is zeros, against zero weights), widened once into int16 lane pairs in SXTB16's
 * order (per quad: c0|c2, c1|c3), then every group of four output channels is the FC's packed
 * dot product: per quad one LDM of the two column words, two LDMs of four channels' weight words
 * and eight SMLADs (11 instructions per 16 multiply-accumulates). A 1x1 unpadded convolution
 * whose depth is a multiple of 4 widens the input pixel itself (no gather).
 *
 * The output stage: with the generator's mm table (every channel meets requant_mm_t's
 * preconditions, dsp.h, which proves it equal to the reference's requantization) the whole pixel
 * runs in one hand-allocated asm function (conv_groups_*: the widening, then per group the bias'
 * LDM, the MAC loop unrolled QE_CONV_PACKED_MAX_DEPTH / 4 quads and entered at the depth's quad,
 * and per output channel one LDM of its {multiplier, round, shift} + REQUANT_MM_*_ASM's 5-6
 * instructions); otherwise the same SMLADs in C and requant_s8 per channel. */

static uint32_t *widen_col(const int8_t *col, uint32_t quads, uint32_t *xw)
{
    uint32_t q;
    for (q = 0; q < quads; ++q, col += 4, xw += 2) {
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
        const uint32_t v = load_s8x4(col);
        xw[0] = (uint32_t)__sxtb16(v);
        xw[1] = (uint32_t)sxtb16_ror8(v);
#else
        xw[0] = ((uint32_t)(int32_t)col[0] & 0xFFFFu) | ((uint32_t)(int32_t)col[2] << 16);
        xw[1] = ((uint32_t)(int32_t)col[1] & 0xFFFFu) | ((uint32_t)(int32_t)col[3] << 16);
#endif
        NOT_A_LIBCALL();
    }
    return xw;
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define SMLAD_(w, x, a) __smlad((int16x2_t)(w), (int16x2_t)(x), (a))
#else
static inline int32_t SMLAD_(uint32_t w, uint32_t x, int32_t a)
{
    /* the lanes' products exactly; the generator's bound keeps every partial sum in int32 */
    return a + (int32_t)(int16_t)(w & 0xFFFFu) * (int32_t)(int16_t)(x & 0xFFFFu)
           + (int32_t)(int16_t)(w >> 16) * (int32_t)(int16_t)(x >> 16);
}
#endif

/* every group of one pixel's output channels, SMLADs in C and requant_s8 (no mm table) */
static void conv_groups_c(const qe_conv_s8_packed_params_t *p, const uint32_t *xw, uint32_t quads,
                          const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                          int8_t *out)
{
    const uint32_t out_c = p->c.g.out_c;
    const QE_FLASH int32_t *w = filter;
    requant_t rq;
    uint32_t o, q, r;

    for (o = 0; o < out_c; o += QE_CONV_PACKED_ROWS) {
        int32_t a[QE_CONV_PACKED_ROWS];
        for (r = 0; r < QE_CONV_PACKED_ROWS; ++r) {
            a[r] = bias[o + r];
        }
        for (q = 0; q < quads; ++q, w += 2u * QE_CONV_PACKED_ROWS) {
            const uint32_t x0 = xw[2u * q], x1 = xw[2u * q + 1u];
            for (r = 0; r < QE_CONV_PACKED_ROWS; ++r) {
                a[r] = SMLAD_((uint32_t)w[r], x0, a[r]);
                a[r] = SMLAD_((uint32_t)w[QE_CONV_PACKED_ROWS + r], x1, a[r]);
            }
        }
        for (r = 0; r < QE_CONV_PACKED_ROWS && o + r < out_c; ++r) {
            requant_init(&rq, p->c.multipliers[o + r], p->c.shifts[o + r], p->c.output_offset,
                         p->c.activation_min, p->c.activation_max);
            out[o + r] = requant_s8(&rq, a[r]);
        }
    }
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* The asm function's context (r7): the fields it reads by offset */
typedef struct {
    const QE_FLASH int32_t *bias;   /* 0: the next group's bias' */
    uint32_t *xw;                   /* 4: the widened column */
    uint32_t entry;                 /* 8: 44 * quads: the unrolled MAC loop's entry, from its end */
    int8_t *out_end;                /* 12: the end of the groups' outputs */
    const QE_FLASH int32_t *w;      /* 16: the next group's weights */
    int8_t *out;                    /* 20 */
    const int8_t *in;               /* 24: the int8 column (or pixel) to widen first */
    uint32_t in_quads;              /* 28: its quads (0: xw is ready) */
    uint32_t target;                /* 32: (set by the function: the entry's address) */
    const QE_FLASH int32_t *mm;     /* 36: the next channel's {multiplier, round, shift} */
    uint32_t count;                 /* 40: pixels after this one (direct 1x1: the input and the
                                     * outputs follow on) */
    uint32_t out_c;                 /* 44 */
    const QE_FLASH int32_t *bias0;  /* 48: bias, mm and the filter from the start, per pixel */
    const QE_FLASH int32_t *mm0;    /* 52 */
    const QE_FLASH int32_t *w0;     /* 56 */
} cg_ctx_t;

#define CG_CHECK_(name, cond) typedef char cg_check_##name[(cond) ? 1 : -1]
CG_CHECK_(xw, offsetof(cg_ctx_t, xw) == 4);
CG_CHECK_(entry, offsetof(cg_ctx_t, entry) == 8);
CG_CHECK_(out_end, offsetof(cg_ctx_t, out_end) == 12);
CG_CHECK_(w, offsetof(cg_ctx_t, w) == 16);
CG_CHECK_(out, offsetof(cg_ctx_t, out) == 20);
CG_CHECK_(in, offsetof(cg_ctx_t, in) == 24);
CG_CHECK_(in_quads, offsetof(cg_ctx_t, in_quads) == 28);
CG_CHECK_(target, offsetof(cg_ctx_t, target) == 32);
CG_CHECK_(mm, offsetof(cg_ctx_t, mm) == 36);
CG_CHECK_(count, offsetof(cg_ctx_t, count) == 40);
CG_CHECK_(out_c, offsetof(cg_ctx_t, out_c) == 44);
CG_CHECK_(bias0, offsetof(cg_ctx_t, bias0) == 48);
CG_CHECK_(mm0, offsetof(cg_ctx_t, mm0) == 52);
CG_CHECK_(w0, offsetof(cg_ctx_t, w0) == 56);
CG_CHECK_(depth, QE_CONV_PACKED_MAX_DEPTH == 128u);

/* one quad: the column's two words (r9, r10), four channels' weight words per half */
#define CG_Q1 "ldmia.w r0!, {r9, r10}\n\t" "ldmia.w r1!, {r4, r5, r6, r8}\n\t"              \
    "smlad r2, r4, r9, r2\n\t" "smlad r3, r5, r9, r3\n\t" "smlad r12, r6, r9, r12\n\t"     \
    "smlad lr, r8, r9, lr\n\t" "ldmia.w r1!, {r4, r5, r6, r8}\n\t"                        \
    "smlad r2, r4, r10, r2\n\t" "smlad r3, r5, r10, r3\n\t" "smlad r12, r6, r10, r12\n\t"  \
    "smlad lr, r8, r10, lr\n\t"
#define CG_Q4 CG_Q1 CG_Q1 CG_Q1 CG_Q1
#define CG_Q32 CG_Q4 CG_Q4 CG_Q4 CG_Q4 CG_Q4 CG_Q4 CG_Q4 CG_Q4
#define CG_OUT(OUT, A) "ldmia r10!, {r4, r5, r6}\n\t" OUT(A)
#define CG_GROUPS(NAME, OUT)                                                              \
    __attribute__((naked, noinline)) static void NAME(cg_ctx_t *c)                       \
    {                                                                                     \
        (void)c;                                                                          \
        __asm volatile(                                                                   \
            "push {r4-r11, lr}\n\t"                                                       \
            "mov r7, r0\n\t"                                                              \
            "adr.w r4, .L" #NAME "_end\n\t"                                               \
            "ldr r5, [r7, #8]\n\t"                                                        \
            "sub r4, r4, r5\n\t"                                                          \
            "orr r4, r4, #1\n\t"                                                          \
            "str r4, [r7, #32]\n"                                                          \
            ".L" #NAME "_pixel:\n\t"                                                      \
            "ldr r0, [r7, #24]\n\t"                                                       \
            "ldr r1, [r7, #28]\n\t"                                                       \
            "ldr r4, [r7, #4]\n\t"                                                        \
            "cbz r1, .L" #NAME "_widened\n"                                                \
            ".L" #NAME "_widen:\n\t"                                                      \
            "ldr r5, [r0], #4\n\t"                                                        \
            "sxtb16 r6, r5\n\t"                                                           \
            "sxtb16 r8, r5, ror #8\n\t"                                                   \
            "stmia r4!, {r6, r8}\n\t"                                                     \
            "subs r1, r1, #1\n\t"                                                         \
            "bne .L" #NAME "_widen\n\t"                                                   \
            "str r0, [r7, #24]\n"         /* the next pixel's input (direct 1x1) */        \
            ".L" #NAME "_widened:\n\t"                                                    \
            "ldr r1, [r7, #16]\n\t"                                                       \
            "ldr r11, [r7, #20]\n"                                                        \
            ".L" #NAME "_group:\n\t"                                                      \
            "ldr r4, [r7, #0]\n\t"                                                        \
            "ldmia r4!, {r2, r3, r12, lr}\n\t"                                            \
            "str r4, [r7, #0]\n\t"                                                        \
            "ldr r0, [r7, #4]\n\t"                                                        \
            "ldr pc, [r7, #32]\n"                                                         \
            ".L" #NAME "_start:\n\t"                                                      \
            CG_Q32                                                                        \
            "\n.L" #NAME "_end:\n\t"                                                      \
            ".if (.L" #NAME "_end - .L" #NAME "_start) - 44 * 32\n\t"                     \
            ".error \"a quad is not 44 bytes\"\n\t"                                       \
            ".endif\n\t"                                                                  \
            "ldr r10, [r7, #36]\n\t"                                                      \
            CG_OUT(OUT, "r2") CG_OUT(OUT, "r3") CG_OUT(OUT, "r12") CG_OUT(OUT, "lr")      \
            "str r10, [r7, #36]\n\t"                                                      \
            "ldr r4, [r7, #12]\n\t"                                                       \
            "cmp r11, r4\n\t"                                                             \
            "bne .L" #NAME "_group\n\t"                                                   \
            "str r1, [r7, #16]\n\t"                                                       \
            "ldr r4, [r7, #40]\n\t"     /* the next pixel, if any */                      \
            "cbz r4, .L" #NAME "_done\n\t"                                                \
            "subs r4, r4, #1\n\t"                                                         \
            "str r4, [r7, #40]\n\t"                                                       \
            "str r11, [r7, #20]\n\t"                                                      \
            "ldr r4, [r7, #12]\n\t"                                                       \
            "ldr r5, [r7, #44]\n\t"                                                       \
            "add r4, r4, r5\n\t"                                                          \
            "str r4, [r7, #12]\n\t"                                                       \
            "ldr r4, [r7, #48]\n\t"                                                       \
            "str r4, [r7, #0]\n\t"                                                        \
            "ldr r4, [r7, #52]\n\t"                                                       \
            "str r4, [r7, #36]\n\t"                                                       \
            "ldr r4, [r7, #56]\n\t"                                                       \
            "str r4, [r7, #16]\n\t"                                                       \
            "b.w .L" #NAME "_pixel\n"                                                      \
            ".L" #NAME "_done:\n\t"                                                       \
            "pop {r4-r11, pc}\n\t");                                                      \
    }

CG_GROUPS(conv_groups_fix, REQUANT_MM_FIX_ASM)
CG_GROUPS(conv_groups_nofix, REQUANT_MM_NOFIX_ASM)
#endif /* __ARM_FEATURE_DSP */

/* n >= 4 bytes from src to dst as whole words, the last one overlapping its predecessor (no
 * byte loop, nothing read or written outside the n bytes) */
static inline void copy_row(int8_t *dst, const int8_t *src, uint32_t n)
{
    uint32_t k, v;
    for (k = 4u; k <= n; k += 4u, src += 4, dst += 4) {
        memcpy(&v, src, 4);
        memcpy(dst, &v, 4);
        NOT_A_LIBCALL();
    }
    if (k - 4u < n) {
        memcpy(&v, src + (n - (k - 4u)) - 4, 4);
        memcpy(dst + (n - (k - 4u)) - 4, &v, 4);
    }
}

void qe_conv_s8_packed(const qe_conv_s8_packed_params_t *p, const int8_t *input,
                       const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                       int8_t *output)
{
    const qe_window_t geo = p->c.g, *const g = &geo;
    const uint32_t depth = (uint32_t)g->k_h * g->k_w * g->in_c, out_c = g->out_c;
    const uint32_t pd = p->padded_depth, quads = pd / 4u;
    const uint32_t pad4 = ((uint32_t)(-p->c.input_offset) & 0xFFu) * 0x01010101u;
    /* a 1x1 unpadded window is the input pixel itself: widened in place when whole quads */
    const int direct = g->k_h == 1u && g->k_w == 1u && g->pad_top == 0u && g->pad_left == 0u
                       && depth == pd;
    /* an inside window's rows: contiguous (dilation 1 along x) and at least a word */
    const uint32_t row_bytes = (uint32_t)g->k_w * g->in_c;
    const uint32_t y_step = (uint32_t)g->dil_h * g->in_w * g->in_c;
    const int rows_whole = g->dil_w == 1u && row_bytes >= 4u;
    int8_t col[QE_CONV_PACKED_MAX_DEPTH];
    uint32_t xw[QE_CONV_PACKED_MAX_DEPTH / 2u];
    uint32_t b, oy, ox, ky0, ky1, kx0, kx1;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    const uint32_t whole = out_c & ~(QE_CONV_PACKED_ROWS - 1u);
    void (*const groups)(cg_ctx_t *) = (p->c.output_offset == -128) ? conv_groups_nofix
                                                                   : conv_groups_fix;
    int8_t tail[QE_CONV_PACKED_ROWS];
    cg_ctx_t cx;
    uint32_t r;
    cx.xw = xw;
    cx.entry = 44u * quads;
    cx.count = 0;
    cx.out_c = out_c;
    cx.bias0 = bias;
    cx.mm0 = p->mm;
    cx.w0 = filter;
#endif

    if (pd > QE_CONV_PACKED_MAX_DEPTH) {    /* (the generator never makes these) */
        qe_conv_s8_packed_reference(p, input, filter, bias, output);
        return;
    }
    fill_bytes(col + depth, 0u, pd - depth);    /* the depth's padding: zeros, once */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    if (direct && p->mm != QE_FLASH_NULL && whole == out_c && g->stride_h == 1u
        && g->stride_w == 1u && g->out_h == g->in_h && g->out_w == g->in_w && g->batches > 0u
        && g->out_h > 0u && g->out_w > 0u) {
        /* every pixel of every batch in one call: inputs and outputs both contiguous */
        cx.bias = bias;
        cx.mm = p->mm;
        cx.w = filter;
        cx.in = input;
        cx.in_quads = quads;
        cx.out = output;
        cx.out_end = output + out_c;
        cx.count = (uint32_t)g->batches * g->out_h * g->out_w - 1u;
        groups(&cx);
        return;
    }
#endif
    for (b = 0; b < g->batches; ++b) {
        const int8_t *image = input + (uint32_t)b * g->in_h * g->in_w * g->in_c;
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = (int32_t)(oy * g->stride_h) - (int32_t)g->pad_top;
            inside_taps(iy0, g->dil_h, g->k_h, g->in_h, &ky0, &ky1);
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = (int32_t)(ox * g->stride_w) - (int32_t)g->pad_left;
                int8_t *out = output + ((b * g->out_h + oy) * g->out_w + ox) * out_c;
                const int8_t *src;
                if (direct) {
                    src = image + ((uint32_t)iy0 * g->in_w + (uint32_t)ix0) * g->in_c;
                } else {
                    inside_taps(ix0, g->dil_w, g->k_w, g->in_w, &kx0, &kx1);
                    if (rows_whole && ky0 == 0u && ky1 == g->k_h && kx0 == 0u && kx1 == g->k_w) {
                        /* the whole window inside the image: k_h rows of row_bytes */
                        const int8_t *s_row = image + ((uint32_t)iy0 * g->in_w + (uint32_t)ix0)
                                                      * g->in_c;
                        int8_t *d_row = col;
                        uint32_t ky;
                        for (ky = 0; ky < g->k_h; ++ky, s_row += y_step, d_row += row_bytes) {
                            copy_row(d_row, s_row, row_bytes);
                        }
                    } else {
                        gather_window(g, image, iy0, ix0, ky0, ky1, kx0, kx1, pad4, col);
                    }
                    src = col;
                }
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
                if (p->mm != QE_FLASH_NULL) {
                    cx.bias = bias;
                    cx.mm = p->mm;
                    cx.w = filter;
                    cx.in = src;
                    cx.in_quads = quads;
                    if (whole > 0u) {
                        cx.out = out;
                        cx.out_end = out + whole;
                        groups(&cx);
                        cx.in_quads = 0;        /* widened already */
                    }
                    if (whole < out_c) {        /* the padded last group, into scratch */
                        cx.out = tail;
                        cx.out_end = tail + QE_CONV_PACKED_ROWS;
                        groups(&cx);
                        for (r = 0; whole + r < out_c; ++r) {
                            out[whole + r] = tail[r];
                        }
                    }
                    continue;
                }
#endif
                widen_col(src, quads, xw);
                conv_groups_c(p, xw, quads, filter, bias, out);
            }
        }
    }
}

/* ------------------------------------------------------------------------ the widened image
 * qe_conv_s8_wide (conv.h, qe_conv_s8_wide_params_t): per batch the input is widened once into
 * the scratch image, x + input_offset as int16 in the input's order (two channels per word),
 * zeros in the padding; a window row is then k_w * in_cp / 2 contiguous words of it, and the
 * filter's words are in that order, four output channels per word index. No gather, no tap
 * tested, each input value widened once. Per word of a window row: one LDR of it, one LDM of the
 * four channels' weight words, four SMLADs (6 instructions for 8 multiply-accumulates). With the
 * generator's mm table one hand-allocated asm function runs a pixel's groups: per window row a
 * computed branch into the unrolled loop (QE_CONV_WIDE_MAX_ROW_WORDS steps, entered at the row's
 * length), per output channel one LDM of its {multiplier, round, shift} and REQUANT_MM_*_ASM;
 * otherwise the same sums in C and requant_s8. */

/* the scratch image of one batch */
static void conv_widen(const qe_conv_s8_wide_params_t *p, const int8_t *image, uint8_t *wide)
{
    const qe_window_t *const g = &p->c.g;
    const uint32_t in_c = g->in_c, cp = p->in_cp, row_bytes = 2u * cp * p->wide_w;
    const uint32_t left = 2u * cp * g->pad_left, inside = 2u * cp * g->in_w;
    const int32_t io = p->c.input_offset;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    const int16x2_t io2 = (int16x2_t)(((uint32_t)io & 0xFFFFu) * 0x00010001u);
#endif
    uint32_t iy, k;

    for (iy = 0; iy < p->wide_h; ++iy, wide += row_bytes) {
        const uint32_t yy = iy - g->pad_top;           /* (wraps above the image: outside) */
        const int8_t *src;
        uint8_t *d = wide + left;
        if (yy >= g->in_h) {
            fill_bytes((int8_t *)wide, 0u, row_bytes);
            continue;
        }
        src = image + yy * g->in_w * in_c;
        fill_bytes((int8_t *)wide, 0u, left);
        if (cp == in_c) {                           /* whole pairs: the row is contiguous */
            const uint32_t n = g->in_w * in_c;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
            const int8_t *const src_end = src + (n & ~3u);
            for (; src != src_end; src += 4, d += 8) {
                const uint32_t v = load_s8x4(src);
                const uint32_t x02 = (uint32_t)__sxtab16(io2, v);
                const uint32_t x13 = (uint32_t)sxtab16_ror8(io2, v);
                uint32_t w0, w1;
                __asm("pkhbt %0, %1, %2, lsl #16" : "=r"(w0) : "r"(x02), "r"(x13));  /* x0 | x1 */
                __asm("pkhtb %0, %1, %2, asr #16" : "=r"(w1) : "r"(x13), "r"(x02));  /* x2 | x3 */
                memcpy(d, &w0, 4);
                memcpy(d + 4, &w1, 4);
            }
            k = n & ~3u;
            src -= k;
#else
            for (k = 0; k + 4u <= n; k += 4u, d += 8) {
                const uint32_t w0 = ((uint32_t)(src[k] + io) & 0xFFFFu) | ((uint32_t)(src[k + 1u] + io) << 16);
                const uint32_t w1 = ((uint32_t)(src[k + 2u] + io) & 0xFFFFu) | ((uint32_t)(src[k + 3u] + io) << 16);
                memcpy(d, &w0, 4);
                memcpy(d + 4, &w1, 4);
                NOT_A_LIBCALL();
            }
#endif
            if (k < n) {                            /* n is even: one pair left */
                const uint32_t w0 = ((uint32_t)(src[k] + io) & 0xFFFFu) | ((uint32_t)(src[k + 1u] + io) << 16);
                memcpy(d, &w0, 4);
                d += 4;
            }
        } else {                                    /* odd in_c: a zero channel per pixel */
            uint32_t x, c;
            for (x = 0; x < g->in_w; ++x, src += in_c) {
                for (c = 0; c < cp; c += 2u, d += 4) {
                    const int32_t lo = src[c] + io;
                    const int32_t hi = (c + 1u < in_c) ? src[c + 1u] + io : 0;
                    const uint32_t w0 = ((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16);
                    memcpy(d, &w0, 4);
                    NOT_A_LIBCALL();
                }
            }
        }
        fill_bytes((int8_t *)d, 0u, row_bytes - left - inside);
    }
}

/* every group of one pixel's output channels in C (no mm table) */
static void conv_wide_c(const qe_conv_s8_wide_params_t *p, const uint8_t *pix, uint32_t rows,
                        uint32_t row_words, uint32_t row_stride, const QE_FLASH int32_t *filter,
                        const QE_FLASH int32_t *bias, int8_t *out)
{
    const uint32_t out_c = p->c.g.out_c;
    const QE_FLASH int32_t *w = filter;
    requant_t rq;
    uint32_t o, ky, j, r;

    for (o = 0; o < out_c; o += QE_CONV_WIDE_ROWS) {
        int32_t a[QE_CONV_WIDE_ROWS];
        const uint8_t *x_row = pix;
        for (r = 0; r < QE_CONV_WIDE_ROWS; ++r) {
            a[r] = bias[o + r];
        }
        for (ky = 0; ky < rows; ++ky, x_row += row_stride) {
            for (j = 0; j < row_words; ++j, w += QE_CONV_WIDE_ROWS) {
                uint32_t x;
                memcpy(&x, x_row + 4u * j, 4);
                for (r = 0; r < QE_CONV_WIDE_ROWS; ++r) {
                    a[r] = SMLAD_((uint32_t)w[r], x, a[r]);
                }
            }
        }
        for (r = 0; r < QE_CONV_WIDE_ROWS && o + r < out_c; ++r) {
            requant_init(&rq, p->c.multipliers[o + r], p->c.shifts[o + r], p->c.output_offset,
                         p->c.activation_min, p->c.activation_max);
            out[o + r] = requant_s8(&rq, a[r]);
        }
    }
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
typedef struct {
    const QE_FLASH int32_t *bias;   /* 0: the next group's bias */
    const uint8_t *pix;             /* 4: the window's first word in the image */
    uint32_t entry;                 /* 8: 24 * row_words: the unrolled loop's entry, from its end */
    int8_t *out_end;                /* 12 */
    const QE_FLASH int32_t *w;      /* 16: the next group's weights */
    int8_t *out;                    /* 20 */
    uint32_t rows;                  /* 24: k_h */
    uint32_t skip;                  /* 28: from a window row's end to the next row's start */
    uint32_t target;                /* 32: (set by the function) */
    const QE_FLASH int32_t *mm;     /* 36: the next channel's {multiplier, round, shift} */
    uint32_t count;                 /* 40: pixels after this one (their outputs follow on) */
    uint32_t pix_step;              /* 44: from a pixel's window to the next one's */
    uint32_t out_c;                 /* 48 */
    const QE_FLASH int32_t *bias0;  /* 52: bias, mm and the filter from the start, per pixel */
    const QE_FLASH int32_t *mm0;    /* 56 */
    const QE_FLASH int32_t *w0;     /* 60 */
} cw_ctx_t;

CG_CHECK_(w_pix, offsetof(cw_ctx_t, pix) == 4);
CG_CHECK_(w_entry, offsetof(cw_ctx_t, entry) == 8);
CG_CHECK_(w_out_end, offsetof(cw_ctx_t, out_end) == 12);
CG_CHECK_(w_w, offsetof(cw_ctx_t, w) == 16);
CG_CHECK_(w_out, offsetof(cw_ctx_t, out) == 20);
CG_CHECK_(w_rows, offsetof(cw_ctx_t, rows) == 24);
CG_CHECK_(w_skip, offsetof(cw_ctx_t, skip) == 28);
CG_CHECK_(w_target, offsetof(cw_ctx_t, target) == 32);
CG_CHECK_(w_mm, offsetof(cw_ctx_t, mm) == 36);
CG_CHECK_(w_count, offsetof(cw_ctx_t, count) == 40);
CG_CHECK_(w_pix_step, offsetof(cw_ctx_t, pix_step) == 44);
CG_CHECK_(w_out_c, offsetof(cw_ctx_t, out_c) == 48);
CG_CHECK_(w_bias0, offsetof(cw_ctx_t, bias0) == 52);
CG_CHECK_(w_mm0, offsetof(cw_ctx_t, mm0) == 56);
CG_CHECK_(w_w0, offsetof(cw_ctx_t, w0) == 60);
CG_CHECK_(w_row, QE_CONV_WIDE_MAX_ROW_WORDS == 64u);

/* one word of a window row (r9) against four channels' weight words */
#define CW_S1 "ldr.w r9, [r0], #4\n\t" "ldmia.w r1!, {r4, r5, r6, r8}\n\t"                  \
    "smlad r2, r4, r9, r2\n\t" "smlad r3, r5, r9, r3\n\t" "smlad r12, r6, r9, r12\n\t"     \
    "smlad lr, r8, r9, lr\n\t"
#define CW_S4 CW_S1 CW_S1 CW_S1 CW_S1
#define CW_S64 CW_S4 CW_S4 CW_S4 CW_S4 CW_S4 CW_S4 CW_S4 CW_S4                              \
    CW_S4 CW_S4 CW_S4 CW_S4 CW_S4 CW_S4 CW_S4 CW_S4
#define CW_GROUPS(NAME, OUT)                                                              \
    __attribute__((naked, noinline)) static void NAME(cw_ctx_t *c)                       \
    {                                                                                     \
        (void)c;                                                                          \
        __asm volatile(                                                                   \
            "push {r4-r11, lr}\n\t"                                                       \
            "mov r7, r0\n\t"                                                              \
            "adr.w r4, .L" #NAME "_end\n\t"                                               \
            "ldr r5, [r7, #8]\n\t"                                                        \
            "sub r4, r4, r5\n\t"                                                          \
            "orr r4, r4, #1\n\t"                                                          \
            "str r4, [r7, #32]\n\t"                                                       \
            "ldr r1, [r7, #16]\n\t"                                                       \
            "ldr r11, [r7, #20]\n"                                                        \
            ".L" #NAME "_group:\n\t"                                                      \
            "ldr r4, [r7, #0]\n\t"                                                        \
            "ldmia r4!, {r2, r3, r12, lr}\n\t"                                            \
            "str r4, [r7, #0]\n\t"                                                        \
            "ldr r0, [r7, #4]\n\t"                                                        \
            "ldr r10, [r7, #24]\n"                                                        \
            ".L" #NAME "_row:\n\t"                                                        \
            "ldr pc, [r7, #32]\n"                                                         \
            ".L" #NAME "_start:\n\t"                                                      \
            CW_S64                                                                        \
            "\n.L" #NAME "_end:\n\t"                                                      \
            ".if (.L" #NAME "_end - .L" #NAME "_start) - 24 * 64\n\t"                     \
            ".error \"a step is not 24 bytes\"\n\t"                                       \
            ".endif\n\t"                                                                  \
            "subs r10, r10, #1\n\t"                                                       \
            "beq .L" #NAME "_rows_done\n\t"                                               \
            "ldr r9, [r7, #28]\n\t"                                                       \
            "add r0, r0, r9\n\t"                                                          \
            "b.w .L" #NAME "_row\n"                                                       \
            ".L" #NAME "_rows_done:\n\t"                                                  \
            "ldr r10, [r7, #36]\n\t"                                                      \
            CG_OUT(OUT, "r2") CG_OUT(OUT, "r3") CG_OUT(OUT, "r12") CG_OUT(OUT, "lr")      \
            "str r10, [r7, #36]\n\t"                                                      \
            "ldr r4, [r7, #12]\n\t"                                                       \
            "cmp r11, r4\n\t"                                                             \
            "bne .L" #NAME "_group\n\t"                                                   \
            "str r1, [r7, #16]\n\t"                                                       \
            "ldr r4, [r7, #40]\n\t"     /* the next pixel of the row, if any */           \
            "cbz r4, .L" #NAME "_done\n\t"                                                \
            "subs r4, r4, #1\n\t"                                                         \
            "str r4, [r7, #40]\n\t"                                                       \
            "ldr r4, [r7, #4]\n\t"                                                        \
            "ldr r5, [r7, #44]\n\t"                                                       \
            "add r4, r4, r5\n\t"                                                          \
            "str r4, [r7, #4]\n\t"                                                        \
            "ldr r4, [r7, #12]\n\t"                                                       \
            "ldr r5, [r7, #48]\n\t"                                                       \
            "add r4, r4, r5\n\t"                                                          \
            "str r4, [r7, #12]\n\t"                                                       \
            "ldr r4, [r7, #52]\n\t"                                                       \
            "str r4, [r7, #0]\n\t"                                                        \
            "ldr r4, [r7, #56]\n\t"                                                       \
            "str r4, [r7, #36]\n\t"                                                       \
            "ldr r1, [r7, #60]\n\t"                                                       \
            "b.w .L" #NAME "_group\n"                                                      \
            ".L" #NAME "_done:\n\t"                                                       \
            "pop {r4-r11, pc}\n\t");                                                      \
    }

CW_GROUPS(conv_wide_fix, REQUANT_MM_FIX_ASM)
CW_GROUPS(conv_wide_nofix, REQUANT_MM_NOFIX_ASM)
#endif /* __ARM_FEATURE_DSP */

void qe_conv_s8_wide(const qe_conv_s8_wide_params_t *p, const int8_t *input,
                     const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                     int8_t *output, int16_t *scratch)
{
    const qe_window_t geo = p->c.g, *const g = &geo;
    const uint32_t out_c = g->out_c, cp = p->in_cp;
    const uint32_t row_words = (uint32_t)g->k_w * cp / 2u;
    const uint32_t pix_bytes = 2u * cp, line = pix_bytes * p->wide_w;
    const uint32_t row_stride = (uint32_t)g->dil_h * line;
    uint8_t *const wide = (uint8_t *)(void *)scratch;
    uint32_t b, oy, ox;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    const uint32_t whole = out_c & ~(QE_CONV_WIDE_ROWS - 1u);
    void (*const groups)(cw_ctx_t *) = (p->c.output_offset == -128) ? conv_wide_nofix
                                                                   : conv_wide_fix;
    int8_t tail[QE_CONV_WIDE_ROWS];
    cw_ctx_t cx;
    uint32_t r;
    cx.entry = 24u * row_words;
    cx.rows = g->k_h;
    cx.skip = row_stride - 4u * row_words;
    cx.pix_step = g->stride_w * pix_bytes;
    cx.out_c = out_c;
    cx.bias0 = bias;
    cx.mm0 = p->mm;
    cx.w0 = filter;
#endif

    if (row_words > QE_CONV_WIDE_MAX_ROW_WORDS || g->dil_w != 1u) {   /* (never generated) */
        qe_conv_s8_wide_reference(p, input, filter, bias, output, scratch);
        return;
    }
    for (b = 0; b < g->batches; ++b) {
        conv_widen(p, input + (uint32_t)b * g->in_h * g->in_w * g->in_c, wide);
        for (oy = 0; oy < g->out_h; ++oy) {
            const uint8_t *pix = wide + (oy * g->stride_h) * line;
            int8_t *out = output + ((b * g->out_h + oy) * g->out_w) * out_c;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
            if (p->mm != QE_FLASH_NULL && whole == out_c && g->out_w > 0u) {
                /* whole groups only: the row's pixels in one call, their outputs contiguous */
                cx.bias = bias;
                cx.mm = p->mm;
                cx.w = filter;
                cx.pix = pix;
                cx.out = out;
                cx.out_end = out + out_c;
                cx.count = g->out_w - 1u;
                groups(&cx);
                continue;
            }
#endif
            for (ox = 0; ox < g->out_w; ++ox, pix += g->stride_w * pix_bytes, out += out_c) {
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
                if (p->mm != QE_FLASH_NULL) {
                    cx.bias = bias;
                    cx.mm = p->mm;
                    cx.w = filter;
                    cx.pix = pix;
                    cx.count = 0;
                    if (whole > 0u) {
                        cx.out = out;
                        cx.out_end = out + whole;
                        groups(&cx);
                    }
                    if (whole < out_c) {        /* the padded last group, into scratch */
                        cx.out = tail;
                        cx.out_end = tail + QE_CONV_WIDE_ROWS;
                        groups(&cx);
                        for (r = 0; whole + r < out_c; ++r) {
                            out[whole + r] = tail[r];
                        }
                    }
                    continue;
                }
#endif
                conv_wide_c(p, pix, g->k_h, row_words, row_stride, filter, bias, out);
            }
        }
    }
}
