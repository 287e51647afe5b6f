/* Shared part of the Cortex-M ports (firmware/ports/cortex-m/): core registers, and what each
 * family port (firmware/ports/<family>/port.c) provides to the shared code: its UART.
 *
 * A board file uses it with `shared = ["cortex-m"]` in [build]; the build then compiles the
 * C files here with the family's and adds this directory to the include and linker paths.
 *
 * Build-time options (a board file's [build] cflags):
 *  - QE_SEMIHOSTING (default 1): 1 on emulators, where a fault or a return from main() ends
 *    QEMU through ARM semihosting (`bkpt 0xAB`). Real boards build with -DQE_SEMIHOSTING=0:
 *    without a debugger that breakpoint would escalate to a HardFault inside the HardFault
 *    handler, i.e. lock the core up. Instead the firmware halts: interrupts off, the reason in
 *    qe_halt_code (3 = processor fault, 4 = main() returned), and a busy loop, so the state stays
 *    inspectable by a debugger attached later (openocd/pyocd "halt"); the host sees a board that
 *    stopped answering. We deliberately do not reset (SCB AIRCR SYSRESETREQ): a board rebooting
 *    in a loop would hide the fault behind replies that look healthy.
 *  - The cost counter (QE_COST_CYCLES / QE_COST_INSTRUCTIONS, set by the build from cost_unit):
 *      default                 SysTick on the processor clock (QEMU -icount: instructions; on
 *                              silicon: cycles). What ARMv6-M cores (M0/M0+) with SysTick use.
 *      -DQE_CORTEXM_DWT        (cycles, Cortex-M3/M4/M7/M33 silicon) the DWT cycle counter
 *                              CYCCNT, see port.c. QEMU does not model the DWT: emulated boards
 *                              never set it.
 *      -DQE_CORTEXM_FAMILY_COST  the family port counts (qe_family_cost_* below), for cores
 *                              without SysTick (the nRF51's Cortex-M0 has none). */
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

#ifndef QE_SEMIHOSTING
#define QE_SEMIHOSTING 1
#endif

/* Data Watchpoint and Trace unit (ARMv7-M / ARMv8-M Mainline only; absent on M0/M0+). DEMCR's
 * TRCENA powers the DWT; CYCCNT counts processor clock cycles while CYCCNTENA is set (also
 * without a debugger attached). LAR: the CoreSight software lock, which some Cortex-M7 parts
 * (e.g. STM32F7/H7) keep locked until the key is written; writes to it are ignored elsewhere. */
#define QE_DEMCR QE_REG(0xE000EDFCu)
#define QE_DEMCR_TRCENA (1u << 24)
#define QE_DWT_CTRL QE_REG(0xE0001000u)
#define QE_DWT_CTRL_CYCCNTENA (1u << 0)
#define QE_DWT_CTRL_NOCYCCNT (1u << 25)
#define QE_DWT_CYCCNT QE_REG(0xE0001004u)
#define QE_DWT_LAR QE_REG(0xE0001FB0u)
#define QE_DWT_LAR_KEY 0xC5ACCE55u

/* The family port's UART (its serial port 0, what QEMU's -serial connects). */
void qe_uart_init(void);
int qe_uart_rx_ready(void);             /* a received byte is waiting */
uint8_t qe_uart_rx(void);               /* take it (only after qe_uart_rx_ready()) */
void qe_uart_tx(uint8_t byte);          /* blocking while the transmitter is full */
void qe_uart_rx_irq_clear(void);        /* clear the UART's own RX interrupt status */
/* The UART's NVIC interrupt number (RX), or -1: the port then polls without sleeping. */
extern const int qe_uart_irq;

/* The rest of the family port's set-up, run first thing after reset (before .data/.bss are
 * initialised: it must not use static variables; may be empty). On silicon this is where the
 * clock tree is set up (PLL, flash wait states), so the rest of start-up already runs fast. */
void qe_family_early_init(void);

/* With -DQE_CORTEXM_FAMILY_COST only: the family's cost counter in the board's unit (cycles),
 * set up once by qe_family_cost_init() (from qe_port_init(), after qe_uart_init()). */
void qe_family_cost_init(void);
void qe_family_cost_start(void);
uint32_t qe_family_cost_stop(void);

/* Stop for good with an exit code: with QE_SEMIHOSTING, end the emulator (ARM semihosting
 * SYS_EXIT_EXTENDED); without, halt (see QE_SEMIHOSTING above). qe_semihost_write0() prints on
 * the emulator's console; without semihosting it does nothing. */
void qe_semihost_exit(uint32_t code) __attribute__((noreturn));
void qe_semihost_write0(const char *msg);
/* Why the firmware halted (0 while running); for a debugger, without semihosting. */
extern volatile uint32_t qe_halt_code;

static inline void qe_irq_disable(void) { __asm volatile("cpsid i" ::: "memory"); }
static inline void qe_irq_enable(void) { __asm volatile("cpsie i" ::: "memory"); }
static inline void qe_wfi(void) { __asm volatile("dsb\n\twfi" ::: "memory"); }

#endif /* QE_CORTEXM_H */
