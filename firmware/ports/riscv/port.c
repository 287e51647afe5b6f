/* The qe_port.h functions for every RISC-V family; the family port supplies only its UART
 * (riscv.h) and its memory map (a linker script that INCLUDEs sections.ld).
 *
 * Link: the family's UART 0. qe_port_read_byte() sleeps (WFI) until a byte arrives when the
 * family routes the UART's receive interrupt to the machine external interrupt (qe_uart_wakes),
 * so an idle board does not spin the emulator's CPU; it never returns -1. WFI wakes on a
 * pending interrupt enabled in mie even with mstatus.MIE = 0, and no trap is taken: mie.MEIE is
 * set only around WFI. The interrupt controller keeps an interrupt pending until it is claimed
 * (QEMU 7.2's PLIC even after the UART lowers its line), so stale state (bytes that were read
 * without sleeping) is cleared before the last check; a byte arriving between that check and WFI
 * leaves the interrupt pending, so WFI returns at once: no byte is missed.
 *
 * Cost:
 *  - QE_COST_INSTRUCTIONS (QEMU with -icount shift=N): minstret advances 2^N per executed
 *    instruction (QEMU returns its virtual clock in ns), so instructions = delta >> N, exact.
 *  - QE_COST_CYCLES (silicon): mcycle, or the family's counter (-DQE_RISCV_FAMILY_COST).
 * Both are 64-bit counters read as their low word: a measurement of 2^32 counts or more is
 * reported modulo 2^32 (2^(32-N) instructions; 13 s at 320 MHz in cycles). The count includes
 * the few instructions of reading the counter (a constant).
 *
 * Memory: flash and static RAM (including the stack section) from linker symbols; the stack
 * high-water mark by counting the words below the stack that still hold the reset-time paint. */
#include <stdint.h>

#include "qe_protocol.h"
#include "qe_port.h"
#include "riscv.h"

extern uint32_t __stack_bottom[], __stack_top[];
extern uint32_t __qe_flash_used[], __qe_ram_used[];   /* absolute symbols: sizes, not addresses */

#if QE_COST_UNIT == QE_COST_INSTRUCTIONS
#if !defined(QE_ICOUNT_SHIFT)
#error "instruction counting needs QE_ICOUNT_SHIFT (QEMU -icount shift)"
#endif
#if defined(QE_RISCV_FAMILY_COST)
#error "QE_RISCV_FAMILY_COST counts cycles on silicon: cost_unit = \"cycles\""
#endif
#elif QE_COST_UNIT != QE_COST_CYCLES
#error "RISC-V ports count instructions (QEMU -icount) or cycles"
#endif

void qe_port_init(void)
{
    qe_uart_init();
#if defined(QE_RISCV_FAMILY_COST)
    qe_family_cost_init();
#endif
}

void qe_port_run(void (*fn)(void))
{
    fn();
}

/* ---------------------------------------------------------------------------------- link */
int qe_port_read_byte(void)
{
    while (!qe_uart_rx_ready()) {
        if (!qe_uart_wakes)
            continue;   /* no interrupt routed: poll */
        qe_uart_irq_clear();
        QE_CSR_SET(mie, QE_MIE_MEIE);
        if (!qe_uart_rx_ready())
            __asm volatile("wfi" ::: "memory");
        QE_CSR_CLEAR(mie, QE_MIE_MEIE);
    }
    return qe_uart_rx();
}

void qe_port_write(const uint8_t *data, uint32_t n)
{
    while (n--)
        qe_uart_tx(*data++);
}

/* ---------------------------------------------------------------------------------- cost */
#if defined(QE_RISCV_FAMILY_COST)
void qe_port_cost_start(void)
{
    qe_family_cost_start();
}

uint32_t qe_port_cost_stop(void)
{
    return qe_family_cost_stop();
}

#else
static uint32_t cost_start;

static inline uint32_t counter(void)
{
#if QE_COST_UNIT == QE_COST_INSTRUCTIONS
    return QE_CSR_READ(minstret);
#else
    return QE_CSR_READ(mcycle);
#endif
}

void qe_port_cost_start(void)
{
    cost_start = counter();
}

uint32_t qe_port_cost_stop(void)
{
    uint32_t delta = counter() - cost_start;
#if QE_COST_UNIT == QE_COST_INSTRUCTIONS && QE_ICOUNT_SHIFT > 0
    delta = (delta + (1u << (QE_ICOUNT_SHIFT - 1))) >> QE_ICOUNT_SHIFT;
#endif
    return delta;
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
