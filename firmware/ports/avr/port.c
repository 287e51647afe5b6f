/* The AVR port (ATmega328P and its avr5 relatives with USART0 and a 16-bit Timer1), bare metal
 * on avr-libc's start-up code. Built with -std=gnu99 so the model's constants can live in flash
 * (firmware/core/qe_flash.h: QE_FLASH = __flash).
 *
 * Link: USART0, 8N1, double speed (U2X0), QE_AVR_BAUD (default 1 Mbaud: exact at 16 MHz; simavr
 * takes any rate). Polled: qe_port_read_byte() waits for RXC0 and never returns -1 (a UART has no
 * end of file). simavr notices a firmware polling its UART and sleeps the host thread meanwhile,
 * so an idle board does not spin the host's CPU. On a real board the receive path must keep up
 * with the line, because USART0 holds only two received bytes: handing one byte of a frame to the
 * protocol (qe_port_read_byte -> qe_rx_push -> qe_rx_poll) takes 185-234 cycles at -Os (measured
 * in simavr from reading UDR0 to polling again: tests/test_ports_real.py), while at 1 Mbaud a byte
 * arrives every 160 cycles and a frame would overrun within a few bytes (simavr itself queues
 * input, so the emulated board never notices). The Arduino Uno board file therefore uses
 * 250 kbaud (-DQE_AVR_BAUD=250000UL: also exact at 16 MHz, 640 cycles per byte).
 *
 * Start-up on a real board: after a watchdog reset the watchdog stays enabled (WDRF forces WDE),
 * and a boot loader may leave it so; it is switched off first thing in qe_port_init().
 *
 * Cost: processor cycles from Timer1 at clk/1 (normal mode, 16-bit), restarted for every
 * measurement (stopped, cleared, pending overflow cleared, started), so equal work gives equal
 * counts; its overflows are counted by the TIMER1_OVF interrupt, the only interrupt enabled, so
 * measurements may be up to 2^32 - 1 cycles (268 s at 16 MHz; saturated beyond). The count is
 * everything between starting the timer and reading it: the model, the calls into and out of
 * it and one overflow interrupt per 65536 cycles (a few tens of cycles each). Nothing is
 * subtracted: that overhead is constant per call and per overflow, but its exact size depends
 * on the code the compiler emits, so no fixed number could be justified; it is tiny against
 * an inference (hundreds of thousands of cycles).
 *
 * Memory: flash used = __data_load_end (the end of .text plus the .data image, a flash
 * address from the linker script), static RAM = .data + .bss + .noinit (__data_start ..
 * __heap_start). There is no heap: all RAM above __heap_start up to RAMEND is the stack, and
 * it is painted at reset (.init3, before main) so qe_port_stack_used() can count the bytes the
 * stack never reached. */
#include <stdint.h>

#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/wdt.h>

#include "qe_protocol.h"
#include "qe_port.h"

#if QE_COST_UNIT != QE_COST_CYCLES
#error "the AVR port counts cycles (Timer1 on the CPU clock): set cost_unit = \"cycles\""
#endif

#ifndef QE_AVR_BAUD
#define QE_AVR_BAUD 1000000UL
#endif
/* Double speed: baud = F_CPU / (8 * (UBRR + 1)). Only exact rates, or close ones (< 2 %). */
#define QE_AVR_UBRR ((((unsigned long)(QE_CLOCK_HZ)) + 4UL * (QE_AVR_BAUD)) / (8UL * (QE_AVR_BAUD)) - 1UL)
#define QE_AVR_BAUD_REAL (((unsigned long)(QE_CLOCK_HZ)) / (8UL * (QE_AVR_UBRR + 1UL)))
typedef char qe_avr_baud_check[
    (QE_AVR_UBRR <= 4095UL && QE_AVR_BAUD_REAL * 50UL >= (QE_AVR_BAUD) * 49UL
     && QE_AVR_BAUD_REAL * 50UL <= (QE_AVR_BAUD) * 51UL) ? 1 : -1];

/* The stack paint: a byte that code rarely leaves on the stack (not 0x00 or 0xFF). */
#define QE_AVR_STACK_PAINT 0xC5
#define QE_AVR_STR2(x) #x
#define QE_AVR_STR(x) QE_AVR_STR2(x)

extern char __data_start[], __heap_start[], __data_load_end[];   /* avr-libc's linker script */

/* ------------------------------------------------------------------------------ stack paint */
/* Runs in .init3: after the start-up code has set SP to RAMEND and cleared r1 (.init2), before
 * .data/.bss are initialised (.init4) and main is called, so no live byte sits above
 * __heap_start yet. Paints [__heap_start, SP]. Naked (no prologue, no return: the .initN
 * sections fall through into each other) and in assembly, so nothing touches the stack. */
void qe_avr_paint_stack(void) __attribute__((naked, used, section(".init3")));
void qe_avr_paint_stack(void)
{
    __asm__ volatile(
        "    ldi r30, lo8(__heap_start)\n"
        "    ldi r31, hi8(__heap_start)\n"
        "    ldi r24, " QE_AVR_STR(QE_AVR_STACK_PAINT) "\n"
        "    in r26, __SP_L__\n"
        "    in r27, __SP_H__\n"
        "    rjmp 2f\n"
        "1:  st Z+, r24\n"
        "2:  cp r26, r30\n"       /* while SP >= Z */
        "    cpc r27, r31\n"
        "    brsh 1b\n");
}

/* ------------------------------------------------------------------------------------- init */
/* USART0 is disabled at reset; it is not written with TXEN0 off here: simavr 1.6 then clears
 * UDRE0 for good (its model never sets it again), and the first write would wait forever. */
void qe_port_init(void)
{
    MCUSR = 0;                     /* WDRF first: while it is set, WDE cannot be cleared */
    wdt_disable();
    UCSR0A = (uint8_t)_BV(U2X0);
    UBRR0 = (uint16_t)QE_AVR_UBRR;
    UCSR0C = (uint8_t)(_BV(UCSZ01) | _BV(UCSZ00));   /* 8 data bits, no parity, 1 stop bit */
    UCSR0B = (uint8_t)(_BV(RXEN0) | _BV(TXEN0));
    TIMSK1 = 0;
    TCCR1B = 0;
    TCCR1A = 0;
    sei();   /* only TIMER1_OVF is ever enabled, and only while measuring */
}

void qe_port_run(void (*fn)(void))
{
    fn();
}

/* ------------------------------------------------------------------------------------- link */
int qe_port_read_byte(void)
{
    while (!(UCSR0A & _BV(RXC0)))
        ;
    return UDR0;
}

void qe_port_write(const uint8_t *data, uint32_t n)
{
    while (n--) {
        while (!(UCSR0A & _BV(UDRE0)))
            ;
        UDR0 = *data++;
    }
}

/* ------------------------------------------------------------------------------------- cost */
static volatile uint16_t t1_overflows;   /* saturates at 0xFFFF */

ISR(TIMER1_OVF_vect)
{
    if (t1_overflows != 0xFFFFu)
        t1_overflows++;
}

void qe_port_cost_start(void)
{
    TCCR1B = 0;                    /* stopped */
    TCCR1A = 0;                    /* normal mode: count 0 .. 0xFFFF, overflow to 0 */
    TCNT1 = 0;
    TIFR1 = (uint8_t)_BV(TOV1);    /* a stale overflow flag is cleared by writing 1 */
    t1_overflows = 0;
    TIMSK1 = (uint8_t)_BV(TOIE1);
    TCCR1B = (uint8_t)_BV(CS10);   /* running on clk/1: every CPU cycle from here on counts */
}

/* TCNT1 is read while the timer still runs (simavr 1.6 reads a stopped Timer1's count as the
 * value it was started from). An overflow flag that is set but not yet counted by the interrupt
 * (interrupts are off from here) belongs before the count we read if that count is small (the
 * timer wrapped, then we read), after it if the count is large (we read, then it wrapped). */
uint32_t qe_port_cost_stop(void)
{
    uint16_t count;
    uint32_t wraps;

    cli();
    count = TCNT1;
    TCCR1B = 0;                    /* stopped */
    wraps = t1_overflows;
    if ((TIFR1 & _BV(TOV1)) && count < 0x8000u)
        wraps++;
    TIFR1 = (uint8_t)_BV(TOV1);
    TIMSK1 = 0;
    sei();
    if (wraps > 0xFFFFu)
        return 0xFFFFFFFFu;
    return (wraps << 16) | count;
}

/* ----------------------------------------------------------------------------------- memory */
uint32_t qe_port_flash_bytes(void) { return (uint32_t)(uintptr_t)__data_load_end; }

uint32_t qe_port_ram_bytes(void)
{
    return (uint32_t)((uintptr_t)__heap_start - (uintptr_t)__data_start);
}

uint32_t qe_port_stack_size(void)
{
    return (uint32_t)((uintptr_t)RAMEND + 1u - (uintptr_t)__heap_start);
}

uint32_t qe_port_stack_used(void)
{
    const volatile uint8_t *p = (const volatile uint8_t *)__heap_start;
    const volatile uint8_t *end = (const volatile uint8_t *)(RAMEND + 1);
    while (p < end && *p == QE_AVR_STACK_PAINT)
        p++;
    return (uint32_t)((uintptr_t)end - (uintptr_t)p);
}
