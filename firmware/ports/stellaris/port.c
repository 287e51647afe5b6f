/* Stellaris family (QEMU lm3s6965evb, Cortex-M3, no FPU): the PL011 UART 0 at 0x4000C000.
 * Everything else is the shared Cortex-M port (firmware/ports/cortex-m/).
 *
 * Writing LCRH resets the emulated PL011's receive FIFO, so it is written once, at reset,
 * before the host can have sent anything that matters (the host's HELLO is retried anyway). */
#include <stdint.h>

#include "cortexm.h"

#define UART0_BASE 0x4000C000u
#define UART_DR QE_REG(UART0_BASE + 0x00u)
#define UART_FR QE_REG(UART0_BASE + 0x18u)
#define UART_IBRD QE_REG(UART0_BASE + 0x24u)
#define UART_FBRD QE_REG(UART0_BASE + 0x28u)
#define UART_LCRH QE_REG(UART0_BASE + 0x2Cu)
#define UART_CR QE_REG(UART0_BASE + 0x30u)
#define UART_IMSC QE_REG(UART0_BASE + 0x38u)
#define UART_ICR QE_REG(UART0_BASE + 0x44u)

#define FR_RXFE (1u << 4)
#define FR_TXFF (1u << 5)
#define LCRH_FEN (1u << 4)
#define LCRH_WLEN_8 (3u << 5)
#define CR_UARTEN (1u << 0)
#define CR_TXE (1u << 8)
#define CR_RXE (1u << 9)
#define INT_RX (1u << 4)
#define INT_RT (1u << 6)

#define SYSCTL_RCGC1 QE_REG(0x400FE104u)   /* bit 0: UART0 clock gate */

const int qe_uart_irq = 5;   /* UART0 */

void qe_family_early_init(void)
{
    SYSCTL_RCGC1 |= 1u;   /* UART0's clock (a no-op on the emulator, required on silicon) */
}

void qe_uart_init(void)
{
    UART_CR = 0u;
    UART_IBRD = 27u;      /* 115200 baud from 50 MHz (ignored by the emulator) */
    UART_FBRD = 8u;
    UART_LCRH = LCRH_WLEN_8 | LCRH_FEN;
    UART_IMSC = INT_RX | INT_RT;
    UART_CR = CR_UARTEN | CR_TXE | CR_RXE;
}

int qe_uart_rx_ready(void)
{
    return (UART_FR & FR_RXFE) == 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)UART_DR;
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
