/* Reset and exceptions for the Cortex-M ports: our own vector table and start-up code (no vendor
 * files). After reset: enable the FPU (hard-float builds), copy .data from flash, zero .bss,
 * paint the stack with QE_STACK_PAINT (the MEM command counts the words still painted), then
 * main(). A fault or an unexpected return from main() ends an emulator through semihosting with
 * a non-zero exit code and a message on its console, so the host sees a dead board at once
 * instead of a silent one. Real boards (-DQE_SEMIHOSTING=0: no debugger to answer `bkpt`) halt
 * in a loop instead, the reason in qe_halt_code (cortexm.h). */
#include <stdint.h>

#include "cortexm.h"
#include "cortexm_port.h"

/* Linker-script symbols (firmware/ports/cortex-m/sections.ld). */
extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __stack_bottom[], __stack_top[];

int main(void);
void Reset_Handler(void) __attribute__((noreturn));
void qe_fault_handler(void) __attribute__((noreturn));
void qe_irq_handler(void);
void qe_systick_handler(void);   /* firmware/ports/cortex-m/port.c */

#ifndef QE_NUM_IRQS
#define QE_NUM_IRQS 64
#endif

typedef void (*qe_vector_t)(void);

/* Entry 0 is the initial stack pointer, then the exceptions, then the external interrupts. */
__attribute__((section(".isr_vector"), used))
const qe_vector_t qe_vectors[16 + QE_NUM_IRQS] = {
    [0] = (qe_vector_t)(uintptr_t)__stack_top,
    [1] = Reset_Handler,
    [2] = qe_fault_handler,   /* NMI */
    [3] = qe_fault_handler,   /* HardFault */
    [4] = qe_fault_handler,   /* MemManage */
    [5] = qe_fault_handler,   /* BusFault */
    [6] = qe_fault_handler,   /* UsageFault */
    [7] = qe_fault_handler,   /* SecureFault (ARMv8-M) */
    [11] = qe_fault_handler,  /* SVCall */
    [12] = qe_fault_handler,  /* DebugMonitor */
    [14] = qe_fault_handler,  /* PendSV */
    [15] = qe_systick_handler,
    [16 ... 16 + QE_NUM_IRQS - 1] = qe_irq_handler,
};

volatile uint32_t qe_halt_code;

#if QE_SEMIHOSTING
void qe_semihost_write0(const char *msg)
{
    register uint32_t r0 __asm("r0") = 0x04u;   /* SYS_WRITE0 */
    register const char *r1 __asm("r1") = msg;
    __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
}

void qe_semihost_exit(uint32_t code)
{
    static uint32_t block[2];
    register uint32_t r0 __asm("r0") = 0x20u;   /* SYS_EXIT_EXTENDED */
    register uint32_t *r1 __asm("r1") = block;
    block[0] = 0x20026u;                          /* ADP_Stopped_ApplicationExit */
    block[1] = code;
    for (;;)
        __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
}
#else
void qe_semihost_write0(const char *msg)
{
    (void)msg;
}

/* No debugger on a real board: halt where a debugger attached later can look. Interrupts off, so
 * nothing runs any more; a plain loop, not WFI (a sleeping STM32 core can refuse a debugger). */
void qe_semihost_exit(uint32_t code)
{
    qe_irq_disable();
    qe_halt_code = code;
    for (;;)
        __asm volatile("" ::: "memory");
}
#endif

void qe_fault_handler(void)
{
    qe_semihost_write0("quarl-edge firmware: processor fault (NMI/HardFault/...)\n");
    qe_semihost_exit(3u);
}

/* An interrupt nobody asked for: switch it off in the NVIC rather than loop on it. (The UART's
 * RX interrupt is never taken: port.c enables it only while sleeping with interrupts masked.) */
void qe_irq_handler(void)
{
    uint32_t ipsr, irq;
    __asm volatile("mrs %0, ipsr" : "=r"(ipsr));
    irq = (ipsr & 0x1FFu) - 16u;
    QE_NVIC_ICER(irq / 32u) = 1u << (irq % 32u);
}

void Reset_Handler(void)
{
    volatile uint32_t *p;
    uint32_t *src, *dst;
    uint32_t sp;

#if defined(__ARM_FP)
    QE_SCB_CPACR |= 0xFu << 20;   /* CP10, CP11: full access to the FPU */
    __asm volatile("dsb\n\tisb" ::: "memory");
#endif
    qe_family_early_init();
    for (src = __data_load, dst = __data_start; dst < __data_end;)
        *dst++ = *src++;
    for (dst = __bss_start; dst < __bss_end;)
        *dst++ = 0u;
    /* Paint the free stack below the current stack pointer (our own frame lives above it).
     * volatile: the compiler must not turn this into a memset() call, whose frame would sit
     * in the very words being painted. */
    __asm volatile("mov %0, sp" : "=r"(sp));
    for (p = (volatile uint32_t *)__stack_bottom; (uintptr_t)p < (sp & ~3u); p++)
        *p = QE_STACK_PAINT;
    (void)main();
    qe_semihost_write0("quarl-edge firmware: main() returned\n");
    qe_semihost_exit(4u);
}
