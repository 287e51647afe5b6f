/* Shared part of the RISC-V ports (firmware/ports/riscv/): machine-mode CSRs, and what each
 * family port (firmware/ports/<family>/port.c) provides to the shared code: its UART.
 *
 * A board file uses it with `shared = ["riscv"]` in [build]; the build then compiles the C files
 * here with the family's and adds this directory to the include and linker paths (the family's
 * linker script INCLUDEs sections.ld). Everything runs in machine mode with interrupts off
 * (mstatus.MIE = 0): no handler ever runs in the middle of a measurement.
 *
 * Build-time options (a board file's [build] cflags):
 *  - QE_SEMIHOSTING (default 1): 1 on emulators, where a trap or a return from main() ends QEMU
 *    through RISC-V semihosting (the `slli x0,x0,0x1f; ebreak; srai x0,x0,7` sequence). Real
 *    boards build with -DQE_SEMIHOSTING=0: the firmware then halts in a loop, the reason in
 *    qe_halt_code (3 = trap, 4 = main() returned), for a debugger attached later.
 *  - The cost counter (set by the build from cost_unit): QE_COST_INSTRUCTIONS reads minstret,
 *    which QEMU with -icount shift=N advances by 2^N per executed instruction (exact and
 *    repeatable; QE_ICOUNT_SHIFT says N); QE_COST_CYCLES reads mcycle (silicon), unless the
 *    family counts itself (-DQE_RISCV_FAMILY_COST: qe_family_cost_* below). */
#ifndef QE_RISCV_H
#define QE_RISCV_H

#include <stdint.h>

#define QE_REG(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

/* CSR instructions belong to the Zicsr extension, which the boards' -march leaves out: with
 * "_zicsr" in -march, GCC 12 picks no rv32imac multilib and links the 64-bit libgcc and C
 * library. So the few CSR accesses enable it for themselves (QE_ZICSR). */
#define QE_ZICSR ".option push\n\t.option arch, +zicsr\n\t"
#define QE_ZICSR_END "\n\t.option pop"
#define QE_CSR_READ(csr) ({ uint32_t v_; \
    __asm volatile(QE_ZICSR "csrr %0, " #csr QE_ZICSR_END : "=r"(v_)); v_; })
#define QE_CSR_SET(csr, bits) __asm volatile(QE_ZICSR "csrs " #csr ", %0" QE_ZICSR_END ::"r"(bits))
#define QE_CSR_CLEAR(csr, bits) __asm volatile(QE_ZICSR "csrc " #csr ", %0" QE_ZICSR_END ::"r"(bits))
#define QE_MIE_MEIE (1u << 11)      /* mie: machine external interrupt enable */

#ifndef QE_SEMIHOSTING
#define QE_SEMIHOSTING 1
#endif

/* The family port's UART (its serial port 0, what QEMU's -serial connects). */
void qe_uart_init(void);
int qe_uart_rx_ready(void);             /* a received byte is waiting */
uint8_t qe_uart_rx(void);               /* take it (only after qe_uart_rx_ready()) */
void qe_uart_tx(uint8_t byte);          /* blocking while the transmitter is full */
/* 1: qe_uart_init() routed the UART's receive interrupt to the machine external interrupt
 * (mip.MEIP, through the family's interrupt controller), which stays pending while a byte
 * waits, so the port may sleep in WFI; 0: the port polls. */
extern const int qe_uart_wakes;
/* Clear the receive interrupt's pending state in the family's interrupt controller (e.g. claim
 * and complete it at the PLIC), so that WFI waits for the next byte; empty without qe_uart_wakes. */
void qe_uart_irq_clear(void);

/* The rest of the family port's set-up, run first thing after reset (before .data/.bss are
 * initialised: it must not use static variables; may be empty). */
void qe_family_early_init(void);

/* With -DQE_RISCV_FAMILY_COST only: the family's own cycle counter. */
void qe_family_cost_init(void);
void qe_family_cost_start(void);
uint32_t qe_family_cost_stop(void);

/* Start-up (startup.c): why the firmware halted on a real board (0: it did not). */
extern volatile uint32_t qe_halt_code;

#define QE_STACK_PAINT 0xC5C5C5C5u

#endif /* QE_RISCV_H */
