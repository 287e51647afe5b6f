/* The qe_port.h functions for every Cortex-M family; the family port supplies only its UART
 * (cortexm.h) and its memory map (a linker script that INCLUDEs sections.ld).
 *
 * Link: the family's UART 0. qe_port_read_byte() sleeps (WFI) until a byte arrives, so an idle
 * board does not spin the emulator's CPU (a spinning vCPU also delays QEMU's own I/O thread by
 * up to a second); it never returns -1 (a UART has no end of file).
 *
 * Cost: SysTick, restarted for every measurement (stopped, reload 0xFFFFFF, current value
 * cleared, started on the processor clock) so that equal work gives equal counts; its 24-bit
 * wrap is counted by the SysTick interrupt, so measurements may be arbitrarily long (up to
 * 2^32 - 1 in the reported unit, saturated beyond).
 *  - QE_COST_INSTRUCTIONS (QEMU with -icount shift=N): virtual time advances exactly 2^N ns per
 *    executed instruction and SysTick counts virtual time at QE_SYSTICK_HZ, so
 *    instructions = ticks * 1e9 / (QE_SYSTICK_HZ * 2^N), rounded. That is exact when one
 *    instruction spans at least two ticks (QE_SYSTICK_HZ * 2^N >= 2e9; checked below).
 *  - QE_COST_CYCLES (hardware): the processor clock drives SysTick, ticks are cycles.
 * The count includes the few instructions of starting and reading the counter (a constant).
 *
 * On silicon the counter can be another one (cortexm.h, chosen by the board's cflags):
 *  - -DQE_CORTEXM_DWT (Cortex-M3/M4/M7/M33): the DWT cycle counter CYCCNT, enabled once at
 *    start-up (DEMCR.TRCENA, the CoreSight lock opened, CYCCNTENA) and cleared for every
 *    measurement. No interrupt is involved, so nothing is added per 2^24 cycles. CYCCNT is 32 bits
 *    wide and its wrap cannot be seen: a measurement of 2^32 cycles or more (23.9 s at 180 MHz,
 *    7.2 s at 600 MHz) is reported modulo 2^32. Cycles include the core's stalls (flash wait
 *    states, bus contention): what the inference really took on this board.
 *  - -DQE_CORTEXM_FAMILY_COST: the family port's qe_family_cost_*() (cores without SysTick).
 *
 * Memory: flash and static RAM (including the stack section) from linker symbols; the stack
 * high-water mark by counting the words below the stack that still hold the reset-time paint. */
#include <stdint.h>

#include "qe_protocol.h"
#include "qe_port.h"
#include "cortexm.h"
#include "cortexm_port.h"

extern uint32_t __stack_bottom[], __stack_top[];
extern uint32_t __qe_flash_used[], __qe_ram_used[];   /* absolute symbols: sizes, not addresses */

#if QE_COST_UNIT == QE_COST_INSTRUCTIONS
#if !defined(QE_ICOUNT_SHIFT) || !defined(QE_SYSTICK_HZ)
#error "instruction counting needs QE_ICOUNT_SHIFT (QEMU -icount shift) and QE_SYSTICK_HZ"
#endif
/* One instruction must span >= 2 SysTick ticks for the rounding to be exact. */
typedef char qe_icount_resolution_check[
    ((unsigned long long)(QE_SYSTICK_HZ) << (QE_ICOUNT_SHIFT)) >= 2000000000ull ? 1 : -1];
#elif QE_COST_UNIT != QE_COST_CYCLES
#error "Cortex-M ports count instructions (QEMU -icount) or cycles (SysTick on the core clock)"
#endif
#if (defined(QE_CORTEXM_DWT) || defined(QE_CORTEXM_FAMILY_COST)) && QE_COST_UNIT != QE_COST_CYCLES
#error "QE_CORTEXM_DWT and QE_CORTEXM_FAMILY_COST count cycles on silicon: cost_unit = \"cycles\""
#endif
#if defined(QE_CORTEXM_DWT) && defined(QE_CORTEXM_FAMILY_COST)
#error "one cost counter: QE_CORTEXM_DWT or QE_CORTEXM_FAMILY_COST, not both"
#endif
#if defined(QE_CORTEXM_DWT) && (__ARM_ARCH_PROFILE != 'M' || !defined(__ARM_ARCH_7M__) \
    && !defined(__ARM_ARCH_7EM__) && !defined(__ARM_ARCH_8M_MAIN__) && !defined(__ARM_ARCH_8_1M_MAIN__))
#error "QE_CORTEXM_DWT: ARMv6-M and ARMv8-M Baseline cores (M0, M0+, M23) have no cycle counter"
#endif

void qe_port_init(void)
{
    qe_uart_init();
#if defined(QE_CORTEXM_DWT)
    QE_DEMCR |= QE_DEMCR_TRCENA;
    QE_DWT_LAR = QE_DWT_LAR_KEY;
    QE_DWT_CYCCNT = 0u;
    QE_DWT_CTRL |= QE_DWT_CTRL_CYCCNTENA;
#elif defined(QE_CORTEXM_FAMILY_COST)
    qe_family_cost_init();
#endif
}

void qe_port_run(void (*fn)(void))
{
    fn();
}

/* ---------------------------------------------------------------------------------- link */
/* The UART's interrupt is enabled in the NVIC only while we sleep, with interrupts masked
 * (PRIMASK): a pending interrupt still ends WFI but is never taken, so no handler can run in
 * the middle of a measurement and change its count. Stale interrupt state (bytes that were
 * read without sleeping) is cleared before the last check, and a byte arriving between that
 * check and WFI leaves the interrupt pending, so WFI returns at once: no byte is missed. */
int qe_port_read_byte(void)
{
    const uint32_t word = (uint32_t)qe_uart_irq / 32u, bit = 1u << ((uint32_t)qe_uart_irq % 32u);

    while (!qe_uart_rx_ready()) {
        if (qe_uart_irq < 0)
            continue;   /* no interrupt known: poll */
        qe_irq_disable();
        qe_uart_rx_irq_clear();
        QE_NVIC_ICPR(word) = bit;
        if (!qe_uart_rx_ready()) {
            QE_NVIC_ISER(word) = bit;
            qe_wfi();
            QE_NVIC_ICER(word) = bit;
        }
        qe_irq_enable();
    }
    return qe_uart_rx();
}

void qe_port_write(const uint8_t *data, uint32_t n)
{
    while (n--)
        qe_uart_tx(*data++);
}

/* ---------------------------------------------------------------------------------- cost */
/* Always defined (the vector table names it); its interrupt is only enabled by the SysTick
 * counter below, never with QE_CORTEXM_DWT or QE_CORTEXM_FAMILY_COST. */
static volatile uint32_t systick_wraps;

void qe_systick_handler(void);
void qe_systick_handler(void)
{
    systick_wraps++;
}

#if defined(QE_CORTEXM_DWT)
void qe_port_cost_start(void)
{
    QE_DWT_CYCCNT = 0u;
}

uint32_t qe_port_cost_stop(void)
{
    return QE_DWT_CYCCNT;
}

#elif defined(QE_CORTEXM_FAMILY_COST)
void qe_port_cost_start(void)
{
    qe_family_cost_start();
}

uint32_t qe_port_cost_stop(void)
{
    return qe_family_cost_stop();
}

#else
/* CSR keeps CLKSOURCE set while SysTick is stopped: QEMU rescales the current value when the
 * clock source changes, so clearing the whole register before reading CVR corrupts the count. */
void qe_port_cost_start(void)
{
    QE_SYST_CSR = QE_SYST_CSR_CLKSOURCE;
    QE_SYST_RVR = 0x00FFFFFFu;
    QE_SYST_CVR = 0u;
    QE_SCB_ICSR = QE_SCB_ICSR_PENDSTCLR;
    systick_wraps = 0u;
    QE_SYST_CSR = QE_SYST_CSR_CLKSOURCE | QE_SYST_CSR_TICKINT | QE_SYST_CSR_ENABLE;
}

uint32_t qe_port_cost_stop(void)
{
    uint32_t cvr;
    uint64_t ticks, cost;

    QE_SYST_CSR = QE_SYST_CSR_CLKSOURCE;   /* stopped (same clock): no wrap from here on */
    cvr = QE_SYST_CVR & 0x00FFFFFFu;
    if (QE_SCB_ICSR & QE_SCB_ICSR_PENDSTSET) {   /* a wrap whose interrupt was not taken yet */
        QE_SCB_ICSR = QE_SCB_ICSR_PENDSTCLR;
        systick_wraps++;
    }
    ticks = ((uint64_t)systick_wraps << 24) + (0x00FFFFFFu - cvr);
#if QE_COST_UNIT == QE_COST_INSTRUCTIONS
    {
        const uint64_t ticks_per_2n_instr = (uint64_t)(QE_SYSTICK_HZ);   /* per 2^N instructions, per 1e9 */
        const uint64_t den = ticks_per_2n_instr << (QE_ICOUNT_SHIFT);
        cost = (ticks * 1000000000ull + den / 2u) / den;
    }
#else
    cost = ticks;
#endif
    return cost > 0xFFFFFFFFull ? 0xFFFFFFFFu : (uint32_t)cost;
}
#endif /* cost counter */

/* -------------------------------------------------------------------------------- memory */
uint32_t qe_port_flash_bytes(void) { return (uint32_t)(uintptr_t)__qe_flash_used; }
uint32_t qe_port_ram_bytes(void) { return (uint32_t)(uintptr_t)__qe_ram_used; }

uint32_t qe_port_stack_size(void)
{
    return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)__stack_bottom);
}

uint32_t qe_port_stack_used(void)
{
    const uint32_t *p = __stack_bottom;
    while (p < __stack_top && *p == QE_STACK_PAINT)
        p++;
    return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)p);
}
