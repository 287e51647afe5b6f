/* nRF51 family (nRF51822, Cortex-M0 at 16 MHz, no FPU): the UART at 0x40002000 on the BBC
 * micro:bit's USB serial pins (P0.24 TX, P0.25 RX), QEMU's serial port 0 on the emulated
 * `microbit`, the interface chip's (DAPLink's) USB virtual COM port on a real micro:bit v1.x.
 * Everything else is the shared Cortex-M port (firmware/ports/cortex-m/).
 *
 * On silicon (board file microbit-v1: -DQE_NRF51_SILICON -DQE_CORTEXM_FAMILY_COST
 * -DQE_SEMIHOSTING=0) three things differ from the emulator:
 *  - The 16 MHz crystal oscillator (HFXO) is started first: after reset the nRF51 runs from its
 *    internal RC oscillator (HFINT, a few % off), too inaccurate for a UART at 115200 baud and
 *    for cycle counts that should mean 62.5 ns each.
 *  - The UART's pins are also set up in the GPIO block (TXD output driven high, RXD input), as
 *    the nRF51 Reference Manual asks, so the line idles high whether or not the UART drives it.
 *  - Cost: the nRF51's Cortex-M0 has no SysTick (Nordic left the optional timer out), so the
 *    shared port's SysTick counter would read nothing. TIMER0 counts instead: 32-bit mode,
 *    prescaler 0, i.e. the 16 MHz peripheral clock, which is the CPU clock (HFCLK from the
 *    crystal): one tick = one CPU cycle. It is cleared and started per measurement and read by a
 *    CAPTURE task; CC[1] = 0xFFFFFFFF flags a measurement too long to count (268 s: reported as
 *    0xFFFFFFFF, saturated). QEMU models TIMER0 on its virtual clock (so the emulated board keeps
 *    SysTick and its exact instruction counts). */
#include <stdint.h>

#include "cortexm.h"

#define UART0_BASE 0x40002000u
#define UART_STARTRX QE_REG(UART0_BASE + 0x000u)
#define UART_STARTTX QE_REG(UART0_BASE + 0x008u)
#define UART_RXDRDY QE_REG(UART0_BASE + 0x108u)
#define UART_TXDRDY QE_REG(UART0_BASE + 0x11Cu)
#define UART_INTENSET QE_REG(UART0_BASE + 0x304u)
#define UART_ENABLE QE_REG(UART0_BASE + 0x500u)
#define UART_PSELTXD QE_REG(UART0_BASE + 0x50Cu)
#define UART_PSELRXD QE_REG(UART0_BASE + 0x514u)
#define UART_RXD QE_REG(UART0_BASE + 0x518u)
#define UART_TXD QE_REG(UART0_BASE + 0x51Cu)
#define UART_BAUDRATE QE_REG(UART0_BASE + 0x524u)

#define INT_RXDRDY (1u << 2)

const int qe_uart_irq = 2;   /* UART0 */

#define UART_TX_PIN 24u
#define UART_RX_PIN 25u

#if defined(QE_NRF51_SILICON)
#define CLOCK_BASE 0x40000000u
#define CLOCK_TASKS_HFCLKSTART QE_REG(CLOCK_BASE + 0x000u)
#define CLOCK_EVENTS_HFCLKSTARTED QE_REG(CLOCK_BASE + 0x100u)
#define CLOCK_XTALFREQ QE_REG(CLOCK_BASE + 0x550u)
#define CLOCK_XTALFREQ_16MHZ 0xFFu

#define GPIO_BASE 0x50000000u
#define GPIO_OUTSET QE_REG(GPIO_BASE + 0x508u)
#define GPIO_PIN_CNF(n) QE_REG(GPIO_BASE + 0x700u + 4u * (n))
#define PIN_CNF_DIR_OUTPUT (1u << 0)
#define PIN_CNF_INPUT_DISCONNECT (1u << 1)
#endif

/* Before .data/.bss: registers only. */
void qe_family_early_init(void)
{
#if defined(QE_NRF51_SILICON)
    CLOCK_XTALFREQ = CLOCK_XTALFREQ_16MHZ;   /* the micro:bit v1's crystal */
    CLOCK_EVENTS_HFCLKSTARTED = 0u;
    CLOCK_TASKS_HFCLKSTART = 1u;
    while (CLOCK_EVENTS_HFCLKSTARTED == 0u) {
    }
#endif
}

void qe_uart_init(void)
{
#if defined(QE_NRF51_SILICON)
    GPIO_OUTSET = 1u << UART_TX_PIN;
    GPIO_PIN_CNF(UART_TX_PIN) = PIN_CNF_DIR_OUTPUT | PIN_CNF_INPUT_DISCONNECT;
    GPIO_PIN_CNF(UART_RX_PIN) = 0u;          /* input, buffer connected, no pull */
#endif
    UART_PSELTXD = UART_TX_PIN;    /* the micro:bit's USB serial pins */
    UART_PSELRXD = UART_RX_PIN;
    UART_BAUDRATE = 0x01D7E000u;   /* 115200 baud (ignored by the emulator) */
    UART_ENABLE = 4u;
    UART_INTENSET = INT_RXDRDY;
    UART_STARTTX = 1u;
    UART_STARTRX = 1u;
}

int qe_uart_rx_ready(void)
{
    return UART_RXDRDY != 0u;
}

uint8_t qe_uart_rx(void)
{
    UART_RXDRDY = 0u;              /* clear first: reading RXD raises it again for the next byte */
    return (uint8_t)UART_RXD;
}

void qe_uart_tx(uint8_t byte)
{
    UART_TXDRDY = 0u;
    UART_TXD = byte;
    while (UART_TXDRDY == 0u) {
    }
}

void qe_uart_rx_irq_clear(void)
{
    /* The interrupt follows the RXDRDY event, which qe_uart_rx() clears. */
}

#if defined(QE_CORTEXM_FAMILY_COST)
/* ------------------------------------------------------------------- cost: TIMER0, cycles */
#define TIMER0_BASE 0x40008000u
#define TIMER_TASKS_START QE_REG(TIMER0_BASE + 0x000u)
#define TIMER_TASKS_STOP QE_REG(TIMER0_BASE + 0x004u)
#define TIMER_TASKS_CLEAR QE_REG(TIMER0_BASE + 0x00Cu)
#define TIMER_TASKS_CAPTURE0 QE_REG(TIMER0_BASE + 0x040u)
#define TIMER_EVENTS_COMPARE1 QE_REG(TIMER0_BASE + 0x144u)
#define TIMER_SHORTS QE_REG(TIMER0_BASE + 0x200u)
#define TIMER_INTENCLR QE_REG(TIMER0_BASE + 0x308u)
#define TIMER_MODE QE_REG(TIMER0_BASE + 0x504u)
#define TIMER_BITMODE QE_REG(TIMER0_BASE + 0x508u)
#define TIMER_PRESCALER QE_REG(TIMER0_BASE + 0x510u)
#define TIMER_CC0 QE_REG(TIMER0_BASE + 0x540u)
#define TIMER_CC1 QE_REG(TIMER0_BASE + 0x544u)
#define TIMER_BITMODE_32 3u

void qe_family_cost_init(void)
{
    TIMER_TASKS_STOP = 1u;
    TIMER_INTENCLR = 0xFFFFFFFFu;   /* events only, no interrupts */
    TIMER_SHORTS = 0u;
    TIMER_MODE = 0u;                /* timer (counts the prescaled clock), not counter */
    TIMER_BITMODE = TIMER_BITMODE_32;
    TIMER_PRESCALER = 0u;           /* 16 MHz / 2^0 */
    TIMER_CC1 = 0xFFFFFFFFu;        /* COMPARE[1]: the count ran out */
    TIMER_TASKS_CLEAR = 1u;
}

void qe_family_cost_start(void)
{
    TIMER_TASKS_STOP = 1u;
    TIMER_TASKS_CLEAR = 1u;
    TIMER_EVENTS_COMPARE1 = 0u;
    TIMER_TASKS_START = 1u;
}

uint32_t qe_family_cost_stop(void)
{
    uint32_t ticks;

    TIMER_TASKS_CAPTURE0 = 1u;
    ticks = TIMER_CC0;
    TIMER_TASKS_STOP = 1u;
    return TIMER_EVENTS_COMPARE1 != 0u ? 0xFFFFFFFFu : ticks;
}
#endif /* QE_CORTEXM_FAMILY_COST */
