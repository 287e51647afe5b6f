/* RP2040 family (Raspberry Pi Pico; dual Cortex-M0+, we run on core 0, core 1 stays parked in the
 * bootrom): clocks and UART0. Everything else is the shared Cortex-M port (firmware/ports/cortex-m/):
 * cost = SysTick on the processor clock (the M0+ has no DWT cycle counter), i.e. cycles of clk_sys.
 *
 * Boot: the bootrom runs boot stage 2 (boot2.S / boot2.c, the first 256 bytes of flash), which
 * sets up execute-in-place from the QSPI flash and enters Reset_Handler through our vector table;
 * Reset_Handler calls qe_family_early_init() below before touching RAM.
 *
 * Clocks (RP2040 datasheet, chapter 2.15-2.18): the bootrom leaves clk_sys and clk_ref on the ring
 * oscillator (a few MHz, imprecise). We start the 12 MHz crystal oscillator (XOSC), run clk_ref from
 * it, lock PLL_SYS at VCO 1500 MHz (12 MHz * 125) with post dividers 6 and 2, i.e. 125 MHz, switch
 * clk_sys to it and feed clk_peri (the UART's clock) from clk_sys. QE_CLOCK_HZ (the board file's
 * clock_hz) must be that 125 MHz: the UART divisor below is computed from it.
 *
 * Serial: UART0 (an ARM PL011) on GP0 (TX) and GP1 (RX), function 2, 8N1 at QE_UART_BAUD (115200),
 * FIFOs on. The Pico's own USB port would need a USB device stack (not shipped): connect a 3.3 V
 * USB-UART adapter or the Raspberry Pi Debug Probe's UART to GP0/GP1 (and GND).
 *
 * Registers are written through the RP2040's atomic aliases where a read-modify-write would
 * otherwise be needed: +0x2000 sets the written bits, +0x3000 clears them. */
#include <stdint.h>

#include "cortexm.h"

#define SET_ALIAS(addr) QE_REG((addr) + 0x2000u)
#define CLR_ALIAS(addr) QE_REG((addr) + 0x3000u)

#ifndef QE_UART_BAUD
#define QE_UART_BAUD 115200u
#endif
#if QE_CLOCK_HZ != 125000000
#error "the RP2040 port sets clk_sys = clk_peri = 125 MHz: the board's clock_hz must be 125000000"
#endif

/* ---- RESETS (2.14) */
#define RESETS_BASE 0x4000C000u
#define RESETS_RESET (RESETS_BASE + 0x0u)
#define RESETS_RESET_DONE QE_REG(RESETS_BASE + 0x8u)
#define RESET_IO_BANK0 (1u << 5)
#define RESET_PADS_BANK0 (1u << 8)
#define RESET_PLL_SYS (1u << 12)
#define RESET_UART0 (1u << 22)

/* ---- XOSC (2.16) */
#define XOSC_BASE 0x40024000u
#define XOSC_CTRL QE_REG(XOSC_BASE + 0x00u)
#define XOSC_STATUS QE_REG(XOSC_BASE + 0x04u)
#define XOSC_STARTUP QE_REG(XOSC_BASE + 0x0Cu)
#define XOSC_CTRL_FREQ_RANGE_1_15MHZ 0xAA0u
#define XOSC_CTRL_ENABLE (0xFABu << 12)
#define XOSC_STATUS_STABLE (1u << 31)
/* Start-up delay in units of 256 XOSC cycles: ~1 ms at 12 MHz, what the datasheet suggests. */
#define XOSC_STARTUP_DELAY ((12000000u / 1000u + 128u) / 256u)

/* ---- PLL_SYS (2.18) */
#define PLL_SYS_BASE 0x40028000u
#define PLL_CS (PLL_SYS_BASE + 0x0u)
#define PLL_PWR (PLL_SYS_BASE + 0x4u)
#define PLL_FBDIV_INT (PLL_SYS_BASE + 0x8u)
#define PLL_PRIM (PLL_SYS_BASE + 0xCu)
#define PLL_CS_LOCK (1u << 31)
#define PLL_PWR_PD (1u << 0)
#define PLL_PWR_POSTDIVPD (1u << 3)
#define PLL_PWR_VCOPD (1u << 5)
#define PLL_REFDIV 1u
#define PLL_FBDIV 125u          /* VCO = 12 MHz / 1 * 125 = 1500 MHz (400..1600 MHz allowed) */
#define PLL_POSTDIV1 6u         /* 1500 / 6 / 2 = 125 MHz */
#define PLL_POSTDIV2 2u

/* ---- CLOCKS (2.15): each clock has CTRL, DIV (integer part in [31:8]) and SELECTED. */
#define CLOCKS_BASE 0x40008000u
#define CLK_REF_CTRL (CLOCKS_BASE + 0x30u)
#define CLK_REF_DIV QE_REG(CLOCKS_BASE + 0x34u)
#define CLK_REF_SELECTED QE_REG(CLOCKS_BASE + 0x38u)
#define CLK_SYS_CTRL (CLOCKS_BASE + 0x3Cu)
#define CLK_SYS_DIV QE_REG(CLOCKS_BASE + 0x40u)
#define CLK_SYS_SELECTED QE_REG(CLOCKS_BASE + 0x44u)
#define CLK_PERI_CTRL (CLOCKS_BASE + 0x48u)
#define CLK_SYS_RESUS_CTRL QE_REG(CLOCKS_BASE + 0x78u)
#define CLK_REF_SRC_MASK 0x3u
#define CLK_REF_SRC_XOSC 0x2u      /* glitchless mux: SELECTED reads 1 << SRC once switched */
#define CLK_SYS_SRC_AUX 0x1u       /* SRC 0: clk_ref, 1: the aux mux */
#define CLK_SYS_AUXSRC_MASK (0x7u << 5)   /* 0: pll_sys */
#define CLK_PERI_ENABLE (1u << 11)
#define CLK_PERI_AUXSRC_CLK_SYS (0x0u << 5)
#define CLK_DIV_1 (1u << 8)

/* ---- IO_BANK0 / PADS_BANK0 (2.19) */
#define IO_BANK0_GPIO_CTRL(n) QE_REG(0x40014000u + 8u * (n) + 4u)
#define GPIO_FUNC_UART 2u
#define PADS_BANK0_GPIO(n) QE_REG(0x4001C000u + 4u + 4u * (n))
#define PAD_SCHMITT (1u << 1)
#define PAD_PUE (1u << 3)
#define PAD_DRIVE_4MA (1u << 4)
#define PAD_IE (1u << 6)

/* ---- UART0, an ARM PL011 (4.2) */
#define UART0_BASE 0x40034000u
#define UART_DR QE_REG(UART0_BASE + 0x000u)
#define UART_FR QE_REG(UART0_BASE + 0x018u)
#define UART_IBRD QE_REG(UART0_BASE + 0x024u)
#define UART_FBRD QE_REG(UART0_BASE + 0x028u)
#define UART_LCR_H QE_REG(UART0_BASE + 0x02Cu)
#define UART_CR QE_REG(UART0_BASE + 0x030u)
#define UART_IFLS QE_REG(UART0_BASE + 0x034u)
#define UART_IMSC QE_REG(UART0_BASE + 0x038u)
#define UART_ICR QE_REG(UART0_BASE + 0x044u)
#define FR_RXFE (1u << 4)
#define FR_TXFF (1u << 5)
#define LCR_H_FEN (1u << 4)
#define LCR_H_WLEN_8 (3u << 5)
#define CR_UARTEN (1u << 0)
#define CR_TXE (1u << 8)
#define CR_RXE (1u << 9)
#define INT_RX (1u << 4)     /* RX FIFO at its trigger level */
#define INT_RT (1u << 6)     /* receive timeout: bytes waiting below the trigger level */
/* Baud divisor = clk_peri / (16 * baud) in 16.6 fixed point, rounded: 125 MHz / 115200 gives
 * IBRD 67, FBRD 52 (115,207 baud, +0.006 %). */
#define UART_DIV_X128 ((8u * (QE_CLOCK_HZ)) / (QE_UART_BAUD))   /* 128 * divisor, truncated */
#define UART_IBRD_VALUE (UART_DIV_X128 >> 7)
#define UART_FBRD_VALUE (((UART_DIV_X128 & 0x7Fu) + 1u) / 2u)

const int qe_uart_irq = 20;   /* UART0_IRQ */

static void unreset(uint32_t bits)
{
    CLR_ALIAS(RESETS_RESET) = bits;
    while ((RESETS_RESET_DONE & bits) != bits) {
    }
}

/* Runs before .data/.bss exist (no static variables): the clock tree, then the peripherals we use
 * out of reset. */
void qe_family_early_init(void)
{
    volatile uint32_t i;

    /* Whatever the bootrom left running: SysTick off, no interrupt enabled or pending. */
    QE_SYST_CSR = 0u;
    QE_NVIC_ICER(0) = 0xFFFFFFFFu;
    QE_NVIC_ICPR(0) = 0xFFFFFFFFu;

    CLK_SYS_RESUS_CTRL = 0u;   /* resuscitator off: it would move clk_sys back to clk_ref */

    /* 1. Crystal oscillator: start-up delay first, then range and enable in one write (if a
     *    warm reset left it running, this keeps it running). */
    XOSC_STARTUP = XOSC_STARTUP_DELAY;
    XOSC_CTRL = XOSC_CTRL_ENABLE | XOSC_CTRL_FREQ_RANGE_1_15MHZ;
    while (!(XOSC_STATUS & XOSC_STATUS_STABLE)) {
    }

    /* 2. clk_sys onto clk_ref (glitchless) so that PLL_SYS may be stopped, then clk_ref onto the
     *    crystal (12 MHz, divider 1). */
    CLR_ALIAS(CLK_SYS_CTRL) = CLK_SYS_SRC_AUX;
    while (CLK_SYS_SELECTED != 1u) {
    }
    CLK_REF_DIV = CLK_DIV_1;
    QE_REG(CLK_REF_CTRL) = (QE_REG(CLK_REF_CTRL) & ~CLK_REF_SRC_MASK) | CLK_REF_SRC_XOSC;
    while (CLK_REF_SELECTED != (1u << CLK_REF_SRC_XOSC)) {
    }

    /* 3. PLL_SYS from a clean reset: reference divider, feedback divider, power up the VCO, wait
     *    for lock, then the post dividers and their power. */
    SET_ALIAS(RESETS_RESET) = RESET_PLL_SYS;
    unreset(RESET_PLL_SYS);
    QE_REG(PLL_CS) = PLL_REFDIV;
    QE_REG(PLL_FBDIV_INT) = PLL_FBDIV;
    CLR_ALIAS(PLL_PWR) = PLL_PWR_PD | PLL_PWR_VCOPD;
    while (!(QE_REG(PLL_CS) & PLL_CS_LOCK)) {
    }
    QE_REG(PLL_PRIM) = (PLL_POSTDIV1 << 16) | (PLL_POSTDIV2 << 12);
    CLR_ALIAS(PLL_PWR) = PLL_PWR_POSTDIVPD;

    /* 4. clk_sys = pll_sys: choose it on the aux mux while clk_sys still runs from clk_ref, then
     *    switch the glitchless mux to aux (SELECTED bit 1). */
    CLK_SYS_DIV = CLK_DIV_1;
    CLR_ALIAS(CLK_SYS_CTRL) = CLK_SYS_AUXSRC_MASK;   /* AUXSRC = 0: clksrc_pll_sys */
    SET_ALIAS(CLK_SYS_CTRL) = CLK_SYS_SRC_AUX;
    while (CLK_SYS_SELECTED != (1u << CLK_SYS_SRC_AUX)) {
    }

    /* 5. clk_peri from clk_sys. Its mux is not glitchless: disable it, let a few cycles pass,
     *    then select and enable. */
    QE_REG(CLK_PERI_CTRL) = 0u;
    for (i = 0u; i < 16u; i++) {
    }
    QE_REG(CLK_PERI_CTRL) = CLK_PERI_ENABLE | CLK_PERI_AUXSRC_CLK_SYS;

    /* 6. The peripherals we use: UART0 from a clean reset, the GPIO muxes and pads. */
    SET_ALIAS(RESETS_RESET) = RESET_UART0;
    unreset(RESET_UART0 | RESET_IO_BANK0 | RESET_PADS_BANK0);

    /* Nothing can interrupt (all NVIC lines off): let the cost counter's SysTick interrupt in. */
    qe_irq_enable();
}

void qe_uart_init(void)
{
    /* GP0 = UART0 TX, GP1 = UART0 RX; RX pulled up (the line idles high), Schmitt trigger on. */
    PADS_BANK0_GPIO(0) = PAD_IE | PAD_DRIVE_4MA;
    PADS_BANK0_GPIO(1) = PAD_IE | PAD_PUE | PAD_SCHMITT | PAD_DRIVE_4MA;
    IO_BANK0_GPIO_CTRL(0) = GPIO_FUNC_UART;
    IO_BANK0_GPIO_CTRL(1) = GPIO_FUNC_UART;

    UART_CR = 0u;
    UART_IBRD = UART_IBRD_VALUE;
    UART_FBRD = UART_FBRD_VALUE;
    UART_LCR_H = LCR_H_WLEN_8 | LCR_H_FEN;   /* this write also latches IBRD/FBRD */
    UART_IFLS = 0u;                          /* RX interrupt at 1/8 full (4 bytes) */
    /* Reaches the NVIC only while port.c sleeps. A lone byte raises RT after 32 bit times
     * (~0.28 ms), a burst raises RX at 4 bytes: that bounds the wake-up latency. */
    UART_IMSC = INT_RX | INT_RT;
    UART_CR = CR_UARTEN | CR_TXE | CR_RXE;
}

int qe_uart_rx_ready(void)
{
    return (UART_FR & FR_RXFE) == 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)UART_DR;   /* bits 11:8 hold framing/parity/break/overrun flags: dropped */
}

void qe_uart_tx(uint8_t byte)
{
    while (UART_FR & FR_TXFF) {
    }
    UART_DR = byte;
}

void qe_uart_rx_irq_clear(void)
{
    UART_ICR = INT_RX | INT_RT;
}
