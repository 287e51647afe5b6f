/* Compares the avr variant's qe_fully_connected_s4_avr (firmware/core/kernels/optimized/avr/
 * fully_connected_s4.c: the LPM/SWAP/MULSU asm and the int8 kernel's asm output stage) with the
 * reference qe_fully_connected_s4 on TFLite's packing, on an ATmega328P under simavr. Used by
 * tests/test_kernels_int4.py, which writes the cases into fc_avr_cases.h (all in flash, as a
 * model's constants are: 2 KiB of RAM): per case both kernels' params, the input, the packed
 * weights and bias, and the generator's stream and bias' (avr_s4_stream).
 *
 * Output on USART0 (simavr prints it), as fc_avr_check.c's: per case a line "C <k> <0|1>" (1:
 * the outputs differ, or the variant wrote past its outputs), then the variant's output bytes in
 * hex, 32 a line; at the end "END <status>". Then the CPU sleeps with interrupts off. */
#include <stdint.h>
#include <string.h>

#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>

#include "kernels/fully_connected_s4.h"

typedef struct {
    qe_fc_s8_params_t ref;
    qe_fc_s8_avr_params_t avr;
    const QE_FLASH int8_t *x;
    const QE_FLASH uint8_t *w;          /* TFLite's packing */
    const QE_FLASH int32_t *bias;       /* QE_FLASH_NULL: none */
    const QE_FLASH uint8_t *stream;
    const QE_FLASH int32_t *bias_p;
} fc_s4_avr_case_t;

#include "fc_avr_cases.h"               /* static const QE_FLASH fc_s4_avr_case_t cases[] */

#define MAX_IN 768
#define MAX_OUT 384

static int8_t in_buf[MAX_IN];
static int8_t out_ref[MAX_OUT + 1], out_avr[MAX_OUT + 1];

static void put(char c)
{
    while (!(UCSR0A & (1 << UDRE0))) {
    }
    UDR0 = (uint8_t)c;
}

static void put_hex(uint8_t v)
{
    static const char digits[] = "0123456789abcdef";
    put(digits[v >> 4]);
    put(digits[v & 15u]);
}

static void put_u16(uint16_t v)
{
    char buf[6];
    uint8_t n = 0;
    do {
        buf[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    while (n) {
        put(buf[--n]);
    }
}

int main(void)
{
    uint16_t k, i;
    uint8_t status = 0;
    UCSR0B = (1 << TXEN0);
    for (k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        const fc_s4_avr_case_t c = cases[k];
        const uint16_t n_in = c.ref.batches * c.ref.accum_depth;
        const uint16_t n_out = c.ref.batches * c.ref.output_depth;
        uint8_t bad;
        for (i = 0; i < n_in; ++i) {
            in_buf[i] = c.x[i];
        }
        memset(out_ref, 0x5A, sizeof out_ref);
        memset(out_avr, 0xA5, sizeof out_avr);
        qe_fully_connected_s4(&c.ref, in_buf, c.w, c.bias, out_ref);
        qe_fully_connected_s4_avr(&c.avr, in_buf, c.stream, c.bias_p, out_avr);
        bad = memcmp(out_ref, out_avr, n_out) != 0 || (uint8_t)out_avr[n_out] != 0xA5u;
        status |= bad;
        put('C');
        put(' ');
        put_u16(k);
        put(' ');
        put((char)('0' + bad));
        put('\n');
        for (i = 0; i < n_out; ++i) {
            put_hex((uint8_t)out_avr[i]);
            if (i % 32u == 31u || i + 1u == n_out) {
                put('\n');
            }
        }
    }
    put('E');
    put('N');
    put('D');
    put(' ');
    put((char)('0' + status));
    put('\n');
    cli();
    sleep_mode();
    for (;;) {
    }
}
