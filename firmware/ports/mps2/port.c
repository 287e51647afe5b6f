/* MPS2 family (QEMU mps2-an386 Cortex-M4F, mps2-an500 Cortex-M7, mps2-an505 Cortex-M33): the
 * CMSDK APB UART 0. Everything else is the shared Cortex-M port (firmware/ports/cortex-m/).
 *
 * The boards differ in their memory map (mps2.ld, mps2-an505.ld) and in the UART's address
 * and interrupt, which the board file passes as -DQE_CMSDK_UART_BASE / -DQE_CMSDK_UART_IRQ. */
#include <stdint.h>

#include "cortexm.h"

#ifndef QE_CMSDK_UART_BASE
#define QE_CMSDK_UART_BASE 0x40004000u   /* AN385/AN386/AN500 UART0 */
#endif
#ifndef QE_CMSDK_UART_IRQ
#define QE_CMSDK_UART_IRQ 0               /* its RX interrupt */
#endif

#define UART_DATA QE_REG(QE_CMSDK_UART_BASE + 0x00u)
#define UART_STATE QE_REG(QE_CMSDK_UART_BASE + 0x04u)
#define UART_CTRL QE_REG(QE_CMSDK_UART_BASE + 0x08u)
#define UART_INTCLEAR QE_REG(QE_CMSDK_UART_BASE + 0x0Cu)
#define UART_BAUDDIV QE_REG(QE_CMSDK_UART_BASE + 0x10u)

#define STATE_TX_FULL (1u << 0)
#define STATE_RX_FULL (1u << 1)
#define CTRL_TX_EN (1u << 0)
#define CTRL_RX_EN (1u << 1)
#define CTRL_RX_INT_EN (1u << 3)
#define INT_RX (1u << 1)

const int qe_uart_irq = QE_CMSDK_UART_IRQ;

void qe_family_early_init(void)
{
}

void qe_uart_init(void)
{
    UART_BAUDDIV = 16u;   /* the smallest valid divider; the emulated UART ignores the rate */
    UART_CTRL = CTRL_TX_EN | CTRL_RX_EN | CTRL_RX_INT_EN;
}

int qe_uart_rx_ready(void)
{
    return (UART_STATE & STATE_RX_FULL) != 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)UART_DATA;
}

void qe_uart_tx(uint8_t byte)
{
    while (UART_STATE & STATE_TX_FULL) {
    }
    UART_DATA = byte;
}

void qe_uart_rx_irq_clear(void)
{
    UART_INTCLEAR = INT_RX;
}
