/* FE310 family (SiFive FE310-G000 on the HiFive1, rv32imac; QEMU's `sifive_e` machine): UART0
 * at 0x10013000 (QEMU's serial port 0; the HiFive1's FTDI USB serial port), its receive
 * interrupt (PLIC source 3) routed to hart 0's machine external interrupt so the shared port
 * sleeps in WFI while it waits for a byte. Everything else is the shared RISC-V port
 * (firmware/ports/riscv/). */
#include <stdint.h>

#include "riscv.h"

#define UART0_BASE 0x10013000u
#define UART_TXDATA QE_REG(UART0_BASE + 0x00u)
#define UART_RXDATA QE_REG(UART0_BASE + 0x04u)
#define UART_TXCTRL QE_REG(UART0_BASE + 0x08u)
#define UART_RXCTRL QE_REG(UART0_BASE + 0x0Cu)
#define UART_IE QE_REG(UART0_BASE + 0x10u)
#define UART_IP QE_REG(UART0_BASE + 0x14u)
#define UART_DIV QE_REG(UART0_BASE + 0x18u)

#define TXDATA_FULL (1u << 31)
#define RXDATA_EMPTY (1u << 31)
#define CTRL_EN 1u            /* txen / rxen; the watermark counts (bits 16..18) stay 0 */
#define IE_RXWM (1u << 1)     /* pending while the receive FIFO holds more than rxcnt (0) bytes */
#define IP_RXWM (1u << 1)

/* The platform-level interrupt controller: context 0 is hart 0 in machine mode. */
#define PLIC_BASE 0x0C000000u
#define PLIC_PRIORITY(src) QE_REG(PLIC_BASE + 4u * (src))
#define PLIC_ENABLE(word) QE_REG(PLIC_BASE + 0x2000u + 4u * (word))
#define PLIC_THRESHOLD QE_REG(PLIC_BASE + 0x200000u)
#define PLIC_CLAIM QE_REG(PLIC_BASE + 0x200004u)   /* read: claim the highest pending; write: complete */
#define UART0_IRQ 3u

const int qe_uart_wakes = 1;

void qe_family_early_init(void)
{
}

void qe_uart_init(void)
{
    UART_DIV = 138u;          /* 115200 baud from the 16 MHz reset clock (ignored by QEMU) */
    UART_TXCTRL = CTRL_EN;
    UART_RXCTRL = CTRL_EN;
    UART_IE = IE_RXWM;
    PLIC_PRIORITY(UART0_IRQ) = 1u;
    PLIC_THRESHOLD = 0u;
    PLIC_ENABLE(UART0_IRQ / 32u) |= 1u << (UART0_IRQ % 32u);
}

/* Claim and complete once (only the UART's source is enabled): on a level-triggered PLIC a
 * line still high pends again at once, which the caller's check of the UART then sees. */
void qe_uart_irq_clear(void)
{
    const uint32_t source = PLIC_CLAIM;
    if (source != 0u)
        PLIC_CLAIM = source;
}

int qe_uart_rx_ready(void)
{
    return (UART_IP & IP_RXWM) != 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)UART_RXDATA;   /* a byte is there (qe_uart_rx_ready()): bit 31 is clear */
}

void qe_uart_tx(uint8_t byte)
{
    while (UART_TXDATA & TXDATA_FULL) {
    }
    UART_TXDATA = byte;
}
