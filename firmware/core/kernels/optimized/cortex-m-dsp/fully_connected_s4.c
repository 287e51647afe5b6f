/* FULLY_CONNECTED with packed int4 weights, optimized variant "cortex-m-dsp" (see ../README.md):
 * qe_fully_connected_s4 with exactly the reference's results (../../fully_connected_s4.c), on
 * the same TFLite packing (the generator's model.c is the same for every board).
 *
 * Eight weights per 32-bit load, unpacked by one AND each, no sign-extension: a weight moved
 * into the top nibble of a 16-bit lane is, read as an int16, 4096 times its int4 value. With M =
 * 0xF000F000 and the loaded word W holding w0..w7 (w0 in bits 0..3, little-endian bytes, low
 * nibble first), (W << 12) & M is the lane pair (4096 w0, 4096 w4), (W << 8) & M (4096 w1,
 * 4096 w5), (W << 4) & M (4096 w2, 4096 w6) and W & M (4096 w3, 4096 w7). The input is widened
 * once per batch into a stack buffer of int16 pairs in that order, (x0 + io, x4 + io),
 * (x1 + io, x5 + io), ..., so each SMLAD multiplies one lane pair: 4 AND (with the shift in the
 * operand) and 4 SMLAD per 8 weights and row, two rows sharing each load of 4 input pairs.
 *
 * Why the integers are the reference's, bit for bit: every product is exact (|4096 w| <= 32768,
 * |x + io| <= 255), and SMLAD adds in 32 bits; the sum is 4096 times the reference's
 * sum_d w (x + io), and |that| <= 256 * 8 * 255 * 4096 < 2^31 over a block of at most 256 inputs
 * (QE_S4_DSP_BLOCK), so no partial sum overflows in any order and dividing it by 4096 is exact.
 * Deeper rows (issue 39: MinAtar's FC 1,024 -> 128, which ran the reference at 4.1x int8's
 * cost) are cut into such blocks, each block's exact sum added into an int32 accumulator per
 * row, and the output stage runs once at the end: the same integer as the reference's. Why
 * blocks and not one buffer: the widened input takes 2 bytes an input, so a block's 256 inputs
 * (512 B) and the accumulators of QE_S4_DSP_ROWS rows (256 B) bound the stack for any depth; the
 * rows are taken QE_S4_DSP_ROWS at a time, each block widened once per such chunk (~2
 * instructions an input, against 128 rows x 1 MAC an input). The weights' offset (-zero point)
 * is folded in as in fully_connected.c's variant: + offset * sum_d (x + io). Odd depths (rows
 * that start mid-byte) run the reference. A depth that is not a multiple of 8 ends in a group
 * padded with zero inputs: the nibbles read past a row's end (the next row's; at the array's end
 * a word filled only from the row's own bytes) add 0; every earlier block is 32 whole words of
 * its row. */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected_s4.h"
#include "dsp.h"                     /* sum_inputs, requant_s8, requant_mm_s8 */

#define qe_fully_connected_s4 qe_fully_connected_s4_reference
#define qe_fully_connected_s4_packed qe_fully_connected_s4_packed_reference
#define qe_fully_connected_s4_mm qe_fully_connected_s4_mm_reference
#define qe_fully_connected_s4_deep qe_fully_connected_s4_deep_reference
#include "../../fully_connected_s4.c"
#undef qe_fully_connected_s4
#undef qe_fully_connected_s4_packed
#undef qe_fully_connected_s4_mm
#undef qe_fully_connected_s4_deep

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP

#define QE_S4_DSP_BLOCK 256u        /* inputs a block: 4096 |sum| < 2^31 (above) */
#define QE_S4_DSP_ROWS 64u          /* rows a chunk: their int32 accumulators on the stack */

/* x + io as int16 pairs in the lane order above, for ceil(n / 8) groups of 8: the last group's
 * lanes past the depth are 0, so the weights' bytes read beyond a row (the next row's, or a
 * zeroed word at the end) add nothing */
static void widen_s4_inputs(const int8_t *in, uint32_t n, uint32_t groups, int32_t io,
                            uint32_t *pairs)
{
    uint32_t g, k;

    for (g = 0; g < groups; ++g) {
        for (k = 0; k < 4u; ++k) {
            const uint32_t d = 8u * g + k;
            const uint32_t lo = (d < n) ? (uint16_t)(int16_t)((int32_t)in[d] + io) : 0u;
            const uint32_t hi = (d + 4u < n) ? (uint16_t)(int16_t)((int32_t)in[d + 4u] + io) : 0u;
            pairs[4u * g + k] = lo | (hi << 16);
        }
    }
}

/* (word << SH) & m as one AND with a shifted register operand (gcc would load the mask as an
 * immediate and shift apart) */
#define QE_S4_AND_LSL(SH)                                                                        \
    static inline uint32_t and_lsl##SH(uint32_t word, uint32_t m)                                \
    {                                                                                           \
        uint32_t r;                                                                             \
        __asm("and %0, %1, %2, lsl #" #SH : "=r"(r) : "r"(m), "r"(word));                       \
        return r;                                                                               \
    }
QE_S4_AND_LSL(12)
QE_S4_AND_LSL(8)
QE_S4_AND_LSL(4)

static inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);     /* LDR: unaligned words are allowed */
    return v;
}

/* acc[r] = sum_d 4096 w_r[d] (x[d] + io) over the whole groups of 8, rows w0 and w1 sharing
 * each input pair */
static inline void dot_s4_2rows(const uint8_t *w0, const uint8_t *w1, const uint32_t *pairs,
                                uint32_t groups, int32_t acc[2])
{
    const uint32_t m = 0xF000F000u;
    int32_t a0 = 0, a1 = 0;
    uint32_t g;

    for (g = 0; g < groups; ++g) {
        const uint32_t u0 = load_u32(w0 + 4u * g), u1 = load_u32(w1 + 4u * g);
        const uint32_t *x = pairs + 4u * g;
        a0 = __smlad((int16x2_t)and_lsl12(u0, m), (int16x2_t)x[0], a0);
        a1 = __smlad((int16x2_t)and_lsl12(u1, m), (int16x2_t)x[0], a1);
        a0 = __smlad((int16x2_t)and_lsl8(u0, m), (int16x2_t)x[1], a0);
        a1 = __smlad((int16x2_t)and_lsl8(u1, m), (int16x2_t)x[1], a1);
        a0 = __smlad((int16x2_t)and_lsl4(u0, m), (int16x2_t)x[2], a0);
        a1 = __smlad((int16x2_t)and_lsl4(u1, m), (int16x2_t)x[2], a1);
        a0 = __smlad((int16x2_t)(u0 & m), (int16x2_t)x[3], a0);
        a1 = __smlad((int16x2_t)(u1 & m), (int16x2_t)x[3], a1);
    }
    acc[0] = a0;
    acc[1] = a1;
}

/* one row's four lane pairs of a word of weights, for the group whose input pairs are x */
static inline int32_t dot_s4_word(uint32_t u, const uint32_t *x, int32_t acc)
{
    const uint32_t m = 0xF000F000u;
    acc = __smlad((int16x2_t)and_lsl12(u, m), (int16x2_t)x[0], acc);
    acc = __smlad((int16x2_t)and_lsl8(u, m), (int16x2_t)x[1], acc);
    acc = __smlad((int16x2_t)and_lsl4(u, m), (int16x2_t)x[2], acc);
    return __smlad((int16x2_t)(u & m), (int16x2_t)x[3], acc);
}

/* the last group's word of a row that ends the array: only its own bytes (1 to 4), zeros after */
static inline uint32_t load_u32_end(const uint8_t *p, uint32_t bytes)
{
    uint32_t v = 0;
    memcpy(&v, p, bytes);
    return v;
}

void qe_fully_connected_s4(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH uint8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t row_bytes = n / 2u, total = rows * row_bytes;
    const int32_t io = p->input_offset;
    uint32_t pairs[QE_S4_DSP_BLOCK / 2u];
    int32_t acc[QE_S4_DSP_ROWS];
    requant_t rq;
    requant_mm_t mm;
    int mode;
    uint32_t b, c, d0, o;

    if ((n & 1u) != 0u) {
        qe_fully_connected_s4_reference(p, input, weights, bias, output);
        return;
    }
    requant_init(&rq, p->output_multiplier, p->output_shift, p->output_offset,
                 p->activation_min, p->activation_max);
    /* dsp.h's SMMLAR output stage where it applies (its preconditions, its proof), else requant_s8 */
    mode = requant_mm_init(&mm, p->output_multiplier, p->output_shift, p->output_offset,
                           p->activation_min, p->activation_max);
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        const int32_t base = (p->filter_offset != 0) ? p->filter_offset * sum_inputs(in, n, io) : 0;
        for (c = 0; c < rows; c += QE_S4_DSP_ROWS) {          /* a chunk of rows */
            const uint32_t c_end = (rows - c > QE_S4_DSP_ROWS) ? c + QE_S4_DSP_ROWS : rows;
            for (o = c; o < c_end; ++o) {
                acc[o - c] = base;
            }
            for (d0 = 0; d0 < n; d0 += QE_S4_DSP_BLOCK) {     /* a block of inputs */
                const uint32_t k = (n - d0 > QE_S4_DSP_BLOCK) ? QE_S4_DSP_BLOCK : n - d0;
                const uint32_t groups = (k + 7u) / 8u;
                widen_s4_inputs(in + d0, k, groups, io, pairs);
                for (o = c; o < c_end; o += 2u) {
                    /* n even: rows start on a byte; an odd last row pairs with itself */
                    const uint8_t *w0 = weights + o * row_bytes + d0 / 2u;
                    const uint8_t *w1 = (o + 1u < rows) ? w0 + row_bytes : w0;
                    /* the groups whose 4-byte words lie inside the array for both rows */
                    const uint32_t inside = ((uint32_t)(w1 - weights) + 4u * groups <= total)
                                                ? groups : groups - 1u;
                    int32_t a[2];
                    dot_s4_2rows(w0, w1, pairs, inside, a);
                    if (inside < groups) {              /* the array's end: the last block */
                        const uint32_t last = k / 2u - 4u * inside;      /* 1..4 bytes */
                        a[0] = dot_s4_word(load_u32_end(w0 + 4u * inside, last),
                                           pairs + 4u * inside, a[0]);
                        a[1] = dot_s4_word(load_u32_end(w1 + 4u * inside, last),
                                           pairs + 4u * inside, a[1]);
                    }
                    /* exact: multiples of 4096 (see above); an odd last row's a[1] is unused */
                    acc[o - c] += a[0] >> 12;          /* gcc's >> is ASR */
                    if (o + 1u < c_end) {
                        acc[o + 1u - c] += a[1] >> 12;
                    }
                }
            }
            for (o = c; o < c_end; ++o) {
                int32_t v = acc[o - c];
                if (bias != QE_FLASH_NULL) {
                    v += bias[o];
                }
                out[o] = (mode != REQUANT_MM_NONE) ? requant_mm_s8(&mm, v, mode == REQUANT_MM_FIX)
                                                   : requant_s8(&rq, v);
            }
        }
    }
}

#else /* no DSP extension: the reference */

void qe_fully_connected_s4(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH uint8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    qe_fully_connected_s4_reference(p, input, weights, bias, output);
}

#endif

/* ------------------------------------------------------------------------ the int4 layout
 * qe_fully_connected_s4_packed: the generator's layout (fully_connected_s4.h), four rows per
 * pass. The input is widened once per batch into int16 lane pairs in SXTB16's order (per quad
 * x0|x2, x1|x3, zero-padded), the raw int8 values (the input offset is in bias'). Per half quad
 * one word W of weights holds, per lane, L = 4096 s0 + 256 u1 + 16 u2 + u3 (s0 = w'0, u_r =
 * w'_r + 8), and four SMLADs take four linear combinations of the four rows from it, three
 * masked by an AND with an immediate and one unmasked:
 *     a0 += x . (W & 0xF000F000)  = 4096 A0               (A_r = sum_d w'_r[d] x[d])
 *     a1 += x . (W & 0x0F000F00)  = 256 (A1 + 8 X)        (X = sum_d x[d], once per batch)
 *     a2 += x . (W & 0x00F000F0)  = 16 (A2 + 8 X)
 *     a3 += x . W                 = 4096 A0 + 256 (A1 + 8 X) + 16 (A2 + 8 X) + A3 + 8 X
 * With the accumulators started at (0, -2048 X, -128 X, -2184 X): a0 = 4096 A0, a1 = 256 A1,
 * a2 = 16 A2 and a3 - a0 - a1 - a2 = A3, so A0 = a0 >> 12, A1 = a1 >> 8, A2 = a2 >> 4 (ASR, exact:
 * multiples), A3 = a3 - a0 - a1 - a2, each + bias'. Exact in int32 for depth <= 128, with no
 * partial sum wrapping: |x| <= 128, |L| <= 32768, so |a3| <= 128 * 128 * 32768 + 2184 * 128 * 128
 * < 2^30, and the others are smaller. Per quad: one LDM of the two input words, one LDM of the
 * two weight words, six ANDs, eight SMLADs (16 instructions per 16 MACs; int8's layout 11, but
 * four times the flash). */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP

/* the partial last quad (n & 3 inputs) widened, zero-padded; returns their sum */
static int32_t s4_widen_tail(const int8_t *in, uint32_t k, uint32_t *xw)
{
    int32_t x[4] = {0, 0, 0, 0}, s = 0;
    uint32_t i;
    for (i = 0; i < k; ++i) {
        x[i] = in[i];
        s += in[i];
    }
    xw[0] = ((uint32_t)x[0] & 0xFFFFu) | ((uint32_t)x[2] << 16);
    xw[1] = ((uint32_t)x[1] & 0xFFFFu) | ((uint32_t)x[3] << 16);
    return s;
}

/* requant_mm_t's output stage: every whole group of four rows of one batch in one
 * hand-allocated asm function, as fully_connected.c's mm_groups_*: accumulators r2, r3, r12, lr,
 * x r0, w r1, output r11, the MAC loop's data r4-r6, r8-r10, the rest in s4_ctx_t (r7). The MAC
 * loop is QE_FC_PACKED_MAX_DEPTH / 4 S4_QUADs unrolled (64 bytes each, which the assembler
 * checks), entered at the quad the depth needs. When `in` is set the function first widens its
 * whole quads into xw, sums them (SADD16 into two lanes, + xsum, the partial quad's sum) and
 * sets the accumulators' starting values `init` (above); else xw and init are ready. */
typedef struct {
    int32_t multiplier;             /* requant_mm_t: the first three fields, for one LDM */
    int32_t round;
    uint32_t shift;
    uint32_t unused;
    uint32_t *xw;                   /* the widened input */
    uint32_t entry;                 /* 64 * quads: the unrolled MAC loop's entry, from its end */
    int8_t *out_end;                /* the end of the whole groups' outputs */
    const uint32_t *w;
    int8_t *out;
    const int8_t *in;               /* the int8 input, to widen into xw first, or NULL */
    uint32_t in_quads;              /* its whole quads */
    uint32_t target;                /* (set by the function: the entry's address, Thumb bit) */
    uint32_t xsum;                  /* the partial quad's sum, in the low 16-bit lane */
    int32_t init[4];                /* (set by the function: 0, -2048 X, -128 X, -2184 X) */
} s4_ctx_t;

#define S4_CHECK_(name, cond) typedef char s4_check_##name[(cond) ? 1 : -1]
S4_CHECK_(xw, offsetof(s4_ctx_t, xw) == 16);
S4_CHECK_(entry, offsetof(s4_ctx_t, entry) == 20);
S4_CHECK_(out_end, offsetof(s4_ctx_t, out_end) == 24);
S4_CHECK_(w, offsetof(s4_ctx_t, w) == 28);
S4_CHECK_(out, offsetof(s4_ctx_t, out) == 32);
S4_CHECK_(in, offsetof(s4_ctx_t, in) == 36);
S4_CHECK_(in_quads, offsetof(s4_ctx_t, in_quads) == 40);
S4_CHECK_(target, offsetof(s4_ctx_t, target) == 44);
S4_CHECK_(xsum, offsetof(s4_ctx_t, xsum) == 48);
S4_CHECK_(init, offsetof(s4_ctx_t, init) == 52);
S4_CHECK_(depth, QE_FC_PACKED_MAX_DEPTH == 128u);

#define S4_HALF(W, X, T0, T1)                                                                 \
    "and.w " T0 ", " W ", #0xF000F000\n\t" "smlad r2, " T0 ", " X ", r2\n\t"                  \
    "and.w " T1 ", " W ", #0x0F000F00\n\t" "smlad r3, " T1 ", " X ", r3\n\t"                  \
    "and.w " T0 ", " W ", #0x00F000F0\n\t" "smlad r12, " T0 ", " X ", r12\n\t"                \
    "smlad lr, " W ", " X ", lr\n\t"
#define S4_QUAD "ldmia.w r0!, {r9, r10}\n\t" "ldmia.w r1!, {r4, r5}\n\t"                      \
    S4_HALF("r4", "r9", "r6", "r8") S4_HALF("r5", "r10", "r8", "r6")
#define S4_Q4 S4_QUAD S4_QUAD S4_QUAD S4_QUAD
#define S4_Q32 S4_Q4 S4_Q4 S4_Q4 S4_Q4 S4_Q4 S4_Q4 S4_Q4 S4_Q4
#define S4_GROUPS(NAME, OUT)                                                              \
    __attribute__((naked, noinline)) static void NAME(s4_ctx_t *c)                       \
    {                                                                                     \
        (void)c;                                                                          \
        __asm volatile(                                                                   \
            "push {r4-r11, lr}\n\t"                                                       \
            "mov r7, r0\n\t"                                                              \
            "ldr r0, [r7, #36]\n\t"                                                       \
            "cbz r0, .L" #NAME "_ready\n\t"                                               \
            "ldr r1, [r7, #40]\n\t"                                                       \
            "ldr r4, [r7, #16]\n\t"                                                       \
            "ldr r9, [r7, #48]\n\t"                                                       \
            "cbz r1, .L" #NAME "_sum\n"                                                   \
            ".L" #NAME "_widen:\n\t"     /* 8 instructions a quad */                      \
            "ldr r5, [r0], #4\n\t"                                                        \
            "sxtb16 r6, r5\n\t"                                                           \
            "sxtb16 r8, r5, ror #8\n\t"                                                   \
            "stmia r4!, {r6, r8}\n\t"                                                     \
            "sadd16 r9, r9, r6\n\t"                                                       \
            "sadd16 r9, r9, r8\n\t"                                                       \
            "subs r1, r1, #1\n\t"                                                         \
            "bne .L" #NAME "_widen\n"                                                     \
            ".L" #NAME "_sum:\n\t"       /* X, then init = 0, -2048 X, -128 X, -2184 X */  \
            "sxth r10, r9\n\t"                                                            \
            "add r9, r10, r9, asr #16\n\t"                                                \
            "movs r4, #0\n\t"                                                             \
            "rsb r10, r9, #0\n\t"                                                         \
            "lsl r5, r10, #11\n\t"                                                        \
            "lsl r6, r10, #7\n\t"                                                         \
            "movw r8, #2184\n\t"                                                          \
            "mul r8, r10, r8\n\t"                                                         \
            "add r11, r7, #52\n\t"                                                        \
            "stm r11, {r4, r5, r6, r8}\n"                                                 \
            ".L" #NAME "_ready:\n\t"                                                      \
            "add r4, r7, #52\n\t"      /* init on the stack: one LDM a group */          \
            "ldm r4, {r2, r3, r5, r6}\n\t"                                               \
            "sub sp, sp, #16\n\t"                                                        \
            "stm sp, {r2, r3, r5, r6}\n\t"                                               \
            "adr.w r4, .L" #NAME "_end\n\t"                                               \
            "ldr r5, [r7, #20]\n\t"                                                       \
            "sub r4, r4, r5\n\t"                                                          \
            "orr r4, r4, #1\n\t"                                                          \
            "str r4, [r7, #44]\n\t"                                                       \
            "ldr r1, [r7, #28]\n\t"                                                       \
            "ldr r11, [r7, #32]\n"                                                        \
            ".L" #NAME "_group:\n\t"                                                      \
            "ldm sp, {r2, r3, r12, lr}\n\t"                                               \
            "ldr r0, [r7, #16]\n\t"                                                       \
            "ldr pc, [r7, #44]\n"                                                         \
            ".L" #NAME "_start:\n\t"                                                      \
            S4_Q32                                                                        \
            "\n.L" #NAME "_end:\n\t"                                                      \
            ".if (.L" #NAME "_end - .L" #NAME "_start) - 64 * 32\n\t"                     \
            ".error \"an S4_QUAD is not 64 bytes\"\n\t"                                   \
            ".endif\n\t"                                                                  \
            "ldmia r1!, {r5, r6, r8, r9}\n\t"  /* the group's bias' */                      \
            "sub lr, lr, r2\n\t"                                                          \
            "sub lr, lr, r3\n\t"                                                          \
            "sub lr, lr, r12\n\t"                                                         \
            "add lr, lr, r9\n\t"                                                          \
            "add r2, r5, r2, asr #12\n\t"                                                 \
            "add r3, r6, r3, asr #8\n\t"                                                  \
            "add r12, r8, r12, asr #4\n\t"                                                \
            "ldm r7, {r4, r5, r6}\n\t"                                                    \
            OUT("r2") OUT("r3") OUT("r12") OUT("lr")                                      \
            "ldr r4, [r7, #24]\n\t"                                                       \
            "cmp r11, r4\n\t"                                                             \
            "bne .L" #NAME "_group\n\t"                                                   \
            "str r1, [r7, #28]\n\t"      /* w: where a next call (a padded group) goes on */ \
            "add sp, sp, #16\n\t"                                                        \
            "pop {r4-r11, pc}\n\t");                                                      \
    }

/* The output stage for left shifts L = shift >= 0 with a normalized multiplier m and the full
 * int8 range (int4 weights' scales are ~16 times int8's, so a first layer's multiplier is often
 * >= 0.5): TFLM's MultiplyByQuantizedMultiplier is then SaturatingRoundingDoublingHighMul(x, m)
 * of x = acc * 2^L (wrapping, as TFLM's int32 product), no rounding divide. That is
 * floor((x m + 2^30) / 2^31) for either sign (TFLM's nudge 1 - 2^30 for negative products with
 * C's truncating division gives the same floor), which SMMULR of 2x and m computes: (2 x m +
 * 2^31) >> 32. QADD(x, x) is 2x unless |x| >= 2^30, where it saturates keeping the sign; then
 * |x m / 2^31| >= 2^29 (m >= 2^30) and the output saturates to the same int8 bound either way.
 * Then + offset (|value| < 2^30: no overflow) and SSAT #8. Constants: r4 = m, r5 = offset,
 * r6 = L (s4_ctx_t's multiplier, round and shift fields). 6 instructions per output. */
#define S4_LEFT_ASM(A)                                                                        \
    "lsl " A ", " A ", r6\n\t" "qadd " A ", " A ", " A "\n\t"                            \
    "smmulr " A ", " A ", r4\n\t" "add " A ", " A ", r5\n\t" "ssat " A ", #8, " A "\n\t"   \
    "strb " A ", [r11], #1\n\t"

S4_GROUPS(s4_groups_fix, REQUANT_MM_FIX_ASM)
S4_GROUPS(s4_groups_nofix, REQUANT_MM_NOFIX_ASM)
S4_GROUPS(s4_groups_left, S4_LEFT_ASM)

/* the same arithmetic in C with the general output stage (requant_s8), for the layers whose
 * output stage is not requant_mm_t's */
__attribute__((noinline)) static void s4_packed_other(const qe_fc_s8_packed_params_t *p,
                                                      const int8_t *input,
                                                      const QE_FLASH uint32_t *stream,
                                                      int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth, quads = p->padded_depth / 4u;
    uint32_t xw[QE_FC_PACKED_MAX_DEPTH / 2u];
    requant_t rq;
    uint32_t b, o, q, r;

    requant_init(&rq, p->output_multiplier, p->output_shift, p->output_offset,
                 p->activation_min, p->activation_max);
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        const uint32_t *w = stream;
        int32_t x_sum = (n & 3u) ? s4_widen_tail(in + (n & ~3u), n & 3u, xw + 2u * (n / 4u)) : 0;
        for (q = 0; q < n / 4u; ++q) {
            const uint32_t v = load_s8x4(in + 4u * q);
            xw[2u * q] = (uint32_t)__sxtb16(v);
            xw[2u * q + 1u] = (uint32_t)sxtb16_ror8(v);
            x_sum += (int32_t)in[4u * q] + in[4u * q + 1u] + in[4u * q + 2u] + in[4u * q + 3u];
        }
        for (o = 0; o < rows; o += QE_FC_PACKED_ROWS) {
            int32_t a0 = 0, a1 = -2048 * x_sum, a2 = -128 * x_sum, a3 = -2184 * x_sum;
            int32_t acc[4];
            for (q = 0; q < quads; ++q) {
                const uint32_t w0 = w[0], w1 = w[1];
                const int16x2_t x02 = (int16x2_t)xw[2u * q], x13 = (int16x2_t)xw[2u * q + 1u];
                w += 2;
                a0 = __smlad((int16x2_t)(w0 & 0xF000F000u), x02, a0);
                a1 = __smlad((int16x2_t)(w0 & 0x0F000F00u), x02, a1);
                a2 = __smlad((int16x2_t)(w0 & 0x00F000F0u), x02, a2);
                a3 = __smlad((int16x2_t)w0, x02, a3);
                a0 = __smlad((int16x2_t)(w1 & 0xF000F000u), x13, a0);
                a1 = __smlad((int16x2_t)(w1 & 0x0F000F00u), x13, a1);
                a2 = __smlad((int16x2_t)(w1 & 0x00F000F0u), x13, a2);
                a3 = __smlad((int16x2_t)w1, x13, a3);
            }
            acc[3] = a3 - a0 - a1 - a2;   /* w: the group's bias' */
            acc[0] = a0 >> 12;          /* exact: multiples (see above); gcc's >> is ASR */
            acc[1] = a1 >> 8;
            acc[2] = a2 >> 4;
            for (r = 0; r < QE_FC_PACKED_ROWS && o + r < rows; ++r) {
                out[o + r] = requant_s8(&rq, (int32_t)w[r] + acc[r]);
            }
            w += QE_FC_PACKED_ROWS;
        }
    }
}

void qe_fully_connected_s4_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH uint32_t *stream, int8_t *output)
{
    requant_mm_t mm;
    const int mode = requant_mm_init(&mm, p->output_multiplier, p->output_shift,
                                     p->output_offset, p->activation_min, p->activation_max);

    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t whole = rows & ~(QE_FC_PACKED_ROWS - 1u);
    void (*groups)(s4_ctx_t *);
    uint32_t xw[QE_FC_PACKED_MAX_DEPTH / 2u];
    int8_t tail[QE_FC_PACKED_ROWS];
    s4_ctx_t c;
    uint32_t b, r;

    if (mode != REQUANT_MM_NONE) {
        groups = (mode == REQUANT_MM_FIX) ? s4_groups_fix : s4_groups_nofix;
        c.multiplier = mm.multiplier;
        c.round = mm.round;
        c.shift = mm.shift;
    } else if (p->output_shift >= 0 && p->output_shift <= 30 && p->output_multiplier >= (1 << 30)
               && p->activation_min == -128 && p->activation_max == 127) {
        groups = s4_groups_left;        /* S4_LEFT_ASM */
        c.multiplier = p->output_multiplier;
        c.round = p->output_offset;
        c.shift = (uint32_t)p->output_shift;
    } else {
        s4_packed_other(p, input, stream, output);
        return;
    }
    c.xw = xw;
    c.entry = 64u * (p->padded_depth / 4u);
    c.in_quads = n / 4u;
    for (b = 0; b < p->batches; ++b) {
        int8_t *out = output + b * rows;
        c.in = input + b * n;
        c.xsum = (n & 3u) ? (uint16_t)(int16_t)s4_widen_tail(c.in + (n & ~3u), n & 3u,
                                                               xw + 2u * (n / 4u))
                          : 0u;
        c.w = stream;
        if (whole > 0u) {
            c.out = out;
            c.out_end = out + whole;
            groups(&c);
            c.in = (const int8_t *)0;   /* widened, init set */
        }
        if (whole < rows) {             /* a padded last group (a 1-3 row head), into scratch */
            c.out = tail;
            c.out_end = tail + QE_FC_PACKED_ROWS;
            groups(&c);
            for (r = 0; whole + r < rows; ++r) {
                out[whole + r] = tail[r];
            }
        }
    }
}

/* ------------------------------------------------------------------------ the s4 mm stream
 * qe_fully_connected_s4_mm (fully_connected_s4.h: the int4 layout with each group's head, the
 * accumulators' starting values, in front of its words; one batch, depth a multiple of 4): the
 * whole op in one hand-allocated asm function, as fully_connected.c's qe_fully_connected_s8_mm
 * (issue 39: the C set-up, the per-group reloads and the older output stage were a third of
 * CartPole int8x4's instructions). Registers in the MAC loop: the stream r1, the input r0,
 * accumulators r2, r3, r12, lr, weight words r4-r6, r8, input words r7, r9-r11 (S4P_PAIR).
 *  - The input widened 16 values per LDM + 8 SXTB16 + STM, their sum X by 8 SADD16 (lanes hold
 *    at most 64 values: no overflow), 4 at a time after, into the frame's last q quads before
 *    the constants, so that the MAC loop, which reads it from its start, ends with r0 at them.
 *  - Per group: STR of the output pointer (r11 holds an input word in the loop), LDM of its head
 *    into the accumulators (with the stream), LDM {r0, pc} of the input's start and the unrolled
 *    MAC loop's entry (S4P_PAIR: 30 instructions per 32 MACs), three SUBs (the nested masks'
 *    sums into the int4 layout's: a3 - a2, a2 - a1, a1 - a0), LDM from r0 of m, round, 16 X,
 *    the end, L, the output pointer and, into pc, the output block, whose four shifts make the
 *    doubled accumulators (ASR #11 of a0, RSB of 16 X from a1 ASR #7, a2 ASR #3 and from 2 a3:
 *    fully_connected_s4.h); then right shifts as the int8 mm stream's (SMMLAR, SSAT with ASR #e,
 *    STRB; + the sign fix's ADD), one block per e; left shifts L <= 3 with 2^L in the four
 *    shifts, SMMLAR with the offset as its addend (offset + SMMULR(2 acc 2^L, m), S4_LEFT_ASM's
 *    value), SSAT, STRB, one block per L; L > 3 the same after an LSL by L. Then CMP + BNE.
 *    25 instructions a group besides its MAC loop (29 with the sign fix).
 * Frame: [sp] the input's start, [sp + 4] the MAC loop's entry; [sp + 32] the stream on entry,
 * then the real output of a padded last group, [sp + 36] its rows; [sp + 44] 32 quads of
 * widened input, the op's q last up to [sp + 300]; [sp + 300] m, round, 16 X, the end of the
 * current run of groups' outputs, L, the output pointer, the output block; [sp + 328] the padded
 * group's four outputs. */
#define S4MM_NOFIX(A)                                                                         \
    "smmlar " A ", " A ", r4, r5\n\t" "ssat " A ", #8, " A ", asr #\\e\n\t"                   \
    "strb.w " A ", [r11], #1\n\t"
#define S4MM_FIX(A)                                                                           \
    "add.w r10, r5, " A ", asr #31\n\t"                                                       \
    "smmlar " A ", " A ", r4, r10\n\t" "ssat " A ", #8, " A ", asr #\\e\n\t"                  \
    "strb.w " A ", [r11], #1\n\t"
#define S4MM_LEFT(A)                                                                          \
    "lsl.w " A ", " A ", r9\n\t" "smmlar " A ", " A ", r4, r5\n\t" "ssat " A ", #8, " A "\n\t" \
    "strb.w " A ", [r11], #1\n\t"
/* left shifts L = 0..3: 2^L folded into the four shifts (r6 is then 16 X 2^L: exact, the
 * accumulators being multiples of 2^12, 2^8, 2^4), so an output is SMMLAR, SSAT, STRB */
#define S4MM_LEFTL(A)                                                                         \
    "smmlar " A ", " A ", r4, r5\n\t" "ssat " A ", #8, " A "\n\t" "strb.w " A ", [r11], #1\n\t"
#define S4MM_SHIFTS                                                                           \
    "asr.w r2, r2, #11\n\t" "rsb.w r3, r6, r3, asr #7\n\t" "rsb.w r12, r6, r12, asr #3\n\t"     \
    "rsb.w lr, r6, lr, lsl #1\n\t"
#define S4MM_BLOCKS(X, OUT, BYTES)                                                            \
    ".L" X ":\n\t"                                                                            \
    ".irp e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21\n\t"    \
    S4MM_SHIFTS                                                                               \
    OUT("r2") OUT("r3") OUT("r12") OUT("lr")                                                  \
    "cmp.w r11, r8\n\t"                                                                       \
    "bne.w .Ls4mm_group\n\t"                                                                  \
    "b.w .Ls4mm_done\n\t"                                                                     \
    ".endr\n"                                                                                 \
    ".L" X "_after:\n\t"                                                                      \
    ".if (.L" X "_after - .L" X ") - 21 * " BYTES "\n\t"                                      \
    ".error \"an output block is not " BYTES " bytes\"\n\t"                                   \
    ".endif\n\t"

/* The MAC loop of the s4 mm stream: per pair of quads one LDM of four weight words and one LDM of
 * the four widened input words (r0 walks the input from the start of its quads: one LDR a group
 * resets it), per word S4P_HALF: 4 SMLADs and 3 BICs, no temporary. Per word W and input word X
 * the unmasked word first, then W is cleared in place from the bottom nibble up, so the four
 * accumulators take the lane sums of nested masks:
 *     lr  += X . W                           = 4096 A0 + 256 (A1 + 8 X) + 16 (A2 + 8 X) + A3 + 8 X
 *     r12 += X . (W & 0xFFF0FFF0)            = 4096 A0 + 256 (A1 + 8 X) + 16 (A2 + 8 X)
 *     r3  += X . (W & 0xFF00FF00)            = 4096 A0 + 256 (A1 + 8 X)
 *     r2  += X . (W & 0xF000F000)            = 4096 A0
 * (clearing a lane's low bits leaves its int16 value the sum of the kept fields, the top nibble
 * still two's complement), and three SUBs after the loop (lr - r12, r12 - r3, r3 - r2, in that
 * order) leave exactly the four scaled rows that the int4 layout's masks gave. 30 instructions
 * per 32 MACs (the masks into a temporary with two LDRDs of the input: 31; S4_QUAD: 32); the
 * four input words take r7, r9, r10, r11, so the frame is read through sp and the output
 * pointer is kept in the frame across the MAC loop (one STR a group, and the LDM of the
 * constants after the loop reloads it). Even quad counts enter the 16 pairs, odd ones the 15
 * pairs followed by one quad. */
#define S4P_HALF(W, X)                                                                        \
    "smlad lr, " W ", " X ", lr\n\t"     "bic.w " W ", " W ", #0x000F000F\n\t"              \
    "smlad r12, " W ", " X ", r12\n\t"   "bic.w " W ", " W ", #0x00F000F0\n\t"              \
    "smlad r3, " W ", " X ", r3\n\t"     "bic.w " W ", " W ", #0x0F000F00\n\t"              \
    "smlad r2, " W ", " X ", r2\n\t"
#define S4P_PAIR                                                                              \
    "ldmia.w r1!, {r4, r5, r6, r8}\n\t" "ldmia.w r0!, {r7, r9, r10, r11}\n\t"                \
    S4P_HALF("r4", "r7") S4P_HALF("r5", "r9") S4P_HALF("r6", "r10") S4P_HALF("r8", "r11")
#define S4P_POST                                                                              \
    "sub.w lr, lr, r12\n\t" "sub.w r12, r12, r3\n\t" "sub.w r3, r3, r2\n\t"                  \
    "ldm.w r0, {r4, r5, r6, r8, r9, r11, pc}\n"

typedef char s4mm_check_mode[(offsetof(qe_fc_s4_mm_params_t, mode) == 12) ? 1 : -1];
typedef char s4mm_check_rows[(offsetof(qe_fc_s4_mm_params_t, output_depth) == 20) ? 1 : -1];
typedef char s4mm_check_depth[(offsetof(qe_fc_s4_mm_params_t, accum_depth) == 24) ? 1 : -1];
typedef char s4mm_check_block[(offsetof(qe_fc_s4_mm_params_t, block) == 36) ? 1 : -1];
typedef char s4mm_check_xshift[(offsetof(qe_fc_s4_mm_params_t, xshift) == 40) ? 1 : -1];

__attribute__((naked)) void qe_fully_connected_s4_mm(const qe_fc_s4_mm_params_t *p,
                                                     const int8_t *input,
                                                     const QE_FLASH uint32_t *stream,
                                                     int8_t *output)
{
    (void)p;
    (void)input;
    (void)stream;
    (void)output;
    __asm volatile(
        "push {r4-r11, lr}\n\t"
        "sub sp, sp, #336\n\t"
        "mov r7, r0\n\t"
        "mov r11, r3\n\t"
        "str r2, [sp, #32]\n\t"
        "ldr r12, [r7, #24]\n\t"        /* the depth, a multiple of 4 */
        "add r0, sp, #300\n\t"         /* x: the frame's last q quads, up to the constants */
        "sub r0, r0, r12, lsl #1\n\t"
        "str r0, [sp]\n\t"             /* where the MAC loop's input starts */
        "mov.w lr, #0\n\t"
        "subs r12, r12, #16\n\t"
        "blo .Ls4mm_rest\n"
        ".Ls4mm_blk:\n\t"               /* 16 inputs: x0|x2, x1|x3 per word */
        "ldmia r1!, {r2, r4, r6, r9}\n\t"
        "sxtb16 r3, r2, ror #8\n\t"
        "sxtb16 r2, r2\n\t"
        "sxtb16 r5, r4, ror #8\n\t"
        "sxtb16 r4, r4\n\t"
        "sxtb16 r8, r6, ror #8\n\t"
        "sxtb16 r6, r6\n\t"
        "sxtb16 r10, r9, ror #8\n\t"
        "sxtb16 r9, r9\n\t"
        "stmia r0!, {r2, r3, r4, r5, r6, r8, r9, r10}\n\t"
        "sadd16 r2, r2, r3\n\t"
        "sadd16 r4, r4, r5\n\t"
        "sadd16 r6, r6, r8\n\t"
        "sadd16 r9, r9, r10\n\t"
        "sadd16 r2, r2, r4\n\t"
        "sadd16 r6, r6, r9\n\t"
        "sadd16 lr, lr, r2\n\t"
        "sadd16 lr, lr, r6\n\t"
        "subs r12, r12, #16\n\t"
        "bhs .Ls4mm_blk\n"
        ".Ls4mm_rest:\n\t"
        "adds r12, r12, #16\n\t"
        "beq .Ls4mm_widened\n"
        ".Ls4mm_quad:\n\t"
        "ldr r2, [r1], #4\n\t"
        "sxtb16 r3, r2, ror #8\n\t"
        "sxtb16 r2, r2\n\t"
        "stmia r0!, {r2, r3}\n\t"
        "sadd16 lr, lr, r2\n\t"
        "sadd16 lr, lr, r3\n\t"
        "subs r12, r12, #4\n\t"
        "bne .Ls4mm_quad\n"
        ".Ls4mm_widened:\n\t"
        "sxth r6, lr\n\t"
        "add r6, r6, lr, asr #16\n\t"   /* X */
        "ldr r1, [sp, #32]\n\t"         /* the stream */
        "ldm r7, {r4, r5, r8, r9, r10, r12}\n\t"  /* m, round, shift, mode, entry, rows */
        "and r3, r12, #3\n\t"
        "str r3, [sp, #36]\n\t"         /* the padded last group's rows */
        "bic r12, r12, #3\n\t"
        "add lr, r11, r12\n\t"          /* the whole groups' output end */
        "ldrd r0, r2, [r7, #36]\n\t"    /* block, xshift: the generator's */
        "lsl r6, r6, r2\n\t"            /* 16 X (2^L for the blocks of L <= 3) */
        "adr.w r3, .Ls4mm_oend\n\t"
        "sub r10, r3, r10\n\t"
        "orr r10, r10, #1\n\t"          /* the MAC loop's entry, Thumb bit */
        "add r0, r3, r0\n\t"
        "orr r0, r0, #1\n\t"            /* the output block */
        "mov r9, r8\n\t"                /* L (the right blocks do not read it) */
        "mov r8, lr\n\t"
        "mov lr, r0\n\t"
        "add r2, sp, #300\n\t"         /* the constants, after the input: the MAC loop ends */
        "stmia r2, {r4, r5, r6, r8, r9, r11, lr}\n\t"   /* with r0 pointing at them */
        "str r10, [sp, #4]\n\t"        /* the MAC loop's entry after its input's start */
        "cmp r8, r11\n\t"
        "beq.w .Ls4mm_done\n"
        ".Ls4mm_group:\n\t"
        "str r11, [sp, #320]\n\t"      /* the output pointer: r11 is an input word in the loop */
        "ldmia r1!, {r2, r3, r12, lr}\n\t"    /* the head */
        "ldm sp, {r0, pc}\n"            /* the input's start, the MAC loop's entry */
        ".Ls4mm_start:\n\t"
        ".irp j, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15\n\t"
        S4P_PAIR
        ".endr\n"
        ".Ls4mm_end:\n\t"
        ".if (.Ls4mm_end - .Ls4mm_start) - 120 * 16\n\t"
        ".error \"an S4P_PAIR is not 120 bytes\"\n\t"
        ".endif\n\t"
        S4P_POST
        ".irp j, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14\n\t"
        S4P_PAIR
        ".endr\n\t"
        "ldmia.w r1!, {r4, r5}\n\t"    /* the odd quad, the input's last */
        "ldmia.w r0!, {r7, r9}\n\t"
        S4P_HALF("r4", "r7") S4P_HALF("r5", "r9")
        "\n.Ls4mm_oend:\n\t"
        ".if (.Ls4mm_oend - .Ls4mm_end) - 1880\n\t"
        ".error \"the odd loop is not where the generator's ODD_END says\"\n\t"
        ".endif\n\t"
        S4P_POST
        ".Ls4mm_leftl:\n\t"
        ".if (.Ls4mm_leftl - .Ls4mm_end) - 1896\n\t"
        ".error \"leftl is not where the generator's BLOCKS say\"\n\t"
        ".endif\n\t"
        ".irp L, 0, 1, 2, 3\n\t"
        "asr.w r2, r2, #(11 - \\L)\n\t"
        "rsb.w r3, r6, r3, asr #(7 - \\L)\n\t"
        ".if \\L - 3\n\t"
        "rsb.w r12, r6, r12, asr #(3 - \\L)\n\t"
        ".else\n\t"
        "rsb.w r12, r6, r12\n\t"
        ".endif\n\t"
        "rsb.w lr, r6, lr, lsl #(1 + \\L)\n\t"
        S4MM_LEFTL("r2") S4MM_LEFTL("r3") S4MM_LEFTL("r12") S4MM_LEFTL("lr")
        "cmp.w r11, r8\n\t"
        "bne.w .Ls4mm_group\n\t"
        "b.w .Ls4mm_done\n\t"
        ".endr\n"
        ".Ls4mm_left:\n\t"
        ".if (.Ls4mm_left - .Ls4mm_leftl) - 4 * 76\n\t"
        ".error \"a left output block is not 76 bytes\"\n\t"
        ".endif\n\t"
        S4MM_SHIFTS
        S4MM_LEFT("r2") S4MM_LEFT("r3") S4MM_LEFT("r12") S4MM_LEFT("lr")
        "cmp.w r11, r8\n\t"
        "bne.w .Ls4mm_group\n\t"
        "b.w .Ls4mm_done\n\t"
        S4MM_BLOCKS("s4mm_nofix", S4MM_NOFIX, "76")
        S4MM_BLOCKS("s4mm_fix", S4MM_FIX, "92")
        ".if (.Ls4mm_nofix - .Ls4mm_end) - 2292\n\t"
        ".error \"nofix is not where the generator's BLOCKS say\"\n\t"
        ".endif\n\t"
        ".if (.Ls4mm_fix - .Ls4mm_end) - 3888\n\t"
        ".error \"fix is not where the generator's BLOCKS say\"\n\t"
        ".endif\n\t"
        ".if (.Ls4mm_left - .Ls4mm_end) - 2200\n\t"
        ".error \"left is not where the generator's BLOCKS say\"\n\t"
        ".endif\n\t"
        ".Ls4mm_done:\n\t"
        "ldr r4, [sp, #36]\n\t"         /* the rows of a padded last group */
        "cmp r4, #0\n\t"
        "bne .Ls4mm_tail\n\t"
        "add sp, sp, #336\n\t"
        "pop {r4-r11, pc}\n"
        ".Ls4mm_tail:\n\t"
        "add r5, sp, #332\n\t"
        "cmp r11, r5\n\t"
        "beq .Ls4mm_copy\n\t"
        "str r11, [sp, #32]\n\t"        /* the padded group into the scratch group */
        "sub r11, r5, #4\n\t"
        "str r5, [sp, #312]\n\t"       /* the end */
        "b .Ls4mm_group\n"
        ".Ls4mm_copy:\n\t"              /* its real rows to the output */
        "ldr r6, [sp, #32]\n\t"
        "sub r5, r5, #4\n"
        ".Ls4mm_cp:\n\t"
        "ldrb r8, [r5], #1\n\t"
        "strb r8, [r6], #1\n\t"
        "subs r4, r4, #1\n\t"
        "bne .Ls4mm_cp\n\t"
        "add sp, sp, #336\n\t"
        "pop {r4-r11, pc}\n\t");
}

/* ------------------------------------------------------------ the int4 layout deeper than 128
 * (issue 39: MinAtar's FC 1,024 -> 128). Why the layout's kernels above stop at 128: the
 * widened input's stack buffer (QE_FC_PACKED_MAX_DEPTH / 2 words), the unrolled MAC loops' 32
 * quads entered by a computed jump, and the accumulators' scaling: over the whole depth, row
 * 0's 4096 A0 and the others' scaled sums no longer fit int32 for every int8 input. So the
 * generator gives deeper layers the same layout with the depth padded to a multiple of 8 (whole
 * pairs of quads), and this kernel cuts it into blocks of at most 128 inputs: per block and
 * group one call of s4_deep_block, the s4 mm stream's MAC loop (S4P_PAIR: the nested masks, 30
 * instructions per 32 MACs) from accumulators at 0, whose per-block sums are exact in int32 for
 * every int8 input and int4 weight (|x| <= 128, 128 inputs: 4096 |A0| <= 2^29, 256 |A1 + 8 X|
 * <= 256 * 15 * 2^14 < 2^26, the running sums' differences exact mod 2^32), turned into the
 * rows' sums (three SUBs, ASR #12, #8, #4) and added into one int32 accumulator per row
 * (qe_fully_connected_s4_deep: the header's own entry for these layers). After
 * the last block the group's bias' and -8 X (rows 1..3: their nibbles are offset binary, w' +
 * 8) are added, then the output stage, once. The accumulators add modulo 2^32 (uint32_t): the
 * result is the reference's int32 accumulator exactly, whatever the partial sums. Rows in
 * chunks of QE_S4_DEEP_ROWS (their accumulators on the stack, 512 B; the block's widened input
 * 256 B), each block widened once per chunk (MinAtar's 128 rows: once). */
#define QE_S4_DEEP_ROWS 128u

/* one block of one group: acc[0..3] += the four rows' sums over `pairs` pairs of quads (1..16)
 * of weights w and widened input x (r0 = x, r1 = w: S4P_PAIR's registers) */
__attribute__((naked, noinline)) static void s4_deep_block(const uint32_t *x, const uint32_t *w,
                                                           uint32_t pairs, uint32_t *acc)
{
    (void)x;
    (void)w;
    (void)pairs;
    (void)acc;
    __asm volatile(
        "push {r3-r11, lr}\n\t"         /* acc at [sp] */
        "lsl r4, r2, #7\n\t"            /* the entry: 120 bytes a pair back from the end */
        "sub r4, r4, r2, lsl #3\n\t"
        "adr.w r5, .Ls4deep_end\n\t"
        "sub r4, r5, r4\n\t"
        "orr r4, r4, #1\n\t"
        "movs r2, #0\n\t"
        "movs r3, #0\n\t"
        "mov.w r12, #0\n\t"
        "mov.w lr, #0\n\t"
        "bx r4\n\t"
        ".Ls4deep_start:\n\t"
        ".irp j, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15\n\t"
        S4P_PAIR
        ".endr\n"
        ".Ls4deep_end:\n\t"
        ".if (.Ls4deep_end - .Ls4deep_start) - 120 * 16\n\t"
        ".error \"an S4P_PAIR is not 120 bytes\"\n\t"
        ".endif\n\t"
        "sub.w lr, lr, r12\n\t"          /* the nested masks' sums into the rows' (above) */
        "sub.w r12, r12, r3\n\t"
        "sub.w r3, r3, r2\n\t"
        "ldr r0, [sp]\n\t"
        "ldm r0, {r4, r5, r6, r7}\n\t"
        "add.w r4, r4, r2, asr #12\n\t"   /* exact: multiples of 4096, 256, 16 */
        "add.w r5, r5, r3, asr #8\n\t"
        "add.w r6, r6, r12, asr #4\n\t"
        "add.w r7, r7, lr\n\t"
        "stm r0, {r4, r5, r6, r7}\n\t"
        "pop {r3-r11, pc}\n\t");
}

/* the block's inputs in[0..k) widened in SXTB16's order (x0|x2, x1|x3 a quad), zeros to 8 *
 * pairs (2 * pairs quads); returns their sum */
static int32_t s4_deep_widen(const int8_t *in, uint32_t k, uint32_t pairs, uint32_t *xw)
{
    const uint32_t quads = k / 4u;
    int32_t x_sum = 0;
    uint32_t q;

    for (q = 0; q < quads; ++q) {
        const uint32_t v = load_s8x4(in + 4u * q);
        const uint32_t a = (uint32_t)__sxtb16(v), b = (uint32_t)sxtb16_ror8(v);
        xw[2u * q] = a;
        xw[2u * q + 1u] = b;
        x_sum = __smlad((int16x2_t)a, (int16x2_t)0x00010001u, x_sum);   /* both lanes */
        x_sum = __smlad((int16x2_t)b, (int16x2_t)0x00010001u, x_sum);
    }
    if (k & 3u) {
        x_sum += s4_widen_tail(in + 4u * quads, k & 3u, xw + 2u * quads);
        ++q;
    }
    for (; q < 2u * pairs; ++q) {           /* two quads a pair */
        xw[2u * q] = 0u;
        xw[2u * q + 1u] = 0u;
    }
    return x_sum;
}

void qe_fully_connected_s4_deep(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                const QE_FLASH uint32_t *stream, int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t weight_words = (uint32_t)p->padded_depth / 2u;
    const uint32_t group_words = weight_words + QE_FC_PACKED_ROWS;
    uint32_t xw[QE_FC_PACKED_MAX_DEPTH / 2u];
    uint32_t acc[QE_S4_DEEP_ROWS];
    requant_t rq;
    requant_mm_t mm;
    int mode;
    uint32_t b, c, d0, o;

    requant_init(&rq, p->output_multiplier, p->output_shift, p->output_offset,
                 p->activation_min, p->activation_max);
    mode = requant_mm_init(&mm, p->output_multiplier, p->output_shift, p->output_offset,
                           p->activation_min, p->activation_max);
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        for (c = 0; c < rows; c += QE_S4_DEEP_ROWS) {      /* a chunk of whole groups */
            const uint32_t c_end = (rows - c > QE_S4_DEEP_ROWS) ? c + QE_S4_DEEP_ROWS : rows;
            const uint32_t groups = (c_end - c + QE_FC_PACKED_ROWS - 1u) / QE_FC_PACKED_ROWS;
            const uint32_t *const first = stream + (c / QE_FC_PACKED_ROWS) * group_words;
            int32_t x_sum = 0;
            uint32_t g;
            for (o = 0; o < QE_FC_PACKED_ROWS * groups; ++o) {
                acc[o] = 0u;
            }
            for (d0 = 0; d0 < n; d0 += QE_FC_PACKED_MAX_DEPTH) {   /* a block of inputs */
                const uint32_t k = (n - d0 > QE_FC_PACKED_MAX_DEPTH) ? QE_FC_PACKED_MAX_DEPTH
                                                                     : n - d0;
                const uint32_t pairs = (k + 7u) / 8u;
                x_sum += s4_deep_widen(in + d0, k, pairs, xw);
                for (g = 0; g < groups; ++g) {
                    s4_deep_block(xw, first + g * group_words + d0 / 2u, pairs,
                                  acc + QE_FC_PACKED_ROWS * g);
                }
            }
            for (o = c; o < c_end; ++o) {
                const uint32_t r = o % QE_FC_PACKED_ROWS;
                const uint32_t *const group = first + ((o - c) / QE_FC_PACKED_ROWS) * group_words;
                /* + bias'; rows 1..3 less 8 X (offset binary); mod 2^32, hence exact */
                const uint32_t v = acc[o - c] + group[weight_words + r]
                                   - ((r != 0u) ? 8u * (uint32_t)x_sum : 0u);
                out[o] = (mode != REQUANT_MM_NONE)
                             ? requant_mm_s8(&mm, (int32_t)v, mode == REQUANT_MM_FIX)
                             : requant_s8(&rq, (int32_t)v);
            }
        }
    }
}

#else /* no DSP extension (the host): the portable definition */

void qe_fully_connected_s4_mm(const qe_fc_s4_mm_params_t *p, const int8_t *input,
                              const QE_FLASH uint32_t *stream, int8_t *output)
{
    qe_fully_connected_s4_mm_reference(p, input, stream, output);
}

void qe_fully_connected_s4_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH uint32_t *stream, int8_t *output)
{
    qe_fully_connected_s4_packed_reference(p, input, stream, output);
}

void qe_fully_connected_s4_deep(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                const QE_FLASH uint32_t *stream, int8_t *output)
{
    qe_fully_connected_s4_deep_reference(p, input, stream, output);
}

#endif /* __ARM_FEATURE_DSP */
