/* FULLY_CONNECTED, optimized variant "rv32" (see ../README.md): the cortex-m0 variant's file, whose
 * portable C (the paths taken without __ARM_ARCH_6M__) serves 32-bit cores without SIMD
 * multiply-accumulate (RISC-V rv32imc/rv32imac). The generator's lowerings are cortex-m0's
 * (converters/ops/optimized/__init__.py), so the weight layouts are the same too.
 *
 * On RISC-V (rv32, __riscv) one function is this file's own: pairs_group, the walk of a row
 * group's chunks on the chunked row-pair layout (../../fully_connected.h), in asm:
 *
 *  - per chunk (its word 4 L) a computed jump into a MAC body unrolled QE_FC_PACKED_MAX_DEPTH
 *    times (uncompressed, so every input's entry is 7 instructions, 28 bytes): per input LW of
 *    the widened input, two LWs of the pair words, two MULs, two ADDs (7 instructions per 4 MACs,
 *    no loop counter: the pointers move once per chunk and the body addresses back from them);
 *  - the split of each chunk's packed sum without sign extensions: the sum starts at 0x8000, so
 *    S = 65536 H + (L + 0x8000) with L + 0x8000 in [0, 65535] (the generator's bound: L, H in
 *    int16) and H = S >> 16 (SRAI) exactly; per pair one ADD of S into a running sum of S and
 *    one ADD of H into the high row's (3 instructions per pair, against SXTH's 6). The low row
 *    is recovered once per group: sum L = sum S - 65536 sum H - 0x8000 chunks (mod 2^32, and the
 *    true accumulator is an int32: the generator's bounds), in C below.
 *
 * 19 instructions per chunk besides its inputs' 7 (the chunk's head follows the split: no jump
 * back). The host tests run cortex-m0's C walk (the same results: both are the layout's exact
 * sums); tests/test_kernels_optimized.py runs this one under QEMU (hifive1) against the
 * reference. */
#include <stdint.h>

#include "../../fully_connected.h"

#if defined(__riscv) && __riscv_xlen == 32 && defined(__riscv_mul)   /* rv32 with M: MUL */
#define QE_FC_PAIRS_GROUP_OWN 1      /* cortex-m0's file leaves pairs_group to this one */

/* The chunks of one row group: acc[0..3] += the rows' sums (the stream after the group's 0 word
 * is returned). */
static const int32_t *pairs_group(const int32_t *x, const int32_t *w, int32_t acc[4])
{
    uint32_t s01 = 0u, h1 = 0u, s23 = 0u, h3 = 0u, chunks = 0u;
    __asm volatile("lla t5, 2f\n"
                   "j 1f\n\t"                         /* the first chunk's head */
                   ".option push\n\t"
                   ".option norvc\n\t"
                   ".set qe_rv_i, %[depth]\n\t"
                   ".rept %[depth]\n\t"
                   "lw t0, -4*qe_rv_i(%[x])\n\t"
                   "lw t1, -8*qe_rv_i(%[w])\n\t"
                   "lw t2, -8*qe_rv_i+4(%[w])\n\t"
                   "mul t1, t1, t0\n\t"
                   "mul t2, t2, t0\n\t"
                   "add t3, t3, t1\n\t"
                   "add t4, t4, t2\n\t"
                   ".set qe_rv_i, qe_rv_i-1\n\t"
                   ".endr\n\t"
                   ".option pop\n"
                   "2:\n\t"                          /* S = 65536 H + L + 0x8000 */
                   "add %[s01], %[s01], t3\n\t"
                   "srai t3, t3, 16\n\t"
                   "add %[h1], %[h1], t3\n\t"
                   "add %[s23], %[s23], t4\n\t"
                   "srai t4, t4, 16\n\t"
                   "add %[h3], %[h3], t4\n"
                   "1:\n\t"
                   "lw t0, 0(%[w])\n\t"              /* a chunk: 4 L, 0 ends the group */
                   "addi %[w], %[w], 4\n\t"
                   "beqz t0, 9f\n\t"
                   "add %[x], %[x], t0\n\t"          /* x, w: the chunk's ends */
                   "slli t1, t0, 1\n\t"
                   "add %[w], %[w], t1\n\t"
                   "slli t2, t0, 3\n\t"
                   "sub t2, t2, t0\n\t"              /* 28 L: L entries of 28 bytes */
                   "sub t2, t5, t2\n\t"
                   "lui t3, 8\n\t"                   /* the packed sums start at 0x8000 */
                   "lui t4, 8\n\t"
                   "addi %[n], %[n], 1\n\t"
                   "jr t2\n"
                   "9:"
                   : [x] "+r"(x), [w] "+r"(w), [s01] "+r"(s01), [h1] "+r"(h1), [s23] "+r"(s23),
                     [h3] "+r"(h3), [n] "+r"(chunks)
                   : [depth] "i"(QE_FC_PACKED_MAX_DEPTH)
                   : "t0", "t1", "t2", "t3", "t4", "t5", "memory");
    chunks <<= 15;
    acc[0] = (int32_t)((uint32_t)acc[0] + s01 - (h1 << 16) - chunks);
    acc[1] = (int32_t)((uint32_t)acc[1] + h1);
    acc[2] = (int32_t)((uint32_t)acc[2] + s23 - (h3 << 16) - chunks);
    acc[3] = (int32_t)((uint32_t)acc[3] + h3);
    return w;
}

/* Whole row groups with the step table (fully_connected.h), in one asm block: per group the
 * chunks as pairs_group (the bias' of rows 0 and 2 start the running sums), the four
 * accumulators recovered, then per output SUB, BLTU (saturated: out of line, the bound's side),
 * MUL, ADD, SRLI 24, SLLI, ADD, LW, SLTU, XORI, ADD, SB: 12 instructions, every constant in a
 * register. The fields are cortex-m0's steps_groups_t (its file calls this the same way). */
#define QE_FC_STEPS_GROUPS_OWN 1
typedef struct {
    const int32_t *xb;          /* the widened input */
    const int32_t *bias;        /* the first group's bias' */
    int8_t *out;                /* the first group's outputs */
    const int8_t *out_end;      /* past the last whole group's outputs */
    uint32_t lo;                /* steps_lo */
    uint32_t span;              /* sat_above - steps_lo */
    uint32_t mul;
    uint32_t add;
    const uint32_t *steps;
    int32_t act_min;
    int32_t act_max;
} steps_groups_t;

#define QE_RV_OUT(A, K)                                                           \
    "sub t0, " A ", %[lo]\n\t"            /* u = a - lo */                        \
    "bltu %[span], t0, 4" K "f\n\t"                                               \
    "mul t1, t0, %[mul]\n\t"                                                      \
    "add t1, t1, %[add]\n\t"                                                      \
    "srli t1, t1, 24\n\t"                 /* b: the byte or one less */           \
    "slli t2, t1, 2\n\t"                                                          \
    "add t2, t2, %[steps]\n\t"                                                    \
    "lw t2, 0(t2)\n\t"                                                            \
    "sltu t2, t0, t2\n\t"                                                         \
    "xori t2, t2, 1\n\t"                                                          \
    "add t1, t1, t2\n"                                                            \
    "5" K ":\n\t"                                                                 \
    "sb t1, " K "(%[out])\n\t"

#define QE_RV_SAT(A, K)                   /* out of line: a <= sat_low or > sat_above */ \
    "4" K ":\n\t"                                                                 \
    "mv t1, %[amin]\n\t"                                                          \
    "blt " A ", %[lo], 5" K "b\n\t"                                               \
    "mv t1, %[amax]\n\t"                                                          \
    "j 5" K "b\n"

static const int32_t *steps_groups(const steps_groups_t *g, const int32_t *w)
{
    const int32_t *bias = g->bias, *x;
    int8_t *out = g->out;
    uint32_t s01, h1, s23, h3, chunks;
    __asm volatile("lla t5, 2f\n"
                   "0:\n\t"                          /* a group */
                   "mv %[x], %[xb]\n\t"
                   "lw %[s01], 0(%[bias])\n\t"
                   "lw %[s23], 8(%[bias])\n\t"
                   "li %[h1], 0\n\t"
                   "li %[h3], 0\n\t"
                   "li %[n], 0\n\t"
                   "j 1f\n\t"                         /* the group's first chunk */
                   ".option push\n\t"
                   ".option norvc\n\t"
                   ".set qe_rv_i, %[depth]\n\t"
                   ".rept %[depth]\n\t"
                   "lw t0, -4*qe_rv_i(%[x])\n\t"
                   "lw t1, -8*qe_rv_i(%[w])\n\t"
                   "lw t2, -8*qe_rv_i+4(%[w])\n\t"
                   "mul t1, t1, t0\n\t"
                   "mul t2, t2, t0\n\t"
                   "add t3, t3, t1\n\t"
                   "add t4, t4, t2\n\t"
                   ".set qe_rv_i, qe_rv_i-1\n\t"
                   ".endr\n\t"
                   ".option pop\n"
                   "2:\n\t"
                   "add %[s01], %[s01], t3\n\t"
                   "srai t3, t3, 16\n\t"
                   "add %[h1], %[h1], t3\n\t"
                   "add %[s23], %[s23], t4\n\t"
                   "srai t4, t4, 16\n\t"
                   "add %[h3], %[h3], t4\n"
                   "1:\n\t"
                   "lw t0, 0(%[w])\n\t"              /* a chunk: 4 L, 0 ends the group */
                   "addi %[w], %[w], 4\n\t"
                   "beqz t0, 9f\n\t"
                   "add %[x], %[x], t0\n\t"
                   "slli t1, t0, 1\n\t"
                   "add %[w], %[w], t1\n\t"
                   "slli t2, t0, 3\n\t"
                   "sub t2, t2, t0\n\t"
                   "sub t2, t5, t2\n\t"
                   "lui t3, 8\n\t"
                   "lui t4, 8\n\t"
                   "addi %[n], %[n], 1\n\t"
                   "jr t2\n"
                   "9:\n\t"                          /* the group's accumulators */
                   "slli %[n], %[n], 15\n\t"
                   "slli t0, %[h1], 16\n\t"
                   "sub %[s01], %[s01], t0\n\t"
                   "sub %[s01], %[s01], %[n]\n\t"
                   "lw t0, 4(%[bias])\n\t"
                   "add %[h1], %[h1], t0\n\t"
                   "slli t0, %[h3], 16\n\t"
                   "sub %[s23], %[s23], t0\n\t"
                   "sub %[s23], %[s23], %[n]\n\t"
                   "lw t0, 12(%[bias])\n\t"
                   "add %[h3], %[h3], t0\n\t"
                   QE_RV_OUT("%[s01]", "0")
                   QE_RV_OUT("%[h1]", "1")
                   QE_RV_OUT("%[s23]", "2")
                   QE_RV_OUT("%[h3]", "3")
                   "addi %[bias], %[bias], 16\n\t"
                   "addi %[out], %[out], 4\n\t"
                   "bne %[out], %[end], 0b\n\t"
                   "j 8f\n"
                   QE_RV_SAT("%[s01]", "0")
                   QE_RV_SAT("%[h1]", "1")
                   QE_RV_SAT("%[s23]", "2")
                   QE_RV_SAT("%[h3]", "3")
                   "8:"
                   : [w] "+r"(w), [bias] "+r"(bias), [out] "+r"(out), [x] "=&r"(x),
                     [s01] "=&r"(s01), [h1] "=&r"(h1), [s23] "=&r"(s23), [h3] "=&r"(h3),
                     [n] "=&r"(chunks)
                   : [xb] "r"(g->xb), [end] "r"(g->out_end), [lo] "r"(g->lo), [span] "r"(g->span),
                     [mul] "r"(g->mul), [add] "r"(g->add), [steps] "r"(g->steps),
                     [amin] "r"(g->act_min), [amax] "r"(g->act_max),
                     [depth] "i"(QE_FC_PACKED_MAX_DEPTH)
                   : "t0", "t1", "t2", "t3", "t4", "t5", "memory");
    return w;
}
#undef QE_RV_OUT
#undef QE_RV_SAT

/* The byte-lane layout (fully_connected.h, qe_fully_connected_s8_bytes: the layers deeper than
 * QE_FC_PACKED_MAX_DEPTH): S_0..S_3 of one row group over x[0 .. x_end) (a multiple of 8 inputs,
 * >= 8), eight inputs a pass: per input LW of x, LW of the word, then per row MUL and ADD and
 * between rows SRLI 8 (13 instructions per 4 MACs; the pointers move once a pass). cortex-m0's
 * file combines the sums (acc = bias' - 128 X + S_k - 256 S_(k+1)) and runs the output stage. */
#define QE_FC_BYTES_GROUP_OWN 1

#define QE_RV_BYTES_ONE(K)                                                        \
    "lw t0, 4*" K "(%[x])\n\t"                                                    \
    "lw t1, 4*" K "(%[w])\n\t"                                                    \
    "mul t2, t1, t0\n\t"                                                         \
    "srli t1, t1, 8\n\t"                                                         \
    "add %[s0], %[s0], t2\n\t"                                                   \
    "mul t2, t1, t0\n\t"                                                         \
    "srli t1, t1, 8\n\t"                                                         \
    "add %[s1], %[s1], t2\n\t"                                                   \
    "mul t2, t1, t0\n\t"                                                         \
    "srli t1, t1, 8\n\t"                                                         \
    "add %[s2], %[s2], t2\n\t"                                                   \
    "mul t2, t1, t0\n\t"                                                         \
    "add %[s3], %[s3], t2\n\t"

static const uint32_t *bytes_group(const int32_t *x, const int32_t *x_end, const uint32_t *w,
                                   uint32_t s[4])
{
    uint32_t s0 = 0u, s1 = 0u, s2 = 0u, s3 = 0u;
    __asm volatile("1:\n\t"
                   QE_RV_BYTES_ONE("0") QE_RV_BYTES_ONE("1") QE_RV_BYTES_ONE("2")
                   QE_RV_BYTES_ONE("3") QE_RV_BYTES_ONE("4") QE_RV_BYTES_ONE("5")
                   QE_RV_BYTES_ONE("6") QE_RV_BYTES_ONE("7")
                   "addi %[x], %[x], 32\n\t"
                   "addi %[w], %[w], 32\n\t"
                   "bne %[x], %[end], 1b\n\t"
                   : [x] "+r"(x), [w] "+r"(w), [s0] "+r"(s0), [s1] "+r"(s1), [s2] "+r"(s2),
                     [s3] "+r"(s3)
                   : [end] "r"(x_end)
                   : "t0", "t1", "t2", "memory");
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
    return w;
}
#undef QE_RV_BYTES_ONE
#endif

#include "../cortex-m0/fully_connected.c"
