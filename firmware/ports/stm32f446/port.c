/* STM32F446 on the NUCLEO-F446RE (Cortex-M4F, real silicon): clocks, and USART2 on PA2 (TX) /
 * PA3 (RX), which the board's ST-LINK/V2-1 carries to the host as its USB virtual COM port.
 * Everything else is the shared Cortex-M port (firmware/ports/cortex-m/); the board file builds
 * with -DQE_CORTEXM_DWT (cycles from DWT CYCCNT) and -DQE_SEMIHOSTING=0.
 *
 * Clock tree, set up in qe_family_early_init() before .data/.bss (RM0390 sections 5 and 6):
 *   HSI 16 MHz (internal RC; the NUCLEO's HSE crystal is not fitted and the ST-LINK's 8 MHz MCO
 *   depends on solder bridges, so we do not rely on it)
 *   -> PLL: /M=8 (2 MHz VCO input), xN=180 (VCO 360 MHz), /P=2 -> SYSCLK 180 MHz
 *   AHB /1 = 180 MHz (the core, DWT CYCCNT), APB1 /4 = 45 MHz (USART2), APB2 /2 = 90 MHz.
 * 180 MHz needs voltage scale 1 and the regulator's over-drive (on after the PLL locks, before
 * SYSCLK switches to it), and 5 flash wait states (2.7-3.6 V) with the ART accelerator (prefetch,
 * instruction and data caches) on. QE_CLOCK_HZ (the board file's clock_hz) must equal this.
 *
 * HSI is factory-trimmed to +-1 % at 25 C: USART2 at 115200 baud is well inside the receiver's
 * tolerance, but cycle counts map to time only as accurately as HSI (the DWT counts cycles,
 * which is what we report). */
#include <stdint.h>

#include "cortexm.h"

#define QE_F446_HSI_HZ 16000000u
#define QE_F446_PLLM 8u
#define QE_F446_PLLN 180u
#define QE_F446_PLLP 2u
#define QE_F446_PLLQ 8u     /* 45 MHz on the (unused) 48 MHz domain: <= 48 MHz as required */
#define QE_F446_SYSCLK_HZ (QE_F446_HSI_HZ / QE_F446_PLLM * QE_F446_PLLN / QE_F446_PLLP)
#define QE_F446_APB1_HZ (QE_F446_SYSCLK_HZ / 4u)
#define QE_F446_BAUD 115200u
/* USART with OVER8 = 0: BRR = fck / baud as a 12.4 fixed-point number, i.e. rounded fck/baud. */
#define QE_F446_USART2_BRR ((QE_F446_APB1_HZ + QE_F446_BAUD / 2u) / QE_F446_BAUD)

typedef char qe_f446_clock_matches_board_file[QE_F446_SYSCLK_HZ == QE_CLOCK_HZ ? 1 : -1];
typedef char qe_f446_vco_in_range[
    QE_F446_HSI_HZ / QE_F446_PLLM * QE_F446_PLLN >= 100000000u
    && QE_F446_HSI_HZ / QE_F446_PLLM * QE_F446_PLLN <= 432000000u ? 1 : -1];

/* Within 2 % of the nominal rate (the sum of both ends' errors must stay under ~4 %). */
typedef char qe_f446_baud_check[
    QE_F446_APB1_HZ / QE_F446_USART2_BRR * 50u >= QE_F446_BAUD * 49u
    && QE_F446_APB1_HZ / QE_F446_USART2_BRR * 50u <= QE_F446_BAUD * 51u ? 1 : -1];
/* The divider as a named object read at run time (volatile), so the ELF keeps it under its name
 * and a test or a debugger can check it against the board file's clock (GCC places const
 * volatile objects in .data: 4 bytes of RAM). */
const volatile uint32_t qe_uart_brr = QE_F446_USART2_BRR;

/* RCC, PWR, FLASH interface, GPIOA, USART2 (RM0390 memory map). */
#define RCC_BASE 0x40023800u
#define RCC_CR QE_REG(RCC_BASE + 0x00u)
#define RCC_PLLCFGR QE_REG(RCC_BASE + 0x04u)
#define RCC_CFGR QE_REG(RCC_BASE + 0x08u)
#define RCC_AHB1ENR QE_REG(RCC_BASE + 0x30u)
#define RCC_APB1ENR QE_REG(RCC_BASE + 0x40u)

#define RCC_CR_HSION (1u << 0)
#define RCC_CR_HSIRDY (1u << 1)
#define RCC_CR_PLLON (1u << 24)
#define RCC_CR_PLLRDY (1u << 25)
#define RCC_CFGR_SW_PLL (2u << 0)
#define RCC_CFGR_SW_MASK (3u << 0)
#define RCC_CFGR_SWS_PLL (2u << 2)
#define RCC_CFGR_SWS_MASK (3u << 2)
#define RCC_CFGR_HPRE_DIV1 (0u << 4)
#define RCC_CFGR_PPRE1_DIV4 (5u << 10)
#define RCC_CFGR_PPRE2_DIV2 (4u << 13)
#define RCC_CFGR_PRE_MASK ((0xFu << 4) | (7u << 10) | (7u << 13))
#define RCC_AHB1ENR_GPIOAEN (1u << 0)
#define RCC_APB1ENR_USART2EN (1u << 17)
#define RCC_APB1ENR_PWREN (1u << 28)

#define PWR_BASE 0x40007000u
#define PWR_CR QE_REG(PWR_BASE + 0x00u)
#define PWR_CSR QE_REG(PWR_BASE + 0x04u)
#define PWR_CR_VOS_SCALE1 (3u << 14)
#define PWR_CR_ODEN (1u << 16)
#define PWR_CR_ODSWEN (1u << 17)
#define PWR_CSR_ODRDY (1u << 16)
#define PWR_CSR_ODSWRDY (1u << 17)

#define FLASH_ACR QE_REG(0x40023C00u)
#define FLASH_ACR_LATENCY_MASK 0xFu
#define FLASH_ACR_LATENCY_5WS 5u
#define FLASH_ACR_PRFTEN (1u << 8)
#define FLASH_ACR_ICEN (1u << 9)
#define FLASH_ACR_DCEN (1u << 10)

#define DBGMCU_CR QE_REG(0xE0042004u)
#define DBGMCU_CR_DBG_SLEEP (1u << 0)

#define GPIOA_BASE 0x40020000u
#define GPIOA_MODER QE_REG(GPIOA_BASE + 0x00u)
#define GPIOA_OSPEEDR QE_REG(GPIOA_BASE + 0x08u)
#define GPIOA_PUPDR QE_REG(GPIOA_BASE + 0x0Cu)
#define GPIOA_AFRL QE_REG(GPIOA_BASE + 0x20u)

#define USART2_BASE 0x40004400u
#define USART_SR QE_REG(USART2_BASE + 0x00u)
#define USART_DR QE_REG(USART2_BASE + 0x04u)
#define USART_BRR QE_REG(USART2_BASE + 0x08u)
#define USART_CR1 QE_REG(USART2_BASE + 0x0Cu)
#define SR_RXNE (1u << 5)
#define SR_TXE (1u << 7)
#define CR1_RE (1u << 2)
#define CR1_TE (1u << 3)
#define CR1_RXNEIE (1u << 5)
#define CR1_UE (1u << 13)

const int qe_uart_irq = 38;   /* USART2 */

/* Runs before .data/.bss exist: registers only, no static variables. */
void qe_family_early_init(void)
{
    uint32_t cfgr;

    /* Keep the debug port usable while the core sleeps in WFI waiting for a byte, so openocd or
     * pyocd can attach to a running board without holding it in reset. */
    DBGMCU_CR |= DBGMCU_CR_DBG_SLEEP;

    /* The power controller's clock, then voltage scale 1 (the reset value on the F446; set
     * anyway: it only takes effect once the PLL is on). The read-back is the delay RM0390 asks
     * for between enabling a peripheral clock and using the peripheral. */
    RCC_APB1ENR |= RCC_APB1ENR_PWREN;
    (void)RCC_APB1ENR;
    PWR_CR |= PWR_CR_VOS_SCALE1;

    /* HSI is on and selected after reset; wait for it anyway (a debugger may have changed it). */
    RCC_CR |= RCC_CR_HSION;
    while (!(RCC_CR & RCC_CR_HSIRDY)) {
    }

    /* The PLL (off after reset, so its configuration may be written): source HSI (bit 22 = 0),
     * M, N, P = 2 (field 0), Q; R keeps its reset value 2 (bits 30:28; feeds only SAI/I2S). */
    RCC_PLLCFGR = (2u << 28) | (QE_F446_PLLQ << 24) | (((QE_F446_PLLP / 2u) - 1u) << 16)
                  | (QE_F446_PLLN << 6) | QE_F446_PLLM;
    RCC_CR |= RCC_CR_PLLON;
    while (!(RCC_CR & RCC_CR_PLLRDY)) {
    }

    /* Over-drive (RM0390 5.1.4): enable, wait until ready, then switch the regulator to it. */
    PWR_CR |= PWR_CR_ODEN;
    while (!(PWR_CSR & PWR_CSR_ODRDY)) {
    }
    PWR_CR |= PWR_CR_ODSWEN;
    while (!(PWR_CSR & PWR_CSR_ODSWRDY)) {
    }

    /* Flash wait states before the clock goes up; read back until the new latency is in. */
    FLASH_ACR = FLASH_ACR_LATENCY_5WS | FLASH_ACR_PRFTEN | FLASH_ACR_ICEN | FLASH_ACR_DCEN;
    while ((FLASH_ACR & FLASH_ACR_LATENCY_MASK) != FLASH_ACR_LATENCY_5WS) {
    }

    /* Bus prescalers first (APB1 <= 45 MHz, APB2 <= 90 MHz), then SYSCLK = PLL. */
    cfgr = RCC_CFGR & ~RCC_CFGR_PRE_MASK;
    RCC_CFGR = cfgr | RCC_CFGR_HPRE_DIV1 | RCC_CFGR_PPRE1_DIV4 | RCC_CFGR_PPRE2_DIV2;
    RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW_MASK) | RCC_CFGR_SW_PLL;
    while ((RCC_CFGR & RCC_CFGR_SWS_MASK) != RCC_CFGR_SWS_PLL) {
    }
}

void qe_uart_init(void)
{
    RCC_AHB1ENR |= RCC_AHB1ENR_GPIOAEN;
    RCC_APB1ENR |= RCC_APB1ENR_USART2EN;
    (void)RCC_APB1ENR;

    /* PA2, PA3: alternate function 7 (USART2), high speed, pull-up on RX so a disconnected line
     * idles high. Read-modify-write: PA13/PA14 are the SWD pins and must stay as they are. */
    GPIOA_AFRL = (GPIOA_AFRL & ~((0xFu << 8) | (0xFu << 12))) | (7u << 8) | (7u << 12);
    GPIOA_OSPEEDR = (GPIOA_OSPEEDR & ~((3u << 4) | (3u << 6))) | (2u << 4) | (2u << 6);
    GPIOA_PUPDR = (GPIOA_PUPDR & ~((3u << 4) | (3u << 6))) | (1u << 6);
    GPIOA_MODER = (GPIOA_MODER & ~((3u << 4) | (3u << 6))) | (2u << 4) | (2u << 6);

    /* 8N1, 16x oversampling; BRR is written while the USART is still disabled. */
    USART_CR1 = 0u;
    USART_BRR = qe_uart_brr;
    USART_CR1 = CR1_UE | CR1_TE | CR1_RE | CR1_RXNEIE;
}

int qe_uart_rx_ready(void)
{
    return (USART_SR & SR_RXNE) != 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)USART_DR;   /* after the SR read above: also clears RXNE, ORE and the IRQ */
}

void qe_uart_tx(uint8_t byte)
{
    while (!(USART_SR & SR_TXE)) {
    }
    USART_DR = byte;
}

void qe_uart_rx_irq_clear(void)
{
    /* The RX interrupt follows RXNE (and ORE, which is only set together with RXNE and cleared
     * by the SR-then-DR read of qe_uart_rx()): nothing to clear while no byte is waiting. */
}
