/* STM32F4 family (QEMU netduinoplus2: STM32F405, Cortex-M4F, the MCU of the Crazyflie 2.x):
 * USART1 at 0x40011000, QEMU's serial port 0. Everything else is the shared Cortex-M port
 * (firmware/ports/cortex-m/). */
#include <stdint.h>

#include "cortexm.h"

#define USART1_BASE 0x40011000u
#define USART_SR QE_REG(USART1_BASE + 0x00u)
#define USART_DR QE_REG(USART1_BASE + 0x04u)
#define USART_BRR QE_REG(USART1_BASE + 0x08u)
#define USART_CR1 QE_REG(USART1_BASE + 0x0Cu)

#define SR_RXNE (1u << 5)
#define SR_TXE (1u << 7)
#define CR1_RE (1u << 2)
#define CR1_TE (1u << 3)
#define CR1_RXNEIE (1u << 5)
#define CR1_UE (1u << 13)

#define RCC_APB2ENR QE_REG(0x40023844u)   /* bit 4: USART1 clock */

const int qe_uart_irq = 37;   /* USART1 */

void qe_family_early_init(void)
{
    RCC_APB2ENR |= 1u << 4;   /* USART1's clock (unmodelled by the emulator, needed on silicon) */
}

void qe_uart_init(void)
{
    USART_BRR = 0x2D9u;       /* 115200 baud from an 84 MHz APB2 (ignored by the emulator) */
    USART_CR1 = CR1_UE | CR1_TE | CR1_RE | CR1_RXNEIE;
}

int qe_uart_rx_ready(void)
{
    return (USART_SR & SR_RXNE) != 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)USART_DR;   /* also clears RXNE and the interrupt */
}

void qe_uart_tx(uint8_t byte)
{
    while (!(USART_SR & SR_TXE)) {
    }
    USART_DR = byte;
}

void qe_uart_rx_irq_clear(void)
{
    /* The RX interrupt follows RXNE: nothing to clear while no byte is waiting. */
}
