/* nRF51 family (QEMU microbit: nRF51822, Cortex-M0, no FPU): the UART at 0x40002000, QEMU's
 * serial port 0. Everything else is the shared Cortex-M port (firmware/ports/cortex-m/). */
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

void qe_family_early_init(void)
{
}

void qe_uart_init(void)
{
    UART_PSELTXD = 24u;            /* the micro:bit's USB serial pins */
    UART_PSELRXD = 25u;
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
