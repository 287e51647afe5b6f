/* FULLY_CONNECTED, optimized variant "avr" (see ../README.md): qe_fully_connected_s8_avr for
 * 8-bit AVR cores with the hardware multiplier (avr5: ATmega328P), on the generator's chunked
 * stream (../../fully_connected.h, qe_fc_s8_avr_params_t): int8 weights in flash with both zero
 * points folded in, four rows per pass, the depth cut by the generator into chunks whose sums
 * provably fit 16 bits.
 *
 * Per input of a chunk (qe_avr_fc_dot4, below): one LD of the input, then per row LPM of the
 * weight, MULS (8 x 8 -> 16, signed) and a 16-bit ADD/ADC into the row's chunk sum: 33 cycles per
 * 4 MACs with the loop (8.25 / MAC). The first input of a chunk moves the products in (MOVW)
 * instead of adding; at the end of a chunk each row's 16-bit sum is sign-extended into its 24-bit
 * running sum (6 cycles per row). All 16 + 12 sums live in registers.
 *
 * Why the integers are the reference's: a chunk's true sum lies in int16 for every input (the
 * generator's bound), so the 16-bit sum, which wraps modulo 2^16 in between, ends exact; the
 * rows' whole dot products lie in 24 bits (sum |w'| <= 65535), so the 24-bit running sums,
 * wrapping likewise, end exact too; acc = bias' + dot is then the reference's int32 accumulator
 * (fully_connected.h). The output stage is requant.h's. Without __AVR__ (the host) the dot
 * product is the same walk in C with the same 16- and 24-bit wrapping sums, so the host tests
 * (ASan/UBSan) cover the layout and the chunking too. The other FULLY_CONNECTED functions are the
 * reference's, included below with the avr one renamed out of the way (*_reference, which the
 * tests compare against). */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected.h"
#include "../../../requant.h"

#define qe_fully_connected_s8_avr qe_fully_connected_s8_avr_reference
#include "../../fully_connected.c"
#undef qe_fully_connected_s8_avr

/* sums[r] = sum_d w'[r][d] * x[d] for one row group's stream at w (the four rows' dot products,
 * sign-extended from 24 bits); returns the stream past the group's 0 byte. */
const QE_FLASH int8_t *qe_avr_fc_dot4(const int8_t *x, const QE_FLASH int8_t *w, int32_t *sums);

#if defined(__AVR__)

#if !defined(__AVR_HAVE_MUL__)
#error "the avr kernels need the hardware multiplier (MULS): avr4/avr5/avr6 cores"
#endif

/* avr-gcc's ABI: x in r24:25, w in r22:23, sums in r20:21, the result in r24:25; r2-r17, r28-r29
 * are the callee's to save, r1 must be 0 on return. Registers here: X = x, Z = w, Y = sums;
 * chunk sums r2:3, r4:5, r6:7, r8:9; running sums r10-12, r13-15, r16-18, r19-21 (low byte
 * first); r23 the chunk's length, r24 the input, r25 the weight (MULS takes r16-r31), r22 a sign
 * byte. */
#define QE_AVR_MAC_FIRST(LO) "lpm r25, Z+\n\tmuls r24, r25\n\tmovw " LO ", r0\n\t"
#define QE_AVR_MAC(LO, HI) "lpm r25, Z+\n\tmuls r24, r25\n\tadd " LO ", r0\n\tadc " HI ", r1\n\t"
#define QE_AVR_FLUSH(LO, HI, S0, S1, S2)                                                 \
    "mov r22, " HI "\n\tlsl r22\n\tsbc r22, r22\n\t"                                     \
    "add " S0 ", " LO "\n\tadc " S1 ", " HI "\n\tadc " S2 ", r22\n\t"
#define QE_AVR_STORE(S0, S1, S2)                                                         \
    "st Y+, " S0 "\n\tst Y+, " S1 "\n\tst Y+, " S2 "\n\t"                                \
    "mov r22, " S2 "\n\tlsl r22\n\tsbc r22, r22\n\tst Y+, r22\n\t"

__asm__(
    ".section .text.qe_avr_fc_dot4,\"ax\",@progbits\n"
    ".global qe_avr_fc_dot4\n"
    ".type qe_avr_fc_dot4, @function\n"
    "qe_avr_fc_dot4:\n\t"
    "push r2\n\tpush r3\n\tpush r4\n\tpush r5\n\tpush r6\n\tpush r7\n\tpush r8\n\tpush r9\n\t"
    "push r10\n\tpush r11\n\tpush r12\n\tpush r13\n\tpush r14\n\tpush r15\n\tpush r16\n\t"
    "push r17\n\tpush r28\n\tpush r29\n\t"
    "movw r26, r24\n\t"
    "movw r30, r22\n\t"
    "movw r28, r20\n\t"
    "clr r10\n\tclr r11\n\tclr r12\n\tclr r13\n\tclr r14\n\tclr r15\n\t"
    "clr r16\n\tclr r17\n\tclr r18\n\tclr r19\n\tclr r20\n\tclr r21\n"
    "1:\n\t"                                    /* a chunk: its length, 0 ends the group */
    "lpm r23, Z+\n\t"
    "tst r23\n\t"
    "breq 4f\n\t"
    "ld r24, X+\n\t"                            /* its first input: the products moved in */
    QE_AVR_MAC_FIRST("r2") QE_AVR_MAC_FIRST("r4") QE_AVR_MAC_FIRST("r6") QE_AVR_MAC_FIRST("r8")
    "dec r23\n\t"
    "breq 3f\n"
    "2:\n\t"                                    /* the others: added, 16 bits */
    "ld r24, X+\n\t"
    QE_AVR_MAC("r2", "r3") QE_AVR_MAC("r4", "r5") QE_AVR_MAC("r6", "r7") QE_AVR_MAC("r8", "r9")
    "dec r23\n\t"
    "brne 2b\n"
    "3:\n\t"                                    /* end of chunk: into the 24-bit sums */
    QE_AVR_FLUSH("r2", "r3", "r10", "r11", "r12") QE_AVR_FLUSH("r4", "r5", "r13", "r14", "r15")
    QE_AVR_FLUSH("r6", "r7", "r16", "r17", "r18") QE_AVR_FLUSH("r8", "r9", "r19", "r20", "r21")
    "rjmp 1b\n"
    "4:\n\t"
    QE_AVR_STORE("r10", "r11", "r12") QE_AVR_STORE("r13", "r14", "r15")
    QE_AVR_STORE("r16", "r17", "r18") QE_AVR_STORE("r19", "r20", "r21")
    "movw r24, r30\n\t"
    "clr r1\n\t"
    "pop r29\n\tpop r28\n\tpop r17\n\tpop r16\n\tpop r15\n\tpop r14\n\tpop r13\n\tpop r12\n\t"
    "pop r11\n\tpop r10\n\tpop r9\n\tpop r8\n\tpop r7\n\tpop r6\n\tpop r5\n\tpop r4\n\t"
    "pop r3\n\tpop r2\n\t"
    "ret\n"
    ".size qe_avr_fc_dot4, .-qe_avr_fc_dot4\n"
    ".text\n");

/* The output stage for right shifts (shift = -e, e >= 1), four outputs per call (one save of the
 * registers), in place of requant.h's (whose int64 product is a library call here: ~900 cycles
 * an output). The exact formula of the cortex-m0 and cortex-m-dsp variants (cortex-m-dsp/dsp.h,
 * requant_right_t, says why it is TFLM's double rounding):
 *     scaled = floor((x * m + R) / 2^(31+e)),  R = 2^30 + 2^(30+e) - (x < 0) * 2^31,
 * then requant.h's clamp to [act_min - offset, act_max - offset] (max first, then min) and
 * + offset. Here x * m is the full 64-bit product: x's bytes as unsigned times m, four rows of
 * four MULs (each row's 40 bits built without carries out), minus m * 2^32 when x < 0; R's low
 * word is one byte (its bits 30, 31), its high word 2^(e-2) (- 1 when x < 0); the product's high
 * word floor((x * m + R) / 2^32) shifted right by e - 1 (bytes, then bits) is `scaled`. The
 * output is the low byte of the clamped value + offset (which lies in [act_min, act_max]). */
typedef struct {
    uint32_t m;                 /*  0: the multiplier (>= 0) */
    uint8_t rlo[2];             /*  4: R's low word's top byte, for x >= 0 and x < 0 */
    uint32_t rhi[2];            /*  6: R's high word, for x >= 0 and x < 0 */
    uint8_t shift_bytes;        /* 14: (e - 1) / 8 */
    uint8_t shift_bits;         /* 15: (e - 1) % 8 */
    int32_t lo_bound;           /* 16: act_min - offset */
    int32_t hi_bound;           /* 20: act_max - offset */
    uint8_t offset;             /* 24: the offset's low byte */
} qe_avr_requant_t;

typedef char qe_avr_requant_layout[(offsetof(qe_avr_requant_t, rlo) == 4
                                     && offsetof(qe_avr_requant_t, rhi) == 6
                                     && offsetof(qe_avr_requant_t, shift_bytes) == 14
                                     && offsetof(qe_avr_requant_t, lo_bound) == 16
                                     && offsetof(qe_avr_requant_t, hi_bound) == 20
                                     && offsetof(qe_avr_requant_t, offset) == 24) ? 1 : -1];

/* out[0 .. count-1] = the output stage of acc[0 .. count-1]; count 1..4 */
void qe_avr_requant4(const int32_t *acc, int8_t *out, uint8_t count, const qe_avr_requant_t *r);

static int qe_avr_requant_init(qe_avr_requant_t *r, int32_t multiplier, int32_t shift,
                               int32_t offset, int32_t act_min, int32_t act_max)
{
    const uint8_t e = (uint8_t)(shift < 0 ? -shift : 1);     /* (shift >= 0: not used) */
    r->m = (uint32_t)multiplier;
    if (e == 1u) {              /* R = 2^30 + 2^31, or 2^30 for x < 0: all in the low word */
        r->rlo[0] = 0xC0u;
        r->rlo[1] = 0x40u;
        r->rhi[0] = 0u;
        r->rhi[1] = 0u;
    } else {                    /* 2^30 + 2^(30+e); for x < 0 that - 2^31 = 2^(30+e) - 2^30 */
        r->rlo[0] = 0x40u;
        r->rlo[1] = 0xC0u;
        r->rhi[0] = (uint32_t)1u << (e - 2u);
        r->rhi[1] = ((uint32_t)1u << (e - 2u)) - 1u;
    }
    r->shift_bytes = (uint8_t)((e - 1u) >> 3);
    r->shift_bits = (uint8_t)((e - 1u) & 7u);
    r->lo_bound = (int32_t)((uint32_t)act_min - (uint32_t)offset);
    r->hi_bound = (int32_t)((uint32_t)act_max - (uint32_t)offset);
    r->offset = (uint8_t)offset;
    return shift <= -1 && multiplier >= 0;
}

/* row I of the product: t = r12..r16 = a_I * m (40 bits), m in r18..r21, zero in r2 */
#define QE_AVR_ROW(A)                                                                    \
    "mul " A ", r18\n\tmovw r12, r0\n\tmul " A ", r20\n\tmovw r14, r0\n\tclr r16\n\t"    \
    "mul " A ", r19\n\tadd r13, r0\n\tadc r14, r1\n\tadc r15, r2\n\t"                    \
    "mul " A ", r21\n\tadd r15, r0\n\tadc r16, r1\n\t"

/* avr-gcc's ABI: acc in r24:25, out in r22:23, count in r20, r in r18:19. X = acc, Y = out,
 * Z = r; m in r18..r21, x in r22..r25, the product in r4..r11 (low byte first), r17 the count. */
__asm__(
    ".section .text.qe_avr_requant4,\"ax\",@progbits\n"
    ".global qe_avr_requant4\n"
    ".type qe_avr_requant4, @function\n"
    "qe_avr_requant4:\n\t"
    "push r2\n\tpush r3\n\tpush r4\n\tpush r5\n\tpush r6\n\tpush r7\n\tpush r8\n\tpush r9\n\t"
    "push r10\n\tpush r11\n\tpush r12\n\tpush r13\n\tpush r14\n\tpush r15\n\tpush r16\n\t"
    "push r17\n\tpush r28\n\tpush r29\n\t"
    "movw r26, r24\n\t"
    "movw r28, r22\n\t"
    "mov r17, r20\n\t"
    "movw r30, r18\n\t"
    "ld r18, Z\n\tldd r19, Z+1\n\tldd r20, Z+2\n\tldd r21, Z+3\n\t"
    "clr r2\n"
    "1:\n\t"
    "ld r22, X+\n\tld r23, X+\n\tld r24, X+\n\tld r25, X+\n\t"
    /* row 0 straight into p0..p4 */
    "mul r22, r18\n\tmovw r4, r0\n\tmul r22, r20\n\tmovw r6, r0\n\tclr r8\n\t"
    "mul r22, r19\n\tadd r5, r0\n\tadc r6, r1\n\tadc r7, r2\n\t"
    "mul r22, r21\n\tadd r7, r0\n\tadc r8, r1\n\t"
    "clr r9\n\tclr r10\n\tclr r11\n\t"
    QE_AVR_ROW("r23")
    "add r5, r12\n\tadc r6, r13\n\tadc r7, r14\n\tadc r8, r15\n\tadc r9, r16\n\tadc r10, r2\n\t"
    QE_AVR_ROW("r24")
    "add r6, r12\n\tadc r7, r13\n\tadc r8, r14\n\tadc r9, r15\n\tadc r10, r16\n\tadc r11, r2\n\t"
    QE_AVR_ROW("r25")
    "add r7, r12\n\tadc r8, r13\n\tadc r9, r14\n\tadc r10, r15\n\tadc r11, r16\n\t"
    /* x < 0: the unsigned bytes were x + 2^32, so subtract m * 2^32; and pick R */
    "sbrs r25, 7\n\t"
    "rjmp 2f\n\t"
    "sub r8, r18\n\tsbc r9, r19\n\tsbc r10, r20\n\tsbc r11, r21\n\t"
    "ldd r12, Z+5\n\tldd r13, Z+10\n\tldd r14, Z+11\n\tldd r15, Z+12\n\tldd r16, Z+13\n\t"
    "rjmp 3f\n"
    "2:\n\t"
    "ldd r12, Z+4\n\tldd r13, Z+6\n\tldd r14, Z+7\n\tldd r15, Z+8\n\tldd r16, Z+9\n"
    "3:\n\t"
    "add r7, r12\n\tadc r8, r13\n\tadc r9, r14\n\tadc r10, r15\n\tadc r11, r16\n\t"
    /* the high word r8..r11 >> (e - 1), arithmetic: whole bytes, then bits */
    "ldd r12, Z+14\n\t"
    "tst r12\n\t"
    "breq 5f\n"
    "4:\n\t"
    "mov r8, r9\n\tmov r9, r10\n\tmov r10, r11\n\tlsl r11\n\tsbc r11, r11\n\t"
    "dec r12\n\t"
    "brne 4b\n"
    "5:\n\t"
    "ldd r12, Z+15\n\t"
    "tst r12\n\t"
    "breq 7f\n"
    "6:\n\t"
    "asr r11\n\tror r10\n\tror r9\n\tror r8\n\t"
    "dec r12\n\t"
    "brne 6b\n"
    "7:\n\t"
    /* clamp: max with lo_bound, then min with hi_bound (requant.h's order), then + offset */
    "ldd r12, Z+16\n\tldd r13, Z+17\n\tldd r14, Z+18\n\tldd r15, Z+19\n\t"
    "cp r8, r12\n\tcpc r9, r13\n\tcpc r10, r14\n\tcpc r11, r15\n\t"
    "brge 8f\n\t"
    "movw r8, r12\n\tmovw r10, r14\n"
    "8:\n\t"
    "ldd r12, Z+20\n\tldd r13, Z+21\n\tldd r14, Z+22\n\tldd r15, Z+23\n\t"
    "cp r12, r8\n\tcpc r13, r9\n\tcpc r14, r10\n\tcpc r15, r11\n\t"
    "brge 9f\n\t"
    "mov r8, r12\n"
    "9:\n\t"
    "ldd r12, Z+24\n\t"
    "add r8, r12\n\t"
    "st Y+, r8\n\t"
    "dec r17\n\t"
    "breq 10f\n\t"
    "rjmp 1b\n"
    "10:\n\t"
    "clr r1\n\t"
    "pop r29\n\tpop r28\n\tpop r17\n\tpop r16\n\tpop r15\n\tpop r14\n\tpop r13\n\tpop r12\n\t"
    "pop r11\n\tpop r10\n\tpop r9\n\tpop r8\n\tpop r7\n\tpop r6\n\tpop r5\n\tpop r4\n\t"
    "pop r3\n\tpop r2\n\t"
    "ret\n"
    ".size qe_avr_requant4, .-qe_avr_requant4\n"
    ".text\n");

#else /* not AVR (the host): the same walk in C, with the same wrapping 16- and 24-bit sums */

const QE_FLASH int8_t *qe_avr_fc_dot4(const int8_t *x, const QE_FLASH int8_t *w, int32_t *sums)
{
    uint32_t run[QE_FC_AVR_ROWS] = {0u, 0u, 0u, 0u};
    uint32_t len, r;
    while ((len = (uint8_t)*w++) != 0u) {
        uint16_t chunk[QE_FC_AVR_ROWS] = {0u, 0u, 0u, 0u};
        for (; len > 0u; --len, ++x) {
            for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
                /* MULS: the exact 16-bit product; ADD/ADC: modulo 2^16 */
                const int16_t prod = (int16_t)((int16_t)*w++ * (int16_t)*x);
                chunk[r] = (uint16_t)(chunk[r] + (uint16_t)prod);
            }
        }
        for (r = 0; r < QE_FC_AVR_ROWS; ++r) {   /* sign-extended into the 24-bit sum */
            const uint32_t c = chunk[r];
            run[r] = (run[r] + (c & 0x8000u ? c | 0xFFFF0000u : c)) & 0xFFFFFFu;
        }
    }
    for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
        sums[r] = (int32_t)(run[r] & 0x7FFFFFu) - (int32_t)(run[r] & 0x800000u);
    }
    return w;
}

#endif /* __AVR__ */

void qe_fully_connected_s8_avr(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                               const QE_FLASH int8_t *stream, const QE_FLASH int32_t *bias,
                               int8_t *output)
{
    const uint16_t n = p->accum_depth, rows = p->output_depth;
    const int32_t multiplier = p->output_multiplier, shift = p->output_shift;
    const int32_t offset = p->output_offset, act_min = p->activation_min,
                  act_max = p->activation_max;
#if defined(__AVR__)
    qe_avr_requant_t rq;
    const int fast = qe_avr_requant_init(&rq, multiplier, shift, offset, act_min, act_max);
#endif
    uint16_t b, o, r;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + (uint32_t)b * n;
        int8_t *out = output + (uint32_t)b * rows;
        const QE_FLASH int8_t *s = stream;
        const QE_FLASH int32_t *bp = bias;
        for (o = 0; o < rows; o += QE_FC_AVR_ROWS, bp += QE_FC_AVR_ROWS) {
            int32_t acc[QE_FC_AVR_ROWS];
            const uint16_t left = (uint16_t)(rows - o);
            const uint16_t count = (left < QE_FC_AVR_ROWS) ? left : (uint16_t)QE_FC_AVR_ROWS;
            s = qe_avr_fc_dot4(in, s, acc);
            for (r = 0; r < count; ++r) {
                /* bias' + dot is the reference's accumulator (no overflow: fully_connected.h) */
                acc[r] += bp[r];
            }
#if defined(__AVR__)
            if (fast) {
                qe_avr_requant4(acc, out + o, (uint8_t)count, &rq);
                continue;
            }
#endif
            for (r = 0; r < count; ++r) {
                out[o + r] = (int8_t)qe_requantize_output(acc[r], multiplier, shift, offset,
                                                          act_min, act_max);
            }
        }
    }
}
