/* NXP i.MX RT1062 family (Teensy 4.1: Cortex-M7F, 8 MiB QSPI flash executed in place at
 * 0x60000000): boot entry, watchdogs, core clock 600 MHz, caches, and LPUART6. Everything else is
 * the shared Cortex-M port (firmware/ports/cortex-m/); the cost counter is the DWT cycle counter
 * (-DQE_CORTEXM_DWT in the board file), i.e. core cycles at 600 MHz.
 *
 * Boot (boot_header.c): the boot ROM reads the FlexSPI configuration block and the IVT from flash,
 * then jumps to qe_imxrt_entry() below with its own stack and vector table. Memory: code and
 * constants stay in flash (XIP through FlexSPI, with the Cortex-M7 I- and D-caches on), .data,
 * .bss and the stack live in DTCM at 0x20000000 (zero wait states, never cached).
 *
 * Clocks (i.MX RT1060 reference manual, CCM and CCM_ANALOG chapters): VDD_SOC is raised to 1.275 V
 * (required above 528 MHz) through the DCDC, the core runs from the 24 MHz oscillator while the ARM
 * PLL is set to 1200 MHz (24 MHz * 100 / 2) and locks, then ARM_PODF /2 gives 600 MHz for the
 * core and AHB (AHB_PODF /1), IPG /4 = 150 MHz, PERCLK from the oscillator (24 MHz). QE_CLOCK_HZ
 * (the board file's clock_hz) must be that 600 MHz.
 *
 * Serial: LPUART6 on Teensy pins 0 (RX1, pad GPIO_AD_B0_03) and 1 (TX1, pad GPIO_AD_B0_02), both
 * ALT2, clocked from the 24 MHz oscillator (UART_CLK_ROOT), 8N1 at QE_UART_BAUD (115200): 16x
 * oversampling, SBR 13 = 115,385 baud (+0.16 %). Teensy's own USB serial port needs a USB device
 * stack, which we do not ship: connect a 3.3 V USB-UART adapter to pins 0/1 and GND. */
#include <stdint.h>

#include "cortexm.h"

#define QE_REG16(addr) (*(volatile uint16_t *)(uintptr_t)(addr))

#ifndef QE_UART_BAUD
#define QE_UART_BAUD 115200u
#endif
#if QE_CLOCK_HZ != 600000000
#error "the i.MX RT1062 port runs the core at 600 MHz: the board's clock_hz must be 600000000"
#endif

/* ---- Watchdogs: WDOG1/WDOG2 (16-bit registers; their power-down counter resets the chip 16 s
 * after reset unless disabled) and RTWDOG (WDOG3, enabled out of reset unless the ROM stops it). */
#define WDOG1_BASE 0x400B8000u
#define WDOG2_BASE 0x400D0000u
#define WDOG_WCR(base) QE_REG16((base) + 0x0u)
#define WDOG_WMCR(base) QE_REG16((base) + 0x8u)
#define WDOG_WCR_WDE (1u << 2)
#define RTWDOG_BASE 0x400BC000u
#define RTWDOG_CS QE_REG(RTWDOG_BASE + 0x0u)
#define RTWDOG_CNT QE_REG(RTWDOG_BASE + 0x4u)
#define RTWDOG_CNT16 QE_REG16(RTWDOG_BASE + 0x4u)
#define RTWDOG_TOVAL QE_REG(RTWDOG_BASE + 0x8u)
#define RTWDOG_CS_UPDATE (1u << 5)
#define RTWDOG_CS_EN (1u << 7)
#define RTWDOG_CS_RCS (1u << 10)
#define RTWDOG_CS_ULK (1u << 11)
#define RTWDOG_CS_CMD32EN (1u << 13)

/* ---- DCDC (VDD_SOC) */
#define DCDC_REG0 QE_REG(0x40080000u)
#define DCDC_REG3 QE_REG(0x4008000Cu)
#define DCDC_REG0_STS_DC_OK (1u << 31)
#define DCDC_REG3_TRG_MASK 0x1Fu
#define DCDC_TRG_1V275 0x13u          /* 0.8 V + 19 * 25 mV */

/* ---- CCM and CCM_ANALOG */
#define CCM_BASE 0x400FC000u
#define CCM_CACRR QE_REG(CCM_BASE + 0x10u)
#define CCM_CBCDR QE_REG(CCM_BASE + 0x14u)
#define CCM_CBCMR QE_REG(CCM_BASE + 0x18u)
#define CCM_CSCMR1 QE_REG(CCM_BASE + 0x1Cu)
#define CCM_CSCDR1 QE_REG(CCM_BASE + 0x24u)
#define CCM_CDHIPR QE_REG(CCM_BASE + 0x48u)
#define CCM_CLPCR QE_REG(CCM_BASE + 0x54u)
#define CCM_CCGR3 QE_REG(CCM_BASE + 0x74u)
#define CBCDR_IPG_PODF(n) ((uint32_t)(n) << 8)
#define CBCDR_IPG_PODF_MASK (0x3u << 8)
#define CBCDR_AHB_PODF(n) ((uint32_t)(n) << 10)
#define CBCDR_AHB_PODF_MASK (0x7u << 10)
#define CBCDR_SEMC_PODF(n) ((uint32_t)(n) << 16)
#define CBCDR_SEMC_PODF_MASK (0x7u << 16)
#define CBCDR_PERIPH_CLK_SEL (1u << 25)          /* 1: periph_clk2, 0: pre_periph */
#define CBCDR_PERIPH_CLK2_PODF_MASK (0x7u << 27)
#define CBCMR_PERIPH_CLK2_SEL_MASK (0x3u << 12)
#define CBCMR_PERIPH_CLK2_SEL_OSC (0x1u << 12)
#define CBCMR_PRE_PERIPH_CLK_SEL_MASK (0x3u << 18)
#define CBCMR_PRE_PERIPH_CLK_SEL_ARM (0x3u << 18)   /* divided PLL1 (ARM PLL / ARM_PODF) */
#define CSCMR1_PERCLK_PODF_MASK 0x3Fu
#define CSCMR1_PERCLK_CLK_SEL_OSC (1u << 6)
#define CSCDR1_UART_CLK_PODF_MASK 0x3Fu
#define CSCDR1_UART_CLK_SEL_OSC (1u << 6)
#define CDHIPR_SEMC_PODF_BUSY (1u << 0)
#define CDHIPR_AHB_PODF_BUSY (1u << 1)
#define CDHIPR_PERIPH_CLK_SEL_BUSY (1u << 5)
#define CDHIPR_ARM_PODF_BUSY (1u << 16)
#define CLPCR_LPM_MASK 0x3u                      /* 0: WFI keeps the chip in RUN mode */
#define CCGR3_LPUART6 (0x3u << 6)
#define CCM_ANALOG_PLL_ARM QE_REG(0x400D8000u)
#define PLL_ARM_DIV_SELECT(n) ((uint32_t)(n) & 0x7Fu)   /* Fout = 24 MHz * n / 2, n in 54..108 */
#define PLL_ARM_ENABLE (1u << 13)
#define PLL_ARM_BYPASS (1u << 16)
#define PLL_ARM_LOCK (1u << 31)
#define ARM_PLL_DIV 100u                         /* 1200 MHz */
#define ARM_PODF 1u                              /* /2: 600 MHz */

/* ---- Cortex-M7 caches (System Control Block) */
#define SCB_CCR QE_REG(0xE000ED14u)
#define SCB_CCR_DC (1u << 16)
#define SCB_CCR_IC (1u << 17)
#define SCB_CCSIDR QE_REG(0xE000ED80u)
#define SCB_CSSELR QE_REG(0xE000ED84u)
#define SCB_ICIALLU QE_REG(0xE000EF50u)
#define SCB_DCISW QE_REG(0xE000EF60u)
#define SCB_VTOR_ADDR 0xE000ED08u

/* ---- IOMUXC: Teensy pin 1 = GPIO_AD_B0_02 (LPUART6_TX, ALT2), pin 0 = GPIO_AD_B0_03 (RX) */
#define IOMUXC_MUX_AD_B0_02 QE_REG(0x401F80C4u)
#define IOMUXC_MUX_AD_B0_03 QE_REG(0x401F80C8u)
#define IOMUXC_PAD_AD_B0_02 QE_REG(0x401F82B4u)
#define IOMUXC_PAD_AD_B0_03 QE_REG(0x401F82B8u)
#define IOMUXC_LPUART6_RX_SELECT_INPUT QE_REG(0x401F8550u)   /* 1: GPIO_AD_B0_03 */
#define IOMUXC_LPUART6_TX_SELECT_INPUT QE_REG(0x401F8554u)   /* 1: GPIO_AD_B0_02 */
#define MUX_ALT2 2u
#define PAD_DSE(n) ((uint32_t)(n) << 3)      /* drive strength, R0/n */
#define PAD_SPEED(n) ((uint32_t)(n) << 6)
#define PAD_PKE (1u << 12)
#define PAD_PUE (1u << 13)                   /* pull (not keeper) */
#define PAD_PUS_22K_UP (3u << 14)
#define PAD_HYS (1u << 16)

/* ---- LPUART6 */
#define LPUART6_BASE 0x40198000u
#define LPUART_GLOBAL QE_REG(LPUART6_BASE + 0x08u)
#define LPUART_BAUD QE_REG(LPUART6_BASE + 0x10u)
#define LPUART_STAT QE_REG(LPUART6_BASE + 0x14u)
#define LPUART_CTRL QE_REG(LPUART6_BASE + 0x18u)
#define LPUART_DATA QE_REG(LPUART6_BASE + 0x1Cu)
#define LPUART_FIFO QE_REG(LPUART6_BASE + 0x28u)
#define LPUART_WATER QE_REG(LPUART6_BASE + 0x2Cu)
#define GLOBAL_RST (1u << 1)
#define BAUD_OSR(n) ((uint32_t)((n) - 1u) << 24)   /* oversampling ratio n (4..32) */
#define BAUD_SBR(n) ((uint32_t)(n) & 0x1FFFu)
#define STAT_OR (1u << 19)                      /* overrun (write 1 to clear) */
#define STAT_RDRF (1u << 21)
#define STAT_TDRE (1u << 23)
#define CTRL_RE (1u << 18)
#define CTRL_TE (1u << 19)
#define CTRL_RIE (1u << 21)
#define FIFO_RXFE (1u << 3)
#define FIFO_TXFE (1u << 7)
#define UART_CLK_HZ 24000000u                   /* the oscillator, UART_CLK_PODF /1 */
#define UART_OSR 16u
#define UART_SBR ((UART_CLK_HZ + UART_OSR * QE_UART_BAUD / 2u) / (UART_OSR * QE_UART_BAUD))

const int qe_uart_irq = 25;   /* LPUART6 */

/* The IVT's entry (boot_header.c). The ROM arrives here on its own stack, with VTOR at its own
 * vector table and possibly interrupts enabled: mask interrupts, point VTOR at our table, load
 * our stack pointer from its entry 0 and jump to its reset handler (entry 1, the shared
 * Reset_Handler, which calls qe_family_early_init()). No C before the stack is ours; qe_vectors
 * is the shared vector table (firmware/ports/cortex-m/startup.c). */
__attribute__((naked, noreturn)) void qe_imxrt_entry(void);
void qe_imxrt_entry(void)
{
    __asm volatile(
        "cpsid i\n\t"
        "ldr r0, =qe_vectors\n\t"
        "ldr r1, =0xE000ED08\n\t"     /* SCB VTOR */
        "str r0, [r1]\n\t"
        "ldr r1, [r0, #0]\n\t"
        "msr msp, r1\n\t"
        "ldr r1, [r0, #4]\n\t"
        "dsb\n\t"
        "isb\n\t"
        "bx r1\n\t"
        ".ltorg");
}

static void watchdogs_off(void)
{
    WDOG_WMCR(WDOG1_BASE) = 0u;   /* power-down counters off (write-once) */
    WDOG_WMCR(WDOG2_BASE) = 0u;
    /* WDE is set only if a fuse or the ROM enabled the watchdog. Read-modify-write: WCR's SRS bit
     * written as 0 would reset the chip. */
    if (WDOG_WCR(WDOG1_BASE) & WDOG_WCR_WDE)
        WDOG_WCR(WDOG1_BASE) = (uint16_t)(WDOG_WCR(WDOG1_BASE) & ~WDOG_WCR_WDE);
    if (WDOG_WCR(WDOG2_BASE) & WDOG_WCR_WDE)
        WDOG_WCR(WDOG2_BASE) = (uint16_t)(WDOG_WCR(WDOG2_BASE) & ~WDOG_WCR_WDE);

    /* RTWDOG, if running and still reconfigurable (UPDATE; out of reset it is): unlock (one 32-bit
     * or two 16-bit key writes), then, inside the unlock window, a maximal timeout and EN cleared,
     * keeping UPDATE, and wait until the new configuration has taken effect. */
    if ((RTWDOG_CS & (RTWDOG_CS_EN | RTWDOG_CS_UPDATE)) == (RTWDOG_CS_EN | RTWDOG_CS_UPDATE)) {
        if (RTWDOG_CS & RTWDOG_CS_CMD32EN) {
            RTWDOG_CNT = 0xD928C520u;
        } else {
            RTWDOG_CNT16 = 0xC520u;
            RTWDOG_CNT16 = 0xD928u;
        }
        while (!(RTWDOG_CS & RTWDOG_CS_ULK)) {
        }
        RTWDOG_TOVAL = 0xFFFFu;
        RTWDOG_CS = (RTWDOG_CS & ~RTWDOG_CS_EN) | RTWDOG_CS_UPDATE;
        while (!(RTWDOG_CS & RTWDOG_CS_RCS)) {
        }
    }
}

static void clocks_600mhz(void)
{
    /* PERCLK (PIT, GPT) from the oscillator: it would otherwise follow IPG (max 75 MHz). */
    CCM_CSCMR1 = (CCM_CSCMR1 & ~CSCMR1_PERCLK_PODF_MASK) | CSCMR1_PERCLK_CLK_SEL_OSC;

    /* VDD_SOC up first: 600 MHz needs the overdrive voltage. */
    DCDC_REG3 = (DCDC_REG3 & ~DCDC_REG3_TRG_MASK) | DCDC_TRG_1V275;
    while (!(DCDC_REG0 & DCDC_REG0_STS_DC_OK)) {
    }

    /* Core, AHB and IPG onto the 24 MHz oscillator (periph_clk2) while the ARM PLL changes. */
    CCM_CBCMR = (CCM_CBCMR & ~CBCMR_PERIPH_CLK2_SEL_MASK) | CBCMR_PERIPH_CLK2_SEL_OSC;
    CCM_CBCDR &= ~CBCDR_PERIPH_CLK2_PODF_MASK;
    CCM_CBCDR |= CBCDR_PERIPH_CLK_SEL;
    while (CCM_CDHIPR & CDHIPR_PERIPH_CLK_SEL_BUSY) {
    }

    /* ARM PLL to 1200 MHz: bypassed while it locks, then its output. */
    CCM_ANALOG_PLL_ARM = PLL_ARM_ENABLE | PLL_ARM_BYPASS | PLL_ARM_DIV_SELECT(ARM_PLL_DIV);
    while (!(CCM_ANALOG_PLL_ARM & PLL_ARM_LOCK)) {
    }
    CCM_ANALOG_PLL_ARM = PLL_ARM_ENABLE | PLL_ARM_DIV_SELECT(ARM_PLL_DIV);
    CCM_CACRR = ARM_PODF;
    while (CCM_CDHIPR & CDHIPR_ARM_PODF_BUSY) {
    }

    /* AHB = core /1, IPG /4 (150 MHz), SEMC (unused) /8; then pre_periph = ARM PLL / ARM_PODF and
     * the core back onto it. */
    CCM_CBCDR = (CCM_CBCDR & ~(CBCDR_AHB_PODF_MASK | CBCDR_IPG_PODF_MASK | CBCDR_SEMC_PODF_MASK))
                | CBCDR_AHB_PODF(0) | CBCDR_IPG_PODF(3) | CBCDR_SEMC_PODF(7);
    while (CCM_CDHIPR & (CDHIPR_AHB_PODF_BUSY | CDHIPR_SEMC_PODF_BUSY)) {
    }
    CCM_CBCMR = (CCM_CBCMR & ~CBCMR_PRE_PERIPH_CLK_SEL_MASK) | CBCMR_PRE_PERIPH_CLK_SEL_ARM;
    CCM_CBCDR &= ~CBCDR_PERIPH_CLK_SEL;
    while (CCM_CDHIPR & CDHIPR_PERIPH_CLK_SEL_BUSY) {
    }

    CCM_CLPCR &= ~CLPCR_LPM_MASK;   /* WFI (the idle port sleeps) must not enter a stop mode */
}

/* Instruction and data caches on (unless the ROM left them on): the code and the model's weights
 * are read from QSPI flash, which the default memory map makes cacheable (write-back). DTCM, where
 * our data and stack are, is never cached. */
static void caches_on(void)
{
    __asm volatile("dsb\n\tisb" ::: "memory");
    if (!(SCB_CCR & SCB_CCR_IC)) {
        SCB_ICIALLU = 0u;
        __asm volatile("dsb\n\tisb" ::: "memory");
        SCB_CCR |= SCB_CCR_IC;
        __asm volatile("dsb\n\tisb" ::: "memory");
    }
    if (!(SCB_CCR & SCB_CCR_DC)) {
        uint32_t ccsidr, sets, ways, way;
        SCB_CSSELR = 0u;   /* level 1 data cache */
        __asm volatile("dsb" ::: "memory");
        ccsidr = SCB_CCSIDR;
        sets = (ccsidr >> 13) & 0x7FFFu;   /* number of sets - 1 */
        ways = (ccsidr >> 3) & 0x3FFu;     /* associativity - 1 */
        do {   /* invalidate every line by set/way (Cortex-M7: way in [31:30], set from bit 5) */
            for (way = 0u; way <= ways; way++)
                SCB_DCISW = (way << 30) | ((sets & 0x1FFu) << 5);
        } while (sets-- != 0u);
        __asm volatile("dsb" ::: "memory");
        SCB_CCR |= SCB_CCR_DC;
        __asm volatile("dsb\n\tisb" ::: "memory");
    }
}

/* Runs before .data/.bss exist (no static variables). */
void qe_family_early_init(void)
{
    uint32_t i;

    /* Whatever the ROM left running: SysTick off, no interrupt enabled or pending (160 lines). */
    QE_SYST_CSR = 0u;
    for (i = 0u; i < 5u; i++) {
        QE_NVIC_ICER(i) = 0xFFFFFFFFu;
        QE_NVIC_ICPR(i) = 0xFFFFFFFFu;
    }
    watchdogs_off();
    clocks_600mhz();
    caches_on();
    /* qe_imxrt_entry masked interrupts; nothing is enabled in the NVIC, so unmask them again. */
    qe_irq_enable();
}

void qe_uart_init(void)
{
    CCM_CSCDR1 = (CCM_CSCDR1 & ~(CSCDR1_UART_CLK_PODF_MASK | CSCDR1_UART_CLK_SEL_OSC))
                 | CSCDR1_UART_CLK_SEL_OSC;
    CCM_CCGR3 |= CCGR3_LPUART6;

    IOMUXC_MUX_AD_B0_02 = MUX_ALT2;
    IOMUXC_MUX_AD_B0_03 = MUX_ALT2;
    IOMUXC_PAD_AD_B0_02 = PAD_DSE(6) | PAD_SPEED(2);
    IOMUXC_PAD_AD_B0_03 = PAD_DSE(6) | PAD_SPEED(2) | PAD_PKE | PAD_PUE | PAD_PUS_22K_UP | PAD_HYS;
    IOMUXC_LPUART6_RX_SELECT_INPUT = 1u;
    IOMUXC_LPUART6_TX_SELECT_INPUT = 1u;

    LPUART_GLOBAL = GLOBAL_RST;   /* software reset: every register back to its reset value */
    LPUART_GLOBAL = 0u;
    LPUART_BAUD = BAUD_OSR(UART_OSR) | BAUD_SBR(UART_SBR);   /* written while TE/RE are off */
    LPUART_FIFO = FIFO_RXFE | FIFO_TXFE;
    LPUART_WATER = 0u;            /* RDRF (and its interrupt) as soon as one byte is in the FIFO */
    LPUART_CTRL = CTRL_TE | CTRL_RE | CTRL_RIE;
}

int qe_uart_rx_ready(void)
{
    uint32_t stat = LPUART_STAT;
    if (stat & STAT_OR)
        LPUART_STAT = STAT_OR;   /* an overrun stops reception until cleared; the lost bytes are
                                  * the protocol's to notice (CRC, resync) */
    return (stat & STAT_RDRF) != 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)LPUART_DATA;
}

void qe_uart_tx(uint8_t byte)
{
    while (!(LPUART_STAT & STAT_TDRE)) {
    }
    LPUART_DATA = byte;
}

void qe_uart_rx_irq_clear(void)
{
    /* The RX interrupt follows RDRF, which reading the data clears. */
}
