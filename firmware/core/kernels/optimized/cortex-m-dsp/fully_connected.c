/* FULLY_CONNECTED, optimized variant "cortex-m-dsp" (see ../README.md): the int8 kernels
 * qe_fully_connected_s8 (per tensor), qe_fully_connected_s8_pc (per channel) and
 * qe_fully_connected_s8_acc_f32 (int8-acc's accumulator head), with exactly the reference's
 * results (../../fully_connected.c), computed with fewer instructions; and
 * qe_fully_connected_s8_packed, the generator's packed layout for per-tensor int8 FCs (four rows
 * per pass, LDM + SMLAD only: see "the packed layout" below). On the original layout:
 *
 *  - Two output rows per pass over the input: each input value is loaded, sign-extended and
 *    offset once for both rows.
 *  - The weights' zero point leaves the inner loop: sum_d (w + fo)(x + io) is
 *    sum_d w (x + io) + fo * sum_d (x + io), and the second sum is one number per batch.
 *  - With the DSP extension (__ARM_FEATURE_DSP: Cortex-M4, M7, M33, M55, ...) four int8 at a
 *    time: one 32-bit load (any alignment: LDR allows it on these cores), SXTAB16 sign-extends
 *    bytes 0 and 2 (or, rotated, 1 and 3) into two 16-bit lanes and adds the input offset in the
 *    same instruction, SXTB16 does the weights, SMLAD multiplies both lane pairs and adds them to
 *    the accumulator: 15 instructions per 8 multiply-accumulates instead of ~7 per one. Without
 *    it (the host, Cortex-M0/M3) the same loop structure one value at a time in portable C.
 *
 * Why the integers are the reference's, bit for bit: for int8 zero points, x + io and the
 * weights fit a 16-bit lane; SMLAD's products are exact and it adds in 32 bits, wrapping like
 * the reference's int32 sum would; and the generator admits only shapes whose worst-case sum of
 * |terms| fits int32, so no partial sum overflows in any order: regrouping the additions (the
 * lanes, fo * sum(x + io)) cannot change the total. The requantization is requant.c's
 * arithmetic inlined, its constants computed once per tensor (or channel) instead of per value
 * (see requant_scale below). tests/test_kernels_optimized.py checks all this on the host and
 * under QEMU (Cortex-M4, the DSP path) against the reference compiled into the same binary.
 *
 * The other functions of fully_connected.h (float32, int16x8) are the reference's, compiled in
 * here from its source; its three int8 functions come along renamed to *_reference (linked, so
 * the tests can compare both in one binary; --gc-sections drops them from firmware). */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected.h"   /* the real prototypes, checked against the definitions below */
#include "dsp.h"                     /* dot_2rows, dot_1row, sum_inputs, requant_t, requant_s8 */

#define qe_fully_connected_s8 qe_fully_connected_s8_reference
#define qe_fully_connected_s8_pc qe_fully_connected_s8_pc_reference
#define qe_fully_connected_s8_acc_f32 qe_fully_connected_s8_acc_f32_reference
#define qe_fully_connected_s8_packed qe_fully_connected_s8_packed_reference
#define qe_fully_connected_s8_mm qe_fully_connected_s8_mm_reference
#include "../../fully_connected.c"
#undef qe_fully_connected_s8_mm
#undef qe_fully_connected_s8
#undef qe_fully_connected_s8_pc
#undef qe_fully_connected_s8_acc_f32
#undef qe_fully_connected_s8_packed

void qe_fully_connected_s8(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const int32_t io = p->input_offset;
    requant_t rq;
    uint32_t b, o;

    requant_init(&rq, p->output_multiplier, p->output_shift, p->output_offset,
                 p->activation_min, p->activation_max);
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        /* the weights' offset times the sum of the offset inputs: the same for every row */
        const int32_t base = (p->filter_offset != 0) ? p->filter_offset * sum_inputs(in, n, io) : 0;
        for (o = 0; o + 1 < rows; o += 2) {
            int32_t acc[2] = {base, base};
            dot_2rows(in, weights + o * n, weights + (o + 1) * n, n, io, acc);
            if (bias != QE_FLASH_NULL) {
                acc[0] += bias[o];
                acc[1] += bias[o + 1];
            }
            out[o] = requant_s8(&rq, acc[0]);
            out[o + 1] = requant_s8(&rq, acc[1]);
        }
        if (o < rows) {
            int32_t acc = base + dot_1row(in, weights + o * n, n, io);
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            out[o] = requant_s8(&rq, acc);
        }
    }
}

void qe_fully_connected_s8_pc(const qe_fc_pc_params_t *p, const int8_t *input,
                              const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                              int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth, cs = p->channel_stride;
    const int32_t io = p->input_offset;
    requant_t rq;
    uint32_t b, o;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        for (o = 0; o + 1 < rows; o += 2) {
            int32_t acc[2] = {0, 0};
            dot_2rows(in, weights + o * n, weights + (o + 1) * n, n, io, acc);
            if (bias != QE_FLASH_NULL) {
                acc[0] += bias[o];
                acc[1] += bias[o + 1];
            }
            requant_init(&rq, p->multipliers[o * cs], p->shifts[o * cs], p->output_offset,
                         p->activation_min, p->activation_max);
            out[o] = requant_s8(&rq, acc[0]);
            requant_init(&rq, p->multipliers[(o + 1) * cs], p->shifts[(o + 1) * cs],
                         p->output_offset, p->activation_min, p->activation_max);
            out[o + 1] = requant_s8(&rq, acc[1]);
        }
        if (o < rows) {
            int32_t acc = dot_1row(in, weights + o * n, n, io);
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            requant_init(&rq, p->multipliers[o * cs], p->shifts[o * cs], p->output_offset,
                         p->activation_min, p->activation_max);
            out[o] = requant_s8(&rq, acc);
        }
    }
}

void qe_fully_connected_s8_acc_f32(const qe_fc_s8_acc_params_t *p, const int8_t *input,
                                   const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                                   float *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth, cs = p->channel_stride;
    const int32_t io = p->input_offset;
    uint32_t b, o;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        float *out = output + b * rows;
        for (o = 0; o + 1 < rows; o += 2) {
            int32_t acc[2] = {0, 0};
            dot_2rows(in, weights + o * n, weights + (o + 1) * n, n, io, acc);
            if (bias != QE_FLASH_NULL) {
                acc[0] += bias[o];
                acc[1] += bias[o + 1];
            }
            out[o] = (float)acc[0] * p->scales[o * cs];
            out[o + 1] = (float)acc[1] * p->scales[(o + 1) * cs];
        }
        if (o < rows) {
            int32_t acc = dot_1row(in, weights + o * n, n, io);
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            out[o] = (float)acc * p->scales[o * cs];
        }
    }
}

/* ------------------------------------------------------------------------ the packed layout
 * qe_fully_connected_s8_packed: the generator's layout (fully_connected.h), four rows per pass.
 * The zero points are folded into the weights and bias' already, so the inner loop is only
 * loads and SMLADs. The input is widened once per batch into a stack buffer of int16 lane pairs
 * in SXTB16's order (per quad: x0|x2, x1|x3, padded with zeros), which the weight words match:
 * per quad of inputs one LDM of the two input words, two LDMs of four weight words (four rows,
 * one half each) and eight SMLADs: 11 instructions per 16 multiply-accumulates, two quads per
 * loop pass (24 per 32 with the loop's compare and branch). */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP

/* The widened input: per quad two words; pad quads are zero (their weights are zero too, and the
 * words must be defined). */
static void widen_input(const int8_t *in, uint32_t n, uint32_t *xw)
{
    const int8_t *const end = in + (n & ~3u);
    while (in != end) {
        const uint32_t v = load_s8x4(in);
        in += 4;
        xw[0] = (uint32_t)__sxtb16(v);                 /* x0 | x2 << 16 */
        xw[1] = (uint32_t)sxtb16_ror8(v);              /* x1 | x3 << 16 */
        xw += 2;
    }
    if (n & 3u) {                                      /* the last, partial quad */
        int32_t x[4] = {0, 0, 0, 0};
        uint32_t k;
        for (k = 0; k < (n & 3u); ++k) {
            x[k] = in[k];
        }
        xw[0] = ((uint32_t)x[0] & 0xFFFFu) | ((uint32_t)x[2] << 16);
        xw[1] = ((uint32_t)x[1] & 0xFFFFu) | ((uint32_t)x[3] << 16);
    }
}

/* One quad of inputs into the four accumulators: x and w advance (LDM with write-back). The
 * registers of the LDM lists are named (an LDM list must be ascending); r7 is left to gcc (the
 * Thumb frame pointer). */
#define QUAD_STEP                                                                         \
    "ldmia %[x]!, {r9, r10}\n\t"                                                         \
    "ldmia %[w]!, {r4, r5, r6, r8}\n\t"                                                  \
    "smlad %[a0], r4, r9, %[a0]\n\t"                                                     \
    "smlad %[a1], r5, r9, %[a1]\n\t"                                                     \
    "smlad %[a2], r6, r9, %[a2]\n\t"                                                     \
    "smlad %[a3], r8, r9, %[a3]\n\t"                                                     \
    "ldmia %[w]!, {r4, r5, r6, r8}\n\t"                                                  \
    "smlad %[a0], r4, r10, %[a0]\n\t"                                                    \
    "smlad %[a1], r5, r10, %[a1]\n\t"                                                    \
    "smlad %[a2], r6, r10, %[a2]\n\t"                                                    \
    "smlad %[a3], r8, r10, %[a3]\n\t"

#define QUAD_OPERANDS                                                                     \
    : [x] "+r"(x), [w] "+r"(w), [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3) \
    :                                                                                     \
    : "r4", "r5", "r6", "r8", "r9", "r10", "memory"

/* The output stage of a whole group (four outputs) in one asm block, for modes 1 and 3 below:
 * requant_right_s8's instructions with its constants in the registers the MAC loop frees (one
 * LDM; requant_right_t's first five fields, in order). Per output: the 64-bit round + x * m
 * (SMLAL), - 2^31 for x < 0 (the accumulator's register keeps only its sign bit, and "asr #31"
 * of it is -1 or 0), >> e - 1, then + offset (QADD) and SSAT to int8. RELU_UP (mode 3, the
 * activation [offset, 127]) clamps the scaled value at 0 first (USAT #8 to [0, 255]): then
 * + offset and SSAT give max(offset, min(scaled + offset, 127)), exactly the clamp. */
#define OUT_ONE(A, I, RELU_UP)                                                            \
    "mov r10, r5\n\t"                                                                     \
    "mov %[hi], r6\n\t"                                                                   \
    "smlal r10, %[hi], " A ", r4\n\t"                                                     \
    "and " A ", " A ", #0x80000000\n\t"                                                   \
    "adds r10, r10, " A "\n\t"                                                            \
    "adc %[hi], %[hi], " A ", asr #31\n\t"                                                \
    "asr %[hi], %[hi], r8\n\t"                                                            \
    RELU_UP                                                                               \
    "qadd %[hi], %[hi], r9\n\t"                                                           \
    "ssat %[hi], #8, %[hi]\n\t"                                                           \
    "strb %[hi], [%[out], #" I "]\n\t"

#define OUT_GROUP(RELU_UP)                                                                \
    __asm volatile("ldm %[k], {r4, r5, r6, r8, r9}\n\t"                                   \
                   OUT_ONE("%[a0]", "0", RELU_UP) OUT_ONE("%[a1]", "1", RELU_UP)          \
                   OUT_ONE("%[a2]", "2", RELU_UP) OUT_ONE("%[a3]", "3", RELU_UP)          \
                   : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3),         \
                     [hi] "=&r"(hi)                                                       \
                   : [k] "r"(rr), [out] "r"(out + o)                                      \
                   : "r4", "r5", "r6", "r8", "r9", "r10", "cc", "memory")

/* One batch: every group of four rows. `mode` is a constant in each call (the function is
 * inlined three times, so that the output stage's choice is made once per call, not per value):
 * 0 the general requant_s8, 1 requant_right_s8 with full int8 range, 2 requant_right_s8 with
 * the activation's bounds, 3 requant_right_s8 with the bounds [offset, 127] (RELU). */
static inline __attribute__((always_inline)) void packed_batch(
    const uint32_t *xw, uint32_t quads, const int32_t *w, const QE_FLASH int32_t *bias,
    uint32_t rows, int8_t *out, const requant_t *rq, const requant_right_t *rr, int mode)
{
    uint32_t o;
    for (o = 0; o < rows; o += QE_FC_PACKED_ROWS) {
        const uint32_t *x = xw;
        const uint32_t *const x_pairs_end = xw + 2u * (quads & ~1u);
        int32_t a0 = bias[o], a1 = bias[o + 1u], a2 = bias[o + 2u], a3 = bias[o + 3u];
        int32_t acc[4];
        uint32_t r;
        while (x != x_pairs_end) {
            __asm volatile(QUAD_STEP QUAD_STEP QUAD_OPERANDS);
        }
        if (quads & 1u) {
            __asm volatile(QUAD_STEP QUAD_OPERANDS);
        }
        if (o + QE_FC_PACKED_ROWS <= rows) {
            /* a whole group: four outputs */
            int32_t hi;
            if (mode == 1) {
                OUT_GROUP("");
                continue;
            }
            if (mode == 3) {
                OUT_GROUP("usat %[hi], #8, %[hi]\n\t");
                continue;
            }
            if (mode == 0) {
                out[o] = requant_s8(rq, a0);
                out[o + 1u] = requant_s8(rq, a1);
                out[o + 2u] = requant_s8(rq, a2);
                out[o + 3u] = requant_s8(rq, a3);
            } else {
                out[o] = requant_right_s8(rr, a0, mode == 1);
                out[o + 1u] = requant_right_s8(rr, a1, mode == 1);
                out[o + 2u] = requant_right_s8(rr, a2, mode == 1);
                out[o + 3u] = requant_right_s8(rr, a3, mode == 1);
            }
            continue;
        }
        /* the last group, padded: its real rows only */
        acc[0] = a0;
        acc[1] = a1;
        acc[2] = a2;
        acc[3] = a3;
        for (r = 0; o + r < rows; ++r) {
            out[o + r] = (mode == 0) ? requant_s8(rq, acc[r]) : requant_right_s8(rr, acc[r], mode == 1);
            /* (mode 3 is mode 2's clamp: the same value) */
        }
    }
}

/* The requant_mm_t output stage (dsp.h, REQUANT_MM_*_ASM), every whole group of four rows of one
 * batch, in one hand-allocated asm function: gcc's allocation of packed_batch spills the output stage's
 * constants and pointers around the register-hungry MAC loop (~50 instructions a group). Here
 * the accumulators (r2, r3, r12, lr), the MAC loop's data (r4-r6, r8-r10), x (r0), w (r1) and
 * the output (r11) stay in registers, and the rest lives in mm_ctx_t (r7). The MAC loop is
 * QE_FC_PACKED_MAX_DEPTH / 4 QUAD_STEPs unrolled, entered at the quad the depth needs (a
 * computed branch, Duff's device: every QUAD_STEP is 44 bytes, eleven 32-bit instructions, which
 * the assembler checks), so it has no loop counter and no loop overhead; it falls through into
 * the four outputs. Per group: 5 (bias, x, branch) + 11 per quad + 4 (5) per output + 4. */
typedef struct {
    int32_t multiplier;             /* requant_mm_t: the first three fields, for one LDM */
    int32_t round;
    uint32_t shift;
    const QE_FLASH int32_t *bias;   /* the next group's bias' */
    const uint32_t *xw;             /* the widened input */
    uint32_t entry;                 /* 44 * quads: the unrolled MAC loop's entry, from its end */
    int8_t *out_end;                /* the end of the whole groups' outputs */
    const int32_t *w;
    int8_t *out;
    const int8_t *in;               /* the int8 input, to widen into xw first: */
    uint32_t in_quads;              /* its whole quads (0: xw is ready) */
    uint32_t target;                /* (set by the function: the entry's address, Thumb bit) */
} mm_ctx_t;

/* the asm below addresses mm_ctx_t's fields by these offsets, and unrolls 32 quads */
#define MM_CHECK_(name, cond) typedef char mm_check_##name[(cond) ? 1 : -1]
MM_CHECK_(bias, offsetof(mm_ctx_t, bias) == 12);
MM_CHECK_(xw, offsetof(mm_ctx_t, xw) == 16);
MM_CHECK_(entry, offsetof(mm_ctx_t, entry) == 20);
MM_CHECK_(out_end, offsetof(mm_ctx_t, out_end) == 24);
MM_CHECK_(w, offsetof(mm_ctx_t, w) == 28);
MM_CHECK_(out, offsetof(mm_ctx_t, out) == 32);
MM_CHECK_(in, offsetof(mm_ctx_t, in) == 36);
MM_CHECK_(in_quads, offsetof(mm_ctx_t, in_quads) == 40);
MM_CHECK_(target, offsetof(mm_ctx_t, target) == 44);
MM_CHECK_(depth, QE_FC_PACKED_MAX_DEPTH == 128u);

#define MM_Q1 "ldmia.w r0!, {r9, r10}\n\t" "ldmia.w r1!, {r4, r5, r6, r8}\n\t"              \
    "smlad r2, r4, r9, r2\n\t" "smlad r3, r5, r9, r3\n\t" "smlad r12, r6, r9, r12\n\t"     \
    "smlad lr, r8, r9, lr\n\t" "ldmia.w r1!, {r4, r5, r6, r8}\n\t"                        \
    "smlad r2, r4, r10, r2\n\t" "smlad r3, r5, r10, r3\n\t" "smlad r12, r6, r10, r12\n\t"  \
    "smlad lr, r8, r10, lr\n\t"
#define MM_Q4 MM_Q1 MM_Q1 MM_Q1 MM_Q1
#define MM_Q32 MM_Q4 MM_Q4 MM_Q4 MM_Q4 MM_Q4 MM_Q4 MM_Q4 MM_Q4
#define MM_GROUPS(NAME, OUT)                                                              \
    __attribute__((naked, noinline)) static void NAME(mm_ctx_t *c)                       \
    {                                                                                     \
        (void)c;                                                                          \
        __asm volatile(                                                                   \
            "push {r4-r11, lr}\n\t"                                                       \
            "mov r7, r0\n\t"                                                              \
            "ldr r0, [r7, #36]\n\t"      /* widen_input's whole quads, 6 instructions each */ \
            "ldr r1, [r7, #40]\n\t"                                                       \
            "ldr r4, [r7, #16]\n\t"                                                       \
            "cbz r1, .L" #NAME "_widened\n"                                                \
            ".L" #NAME "_widen:\n\t"                                                      \
            "ldr r5, [r0], #4\n\t"                                                        \
            "sxtb16 r6, r5\n\t"                                                           \
            "sxtb16 r8, r5, ror #8\n\t"                                                   \
            "stmia r4!, {r6, r8}\n\t"                                                     \
            "subs r1, r1, #1\n\t"                                                         \
            "bne .L" #NAME "_widen\n"                                                      \
            ".L" #NAME "_widened:\n\t"                                                    \
            "adr.w r4, .L" #NAME "_end\n\t"                                               \
            "ldr r5, [r7, #20]\n\t"                                                       \
            "sub r4, r4, r5\n\t"                                                          \
            "orr r4, r4, #1\n\t"                                                          \
            "str r4, [r7, #44]\n\t"                                                       \
            "ldr r1, [r7, #28]\n\t"                                                       \
            "ldr r11, [r7, #32]\n"                                                        \
            ".L" #NAME "_group:\n\t"                                                      \
            "ldr r4, [r7, #12]\n\t"                                                       \
            "ldmia r4!, {r2, r3, r12, lr}\n\t"                                            \
            "str r4, [r7, #12]\n\t"                                                       \
            "ldr r0, [r7, #16]\n\t"                                                       \
            "ldr pc, [r7, #44]\n"                                                         \
            ".L" #NAME "_start:\n\t"                                                      \
            MM_Q32                                                                        \
            "\n.L" #NAME "_end:\n\t"                                                      \
            ".if (.L" #NAME "_end - .L" #NAME "_start) - 44 * 32\n\t"                     \
            ".error \"a QUAD_STEP is not 44 bytes\"\n\t"                                  \
            ".endif\n\t"                                                                  \
            "ldm r7, {r4, r5, r6}\n\t"                                                    \
            OUT("r2") OUT("r3") OUT("r12") OUT("lr")                                      \
            "ldr r4, [r7, #24]\n\t"                                                       \
            "cmp r11, r4\n\t"                                                             \
            "bne .L" #NAME "_group\n\t"                                                   \
            "str r1, [r7, #28]\n\t"      /* w: where a next call (a padded group) goes on */ \
            "pop {r4-r11, pc}\n\t");                                                      \
    }

MM_GROUPS(mm_groups_fix, REQUANT_MM_FIX_ASM)
MM_GROUPS(mm_groups_nofix, REQUANT_MM_NOFIX_ASM)

/* ------------------------------------------------------------------------ the mm stream
 * qe_fully_connected_s8_mm (fully_connected.h: the packed layout doubled, each group's bias''
 * at the head of its weights; one batch, depth a multiple of 4, the input word-aligned): the whole
 * op in one hand-allocated asm function, its constants from the generator's params (no C set-up).
 * Issue 41: the per-call and per-group costs around mm_groups_*' MAC loop were a third of a
 * 48-wide MLP's instructions. Registers: the MAC loop's as in mm_groups_* (x r0, the stream r1,
 * accumulators r2, r3, r12, lr, data r4-r6, r8-r10), the output r11, r7 the frame (MM2_LOOP).
 *  - The input widened 16 values per LDM, eight SXTB16s and one STM (0.75 instructions a value;
 *    1.5 in mm_groups_*), then 4 at a time.
 *  - Per group: LDM of its four bias'' words into the accumulators (from the stream), LDM of x
 *    and PC (into the unrolled MAC loop: 11 instructions per quad, as in mm_groups_*), LDR PC to
 *    the output block of this op's e, LDMDB of m, round and the end, four outputs of 3 (4 with
 *    the sign fix) instructions, CMP + BNE: 18 + 11 per quad (nofix; 29 + 11 in mm_groups_*).
 *  - The output stage is REQUANT_MM_*'s without its QADD and with the ASR in SSAT's shift: the
 *    accumulator is 2 acc already (the doubled stream; the generator's bound keeps it exact),
 *    which is all QADD(acc, acc) computed where it did not saturate (dsp.h's proof: the other
 *    cases lie outside the bound), and SSAT #8 of (v ASR e) is the ASR then the SSAT. */
/* Per output, with e an immediate (one block of code per e, below): _NOFIX SMMLAR, SSAT with
 * ASR #e, STRB (3 instructions); _FIX the sign's ADD first (r9: free after the MAC loop). */
#define MM2_NOFIX_ASM(A)                                                                      \
    "smmlar " A ", " A ", r4, r5\n\t" "ssat " A ", #8, " A ", asr #\\e\n\t"                   \
    "strb " A ", [r11], #1\n\t"
#define MM2_FIX_ASM(A)                                                                        \
    "add.w r9, r5, " A ", asr #31\n\t"                                                        \
    "smmlar " A ", " A ", r4, r9\n\t" "ssat " A ", #8, " A ", asr #\\e\n\t"                   \
    "strb " A ", [r11], #1\n\t"

MM_CHECK_(mm_fix, offsetof(qe_fc_s8_mm_params_t, fix) == 12);
MM_CHECK_(mm_entry, offsetof(qe_fc_s8_mm_params_t, entry) == 16);
MM_CHECK_(mm_rows, offsetof(qe_fc_s8_mm_params_t, output_depth) == 20);
MM_CHECK_(mm_depth, offsetof(qe_fc_s8_mm_params_t, accum_depth) == 24);

/* One copy of the group loop (X: its labels' tag; OUT its output stage; BYTES the size of one
 * block of four outputs, ADDR the instructions that take r10 from the first block to block e,
 * Thumb bit set), entered with r4-r6 = m, round, e, r8 = the whole groups' output end, r9 =
 * p->entry, r7 = sp + 12, r11 = the output, r1 = the stream. The frame (one STM): [sp] m, round,
 * the end of the current run of groups' outputs (one LDMDB from r7 after the MAC loop);
 * [sp + 12] the widened input's address and the MAC loop's entry (one LDM resets x and enters
 * the loop), [sp + 20] the output block of this e; [sp + 28] the real output of a padded last
 * group, [sp + 32] its rows; [sp + 40] the widened input (QE_FC_PACKED_MAX_DEPTH / 2 words);
 * [sp + 296] the padded group's four outputs. The 21 output blocks (e = 1..21) are alike but for
 * SSAT's shift: ASR by e is then no instruction of its own, and the MAC loop's end jumps to the
 * block (LDR PC) instead. Every instruction there has its width spelt (.w), so that each block
 * is exactly BYTES long, which the assembler checks. */
#define MM2_LOOP(X, OUT, BYTES, ADDR)                                                         \
    ".L" X "_pre:\n\t"                                                                        \
    "adr.w r10, .L" X "_end\n\t"                                                              \
    "sub r9, r10, r9\n\t"                                                                     \
    "orr r9, r9, #1\n\t"                                                                      \
    "adr.w r10, .L" X "_blocks\n\t"                                                           \
    ADDR                                                                                      \
    "mov r6, r8\n\t"                                                                          \
    "add r8, sp, #40\n\t"                                                                     \
    "stmia sp, {r4, r5, r6, r8, r9, r10}\n\t"                                                 \
    "cmp r6, r11\n\t"                                                                         \
    "beq .L" X "_done\n"                                                                      \
    ".L" X "_group:\n\t"                                                                      \
    "ldmia r1!, {r2, r3, r12, lr}\n\t"                                                        \
    "ldm r7, {r0, pc}\n"                                                                      \
    ".L" X "_start:\n\t"                                                                      \
    MM_Q32                                                                                    \
    "\n.L" X "_end:\n\t"                                                                      \
    ".if (.L" X "_end - .L" X "_start) - 44 * 32\n\t"                                         \
    ".error \"a QUAD_STEP is not 44 bytes\"\n\t"                                              \
    ".endif\n\t"                                                                              \
    "ldr.w pc, [r7, #8]\n"                                                                    \
    ".L" X "_blocks:\n\t"                                                                     \
    ".irp e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21\n\t"    \
    "ldmdb r7, {r4, r5, r8}\n\t"                                                              \
    OUT("r2") OUT("r3") OUT("r12") OUT("lr")                                                  \
    "cmp.w r11, r8\n\t"                                                                       \
    "bne.w .L" X "_group\n\t"                                                                 \
    "b.w .L" X "_done\n\t"                                                                    \
    ".endr\n"                                                                                 \
    ".L" X "_done:\n\t"                                                                       \
    ".if (.L" X "_done - .L" X "_blocks) - 21 * " BYTES "\n\t"                                \
    ".error \"an output block is not " BYTES " bytes\"\n\t"                                   \
    ".endif\n\t"                                                                              \
    "ldr r4, [sp, #32]\n\t"      /* the rows of a padded last group */                        \
    "cmp r4, #0\n\t"                                                                          \
    "bne .L" X "_tail\n\t"                                                                    \
    "add sp, sp, #304\n\t"                                                                    \
    "pop {r4-r11, pc}\n"                                                                      \
    ".L" X "_tail:\n\t"                                                                       \
    "add r5, sp, #300\n\t"                                                                    \
    "cmp r11, r5\n\t"                                                                         \
    "beq .L" X "_copy\n\t"                                                                    \
    "str r11, [sp, #28]\n\t"     /* the padded group into the scratch group */                \
    "sub r11, r5, #4\n\t"                                                                     \
    "str r5, [sp, #8]\n\t"                                                                    \
    "b .L" X "_group\n"                                                                       \
    ".L" X "_copy:\n\t"          /* its real rows to the output */                            \
    "ldr r6, [sp, #28]\n\t"                                                                   \
    "sub r5, r5, #4\n"                                                                        \
    ".L" X "_cp:\n\t"                                                                         \
    "ldrb r8, [r5], #1\n\t"                                                                   \
    "strb r8, [r6], #1\n\t"                                                                   \
    "subs r4, r4, #1\n\t"                                                                     \
    "bne .L" X "_cp\n\t"                                                                      \
    "add sp, sp, #304\n\t"                                                                    \
    "pop {r4-r11, pc}\n\t"

__attribute__((naked)) void qe_fully_connected_s8_mm(const qe_fc_s8_mm_params_t *p,
                                                     const int8_t *input,
                                                     const QE_FLASH int32_t *stream,
                                                     int8_t *output)
{
    (void)p;
    (void)input;
    (void)stream;
    (void)output;
    __asm volatile(
        "push {r4-r11, lr}\n\t"
        "sub sp, sp, #304\n\t"
        "mov r7, r0\n\t"
        "mov r11, r3\n\t"
        "mov lr, r2\n\t"
        "ldr r12, [r7, #24]\n\t"        /* the depth, a multiple of 4 */
        "add r0, sp, #40\n\t"
        "subs r12, r12, #16\n\t"
        "blo .Lmm_rest\n"
        ".Lmm_blk:\n\t"                 /* 16 inputs: x0|x2, x1|x3 per word, as widen_input */
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
        "subs r12, r12, #16\n\t"
        "bhs .Lmm_blk\n"
        ".Lmm_rest:\n\t"
        "adds r12, r12, #16\n\t"
        "beq .Lmm_widened\n"
        ".Lmm_quad:\n\t"
        "ldr r2, [r1], #4\n\t"
        "sxtb16 r3, r2, ror #8\n\t"
        "sxtb16 r2, r2\n\t"
        "stmia r0!, {r2, r3}\n\t"
        "subs r12, r12, #4\n\t"
        "bne .Lmm_quad\n"
        ".Lmm_widened:\n\t"
        "ldm r7, {r4, r5, r6, r8, r9, r10}\n\t"   /* m, round, e, fix, entry, rows */
        "add r7, sp, #12\n\t"
        "and r12, r10, #3\n\t"
        "str r12, [sp, #32]\n\t"        /* the padded last group's rows */
        "bic r10, r10, #3\n\t"
        "mov r1, lr\n\t"
        "cmp r8, #0\n\t"
        "add r8, r11, r10\n\t"          /* the whole groups' output end */
        "bne .Lmmfix_pre\n\t"
        MM2_LOOP("mmnofix", MM2_NOFIX_ASM, "64",
                 "add r10, r10, r6, lsl #6\n\tsub r10, r10, #63\n\t")    /* + 64 (e - 1) + 1 */
        MM2_LOOP("mmfix", MM2_FIX_ASM, "80",
                 "add r12, r6, r6, lsl #2\n\tadd r10, r10, r12, lsl #4\n\tsub r10, r10, #79\n\t"));
}

/* The output stage of requant_mm_t (dsp.h): every whole group in mm_groups_*, a padded last
 * group into a scratch group (its padding rows' weights and bias' are zeros: defined values),
 * of which only the real rows are copied. */
__attribute__((noinline)) static void packed_mm(const qe_fc_s8_packed_params_t *p,
                                                const int8_t *input,
                                                const QE_FLASH int32_t *weights,
                                                const QE_FLASH int32_t *bias, int8_t *output,
                                                const requant_mm_t *mm, int fix)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t quads = p->padded_depth / 4u, batches = p->batches;
    const uint32_t whole = rows & ~(QE_FC_PACKED_ROWS - 1u);
    void (*const groups)(mm_ctx_t *) = fix ? mm_groups_fix : mm_groups_nofix;
    uint32_t xw[QE_FC_PACKED_MAX_DEPTH / 2u];
    int8_t tail[QE_FC_PACKED_ROWS];
    mm_ctx_t c;
    uint32_t b, r;

    c.multiplier = mm->multiplier;
    c.round = mm->round;
    c.shift = mm->shift;
    c.xw = xw;
    for (b = 0; b < batches; ++b) {
        int8_t *out = output + b * rows;
        c.in = input + b * n;
        c.in_quads = n / 4u;
        if (n & 3u) {                   /* the partial last quad, zero-padded, here in C */
            widen_input(c.in + (n & ~3u), n & 3u, xw + 2u * (n / 4u));
        }
        c.bias = bias;
        c.w = (const int32_t *)weights;
        c.entry = 44u * quads;
        if (whole > 0u) {
            c.out = out;
            c.out_end = out + whole;
            groups(&c);
            c.in_quads = 0;             /* widened already */
        }
        if (whole < rows) {             /* the padded last group, into a scratch group */
            c.out = tail;
            c.out_end = tail + QE_FC_PACKED_ROWS;
            groups(&c);
            for (r = 0; whole + r < rows; ++r) {
                out[whole + r] = tail[r];
            }
        }
    }
}

/* the other output stages (packed_batch's modes 0-3) */
__attribute__((noinline)) static void packed_other(const qe_fc_s8_packed_params_t *p,
                                                   const int8_t *input,
                                                   const QE_FLASH int32_t *weights,
                                                   const QE_FLASH int32_t *bias, int8_t *output)
{
    const uint32_t n = p->accum_depth, padded = p->padded_depth, rows = p->output_depth;
    const uint32_t quads = padded / 4u, batches = p->batches;
    uint32_t xw[QE_FC_PACKED_MAX_DEPTH / 2u];
    requant_t rq;
    requant_right_t rr;
    int mode;
    uint32_t b;

    requant_init(&rq, p->output_multiplier, p->output_shift, p->output_offset,
                 p->activation_min, p->activation_max);
    mode = requant_right_init(&rr, p->output_multiplier, p->output_shift, p->output_offset,
                              p->activation_min, p->activation_max);
    if (mode && (p->activation_min > -128 || p->activation_max < 127)) {
        mode = (p->activation_min == p->output_offset && p->activation_max == 127) ? 3 : 2;
    }
    for (b = 0; b < batches; ++b) {
        int8_t *out = output + b * rows;
        const int32_t *w = (const int32_t *)weights;
        widen_input(input + b * n, n, xw);
        if (mode == 1) {
            packed_batch(xw, quads, w, bias, rows, out, &rq, &rr, 1);
        } else if (mode == 2) {
            packed_batch(xw, quads, w, bias, rows, out, &rq, &rr, 2);
        } else if (mode == 3) {
            packed_batch(xw, quads, w, bias, rows, out, &rq, &rr, 3);
        } else {
            packed_batch(xw, quads, w, bias, rows, out, &rq, &rr, 0);
        }
    }
}

void qe_fully_connected_s8_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH int32_t *weights, const QE_FLASH int32_t *bias,
                                  int8_t *output)
{
    requant_mm_t mm;
    const int mode = requant_mm_init(&mm, p->output_multiplier, p->output_shift,
                                     p->output_offset, p->activation_min, p->activation_max);
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    if (mode == REQUANT_MM_NONE) {
        packed_other(p, input, weights, bias, output);
    } else if (p->batches == 1u && (n & 3u) == 0u) {
        /* the common case (one batch, whole quads) without packed_mm's loop */
        void (*const groups)(mm_ctx_t *) = (mode == REQUANT_MM_FIX) ? mm_groups_fix
                                                                     : mm_groups_nofix;
        const uint32_t whole = rows & ~(QE_FC_PACKED_ROWS - 1u);
        uint32_t xw[QE_FC_PACKED_MAX_DEPTH / 2u];
        int8_t tail[QE_FC_PACKED_ROWS];
        mm_ctx_t c;
        uint32_t r;
        c.multiplier = mm.multiplier;
        c.round = mm.round;
        c.shift = mm.shift;
        c.bias = bias;
        c.xw = xw;
        c.entry = 44u * (n / 4u);
        c.w = (const int32_t *)weights;
        c.in = input;
        c.in_quads = n / 4u;
        if (whole > 0u) {
            c.out = output;
            c.out_end = output + whole;
            groups(&c);
            c.in_quads = 0;
        }
        if (whole < rows) {             /* a padded last group (a 1-3 row head), into scratch */
            c.out = tail;
            c.out_end = tail + QE_FC_PACKED_ROWS;
            groups(&c);
            for (r = 0; whole + r < rows; ++r) {
                output[whole + r] = tail[r];
            }
        }
    } else {
        packed_mm(p, input, weights, bias, output, &mm, mode == REQUANT_MM_FIX);
    }
}

#else /* no DSP extension (the host): the portable definition */

void qe_fully_connected_s8_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH int32_t *weights, const QE_FLASH int32_t *bias,
                                  int8_t *output)
{
    qe_fully_connected_s8_packed_reference(p, input, weights, bias, output);
}

void qe_fully_connected_s8_mm(const qe_fc_s8_mm_params_t *p, const int8_t *input,
                              const QE_FLASH int32_t *stream, int8_t *output)
{
    qe_fully_connected_s8_mm_reference(p, input, stream, output);
}

#endif /* __ARM_FEATURE_DSP */
