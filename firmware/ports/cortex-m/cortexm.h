/* Shared part of the Cortex-M ports (firmware/ports/cortex-m/): core registers, and what each
 * family port (firmware/ports/<family>/port.c) provides to the shared code: its UART.
 *
 * A board file uses it with `shared = ["cortex-m"]` in [build]; the build then compiles the
 * C files here with the family's and adds this directory to the include and linker paths. */
#ifndef QE_CORTEXM_H
#define QE_CORTEXM_H

#include <stdint.h>

#define QE_REG(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

/* SysTick, NVIC and SCB (ARMv6-M / ARMv7-M / ARMv8-M System Control Space). */
#define QE_SYST_CSR QE_REG(0xE000E010u)
#define QE_SYST_RVR QE_REG(0xE000E014u)
#define QE_SYST_CVR QE_REG(0xE000E018u)
#define QE_SYST_CSR_ENABLE (1u << 0)
#define QE_SYST_CSR_TICKINT (1u << 1)
#define QE_SYST_CSR_CLKSOURCE (1u << 2)   /* 1: the processor clock */
#define QE_NVIC_ISER(n) QE_REG(0xE000E100u + 4u * (n))
#define QE_NVIC_ICER(n) QE_REG(0xE000E180u + 4u * (n))
#define QE_NVIC_ICPR(n) QE_REG(0xE000E280u + 4u * (n))
#define QE_SCB_ICSR QE_REG(0xE000ED04u)
#define QE_SCB_ICSR_PENDSTSET (1u << 26)
#define QE_SCB_ICSR_PENDSTCLR (1u << 25)
#define QE_SCB_CPACR QE_REG(0xE000ED88u)

/* The family port's UART (its serial port 0, what QEMU's -serial connects). */
void qe_uart_init(void);
int qe_uart_rx_ready(void);             /* a received byte is waiting */
uint8_t qe_uart_rx(void);               /* take it (only after qe_uart_rx_ready()) */
void qe_uart_tx(uint8_t byte);          /* blocking while the transmitter is full */
void qe_uart_rx_irq_clear(void);        /* clear the UART's own RX interrupt status */
/* The UART's NVIC interrupt number (RX), or -1: the port then polls without sleeping. */
extern const int qe_uart_irq;

/* The rest of the family port's set-up, run first thing after reset (before .data/.bss are
 * initialised; may be empty). */
void qe_family_early_init(void);

/* Stop the emulator (ARM semihosting SYS_EXIT_EXTENDED) with an exit code; on hardware without
 * a debugger this traps, which is what we want after a fault anyway. */
void qe_semihost_exit(uint32_t code) __attribute__((noreturn));
void qe_semihost_write0(const char *msg);

static inline void qe_irq_disable(void) { __asm volatile("cpsid i" ::: "memory"); }
static inline void qe_irq_enable(void) { __asm volatile("cpsie i" ::: "memory"); }
static inline void qe_wfi(void) { __asm volatile("dsb\n\twfi" ::: "memory"); }

#endif /* QE_CORTEXM_H */
