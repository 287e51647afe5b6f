/* STM32L4+ (STM32L4R5ZI on the NUCLEO-L4R5ZI, Cortex-M4F, real silicon): clocks, and LPUART1 on
 * PG7 (TX) / PG8 (RX), which the board's ST-LINK/V2-1 carries to the host as its USB virtual COM
 * port. Everything else is the shared Cortex-M port (firmware/ports/cortex-m/); the board file
 * builds with -DQE_CORTEXM_DWT (cycles from DWT CYCCNT) and -DQE_SEMIHOSTING=0.
 *
 * Clock tree, set up in qe_family_early_init() before .data/.bss (RM0432 sections 5 and 6):
 *   HSI16 (internal RC, factory-trimmed to +-1 % at 25 C)
 *   -> main PLL: /M=4 (4 MHz input), xN=60 (VCO 240 MHz), /R=2 -> SYSCLK 120 MHz
 *   AHB, APB1, APB2 /1 = 120 MHz (the core, DWT CYCCNT, LPUART1's kernel clock PCLK1).
 * 120 MHz is the L4+'s maximum and needs the regulator's range 1 boost mode (PWR_CR5.R1MODE = 0)
 * and 5 flash wait states; going above 80 MHz from a lower clock needs an intermediate step at
 * AHB/2 for at least 1 us (RM0432 "Clock switch and frequency change"). QE_CLOCK_HZ (the board
 * file's clock_hz) must equal SYSCLK here (checked at compile time).
 *
 * Port G (PG2..PG15) sits on the separate VDDIO2 supply: its I/O are isolated until PWR_CR2.IOSV
 * says VDDIO2 is valid, so that bit is set (PWR clock on first) before PG7/PG8 are configured. */
#include <stdint.h>

#include "cortexm.h"

#define QE_L4_HSI_HZ 16000000u
#define QE_L4_PLLM 4u
#define QE_L4_PLLN 60u
#define QE_L4_PLLR 2u
#define QE_L4_SYSCLK_HZ (QE_L4_HSI_HZ / QE_L4_PLLM * QE_L4_PLLN / QE_L4_PLLR)
#define QE_L4_PCLK1_HZ QE_L4_SYSCLK_HZ
#define QE_L4_BAUD 115200u
/* LPUART: BRR = 256 * fck / baud (20 bits, >= 0x300, fck in [3, 4096] x baud), rounded. */
#define QE_L4_LPUART1_BRR \
    ((uint32_t)((256ull * QE_L4_PCLK1_HZ + QE_L4_BAUD / 2u) / QE_L4_BAUD))

typedef char qe_l4_clock_matches_board_file[QE_L4_SYSCLK_HZ == QE_CLOCK_HZ ? 1 : -1];
typedef char qe_l4_pll_in_range[
    QE_L4_HSI_HZ / QE_L4_PLLM >= 2660000u && QE_L4_HSI_HZ / QE_L4_PLLM <= 8000000u
    && QE_L4_HSI_HZ / QE_L4_PLLM * QE_L4_PLLN >= 64000000u
    && QE_L4_HSI_HZ / QE_L4_PLLM * QE_L4_PLLN <= 344000000u ? 1 : -1];
typedef char qe_l4_lpuart_brr_check[
    QE_L4_LPUART1_BRR >= 0x300u && QE_L4_LPUART1_BRR <= 0xFFFFFu
    && QE_L4_PCLK1_HZ <= 4096ull * QE_L4_BAUD && QE_L4_PCLK1_HZ >= 3ull * QE_L4_BAUD ? 1 : -1];

/* The divider as a named object read at run time (volatile), so the ELF keeps it under its name
 * and a test or a debugger can check it against the board file's clock (GCC places const
 * volatile objects in .data: 4 bytes of RAM). */
const volatile uint32_t qe_uart_brr = QE_L4_LPUART1_BRR;

/* RCC, PWR, FLASH interface, GPIOG, LPUART1 (RM0432 memory map). */
#define RCC_BASE 0x40021000u
#define RCC_CR QE_REG(RCC_BASE + 0x00u)
#define RCC_CFGR QE_REG(RCC_BASE + 0x08u)
#define RCC_PLLCFGR QE_REG(RCC_BASE + 0x0Cu)
#define RCC_AHB2ENR QE_REG(RCC_BASE + 0x4Cu)
#define RCC_APB1ENR1 QE_REG(RCC_BASE + 0x58u)
#define RCC_APB1ENR2 QE_REG(RCC_BASE + 0x5Cu)
#define RCC_CCIPR QE_REG(RCC_BASE + 0x88u)

#define RCC_CR_HSION (1u << 8)
#define RCC_CR_HSIRDY (1u << 10)
#define RCC_CR_PLLON (1u << 24)
#define RCC_CR_PLLRDY (1u << 25)
#define RCC_CFGR_SW_MASK (3u << 0)
#define RCC_CFGR_SW_PLL (3u << 0)
#define RCC_CFGR_SWS_MASK (3u << 2)
#define RCC_CFGR_SWS_PLL (3u << 2)
#define RCC_CFGR_HPRE_MASK (0xFu << 4)
#define RCC_CFGR_HPRE_DIV2 (8u << 4)
#define RCC_CFGR_PPRE_MASK ((7u << 8) | (7u << 11))   /* PPRE1, PPRE2: 0 = /1 */
#define RCC_PLLCFGR_PLLSRC_HSI16 (2u << 0)
#define RCC_PLLCFGR_PLLREN (1u << 24)
#define RCC_AHB2ENR_GPIOGEN (1u << 6)
#define RCC_APB1ENR1_PWREN (1u << 28)
#define RCC_APB1ENR2_LPUART1EN (1u << 0)
#define RCC_CCIPR_LPUART1SEL_MASK (3u << 10)          /* 0: PCLK1 */

#define PWR_BASE 0x40007000u
#define PWR_CR1 QE_REG(PWR_BASE + 0x00u)
#define PWR_CR2 QE_REG(PWR_BASE + 0x04u)
#define PWR_SR2 QE_REG(PWR_BASE + 0x14u)
#define PWR_CR5 QE_REG(PWR_BASE + 0x80u)
#define PWR_CR1_VOS_MASK (3u << 9)
#define PWR_CR1_VOS_RANGE1 (1u << 9)
#define PWR_CR2_IOSV (1u << 9)
#define PWR_SR2_VOSF (1u << 10)
#define PWR_CR5_R1MODE (1u << 8)                       /* 1: range 1 normal, 0: boost */

#define FLASH_ACR QE_REG(0x40022000u)
#define FLASH_ACR_LATENCY_MASK 0xFu
#define FLASH_ACR_LATENCY_5WS 5u
#define FLASH_ACR_PRFTEN (1u << 8)
#define FLASH_ACR_ICEN (1u << 9)
#define FLASH_ACR_DCEN (1u << 10)

#define DBGMCU_CR QE_REG(0xE0042004u)
#define DBGMCU_CR_DBG_SLEEP (1u << 0)

#define GPIOG_BASE 0x48001800u
#define GPIOG_MODER QE_REG(GPIOG_BASE + 0x00u)
#define GPIOG_OSPEEDR QE_REG(GPIOG_BASE + 0x08u)
#define GPIOG_PUPDR QE_REG(GPIOG_BASE + 0x0Cu)
#define GPIOG_AFRL QE_REG(GPIOG_BASE + 0x20u)
#define GPIOG_AFRH QE_REG(GPIOG_BASE + 0x24u)

#define LPUART1_BASE 0x40008000u
#define LPUART_CR1 QE_REG(LPUART1_BASE + 0x00u)
#define LPUART_CR2 QE_REG(LPUART1_BASE + 0x04u)
#define LPUART_CR3 QE_REG(LPUART1_BASE + 0x08u)
#define LPUART_BRR QE_REG(LPUART1_BASE + 0x0Cu)
#define LPUART_ISR QE_REG(LPUART1_BASE + 0x1Cu)
#define LPUART_ICR QE_REG(LPUART1_BASE + 0x20u)
#define LPUART_RDR QE_REG(LPUART1_BASE + 0x24u)
#define LPUART_TDR QE_REG(LPUART1_BASE + 0x28u)
#define CR1_UE (1u << 0)
#define CR1_RE (1u << 2)
#define CR1_TE (1u << 3)
#define CR1_RXNEIE (1u << 5)
#define CR3_OVRDIS (1u << 12)
#define ISR_ORE (1u << 3)
#define ISR_RXNE (1u << 5)
#define ISR_TXE (1u << 7)
#define ICR_ORECF (1u << 3)

const int qe_uart_irq = 70;   /* LPUART1 */

/* Runs before .data/.bss exist: registers only, no static variables. */
void qe_family_early_init(void)
{
    volatile uint32_t spin;

    /* Keep the debug port usable while the core sleeps in WFI waiting for a byte. */
    DBGMCU_CR |= DBGMCU_CR_DBG_SLEEP;

    /* PWR's clock (read back: the delay between enabling a clock and using the peripheral), then
     * range 1 (the reset value) in boost mode, while SYSCLK is still the 4 MHz MSI. */
    RCC_APB1ENR1 |= RCC_APB1ENR1_PWREN;
    (void)RCC_APB1ENR1;
    PWR_CR5 &= ~PWR_CR5_R1MODE;
    PWR_CR1 = (PWR_CR1 & ~PWR_CR1_VOS_MASK) | PWR_CR1_VOS_RANGE1;
    while (PWR_SR2 & PWR_SR2_VOSF) {
    }

    RCC_CR |= RCC_CR_HSION;
    while (!(RCC_CR & RCC_CR_HSIRDY)) {
    }

    /* The main PLL (off after reset): HSI16, M (field M-1, bits 7:4), N (bits 14:8), R = 2
     * (field 0, bits 26:25) with its output enabled; P and Q outputs stay off. */
    RCC_PLLCFGR = RCC_PLLCFGR_PLLSRC_HSI16 | ((QE_L4_PLLM - 1u) << 4) | (QE_L4_PLLN << 8)
                  | (((QE_L4_PLLR / 2u) - 1u) << 25) | RCC_PLLCFGR_PLLREN;
    RCC_CR |= RCC_CR_PLLON;
    while (!(RCC_CR & RCC_CR_PLLRDY)) {
    }

    /* Flash wait states before the clock goes up; read back until the new latency is in. */
    FLASH_ACR = FLASH_ACR_LATENCY_5WS | FLASH_ACR_PRFTEN | FLASH_ACR_ICEN | FLASH_ACR_DCEN;
    while ((FLASH_ACR & FLASH_ACR_LATENCY_MASK) != FLASH_ACR_LATENCY_5WS) {
    }

    /* Above 80 MHz: switch with AHB/2 (60 MHz), wait >= 1 us, then AHB/1. APB1/APB2 /1. */
    RCC_CFGR = (RCC_CFGR & ~(RCC_CFGR_HPRE_MASK | RCC_CFGR_PPRE_MASK)) | RCC_CFGR_HPRE_DIV2;
    RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW_MASK) | RCC_CFGR_SW_PLL;
    while ((RCC_CFGR & RCC_CFGR_SWS_MASK) != RCC_CFGR_SWS_PLL) {
    }
    for (spin = 0u; spin < 120u; spin++) {   /* >= 120 AHB cycles at 60 MHz: >= 2 us */
    }
    RCC_CFGR &= ~RCC_CFGR_HPRE_MASK;
}

void qe_uart_init(void)
{
    /* VDDIO2 valid: port G's I/O are usable from here on (needs the PWR clock, on above). */
    PWR_CR2 |= PWR_CR2_IOSV;
    RCC_AHB2ENR |= RCC_AHB2ENR_GPIOGEN;
    RCC_APB1ENR2 |= RCC_APB1ENR2_LPUART1EN;
    RCC_CCIPR &= ~RCC_CCIPR_LPUART1SEL_MASK;   /* LPUART1 kernel clock = PCLK1 */
    (void)RCC_APB1ENR2;

    /* PG7 (TX), PG8 (RX): alternate function 8 (LPUART1), high speed, pull-up on RX. The L4's
     * GPIO reset mode is analog (0b11), so both mode bits are written. */
    GPIOG_AFRL = (GPIOG_AFRL & ~(0xFu << 28)) | (8u << 28);
    GPIOG_AFRH = (GPIOG_AFRH & ~0xFu) | 8u;
    GPIOG_OSPEEDR = (GPIOG_OSPEEDR & ~((3u << 14) | (3u << 16))) | (2u << 14) | (2u << 16);
    GPIOG_PUPDR = (GPIOG_PUPDR & ~((3u << 14) | (3u << 16))) | (1u << 16);
    GPIOG_MODER = (GPIOG_MODER & ~((3u << 14) | (3u << 16))) | (2u << 14) | (2u << 16);

    /* 8N1; overrun detection off (OVRDIS: a byte arriving while RDR is full replaces it instead
     * of setting ORE, which would otherwise keep the RX interrupt pending and stop reception
     * until cleared; a lost byte is caught by the frame CRC). Written while UE = 0. */
    LPUART_CR1 = 0u;
    LPUART_CR2 = 0u;
    LPUART_CR3 = CR3_OVRDIS;
    LPUART_BRR = qe_uart_brr;
    LPUART_CR1 = CR1_UE | CR1_TE | CR1_RE | CR1_RXNEIE;
}

int qe_uart_rx_ready(void)
{
    return (LPUART_ISR & ISR_RXNE) != 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)LPUART_RDR;   /* also clears RXNE and with it the interrupt */
}

void qe_uart_tx(uint8_t byte)
{
    while (!(LPUART_ISR & ISR_TXE)) {
    }
    LPUART_TDR = byte;
}

void qe_uart_rx_irq_clear(void)
{
    /* With OVRDIS, RXNE is the only RX interrupt source; an ORE left by a debugger session is
     * cleared here so it cannot keep WFI from sleeping. */
    if (LPUART_ISR & ISR_ORE)
        LPUART_ICR = ICR_ORECF;
}
