/* Reset and traps for the RISC-V ports: our own entry and start-up code (no vendor files, no C
 * library start-up). The boot ROM (QEMU's too) jumps to the start of the family's FLASH region,
 * where _start sets the global pointer, the stack pointer, the thread pointer (picolibc keeps
 * errno in thread-local storage) and the trap vector, then qe_reset() copies .data from flash,
 * zeroes .bss, paints the stack with QE_STACK_PAINT (the MEM command counts the words still
 * painted), and calls main(). Interrupts stay off (mstatus.MIE = 0) throughout, so the only way
 * into the trap vector is an exception: it ends an emulator through semihosting with a non-zero
 * exit code and a message on its console, so the host sees a dead board at once instead of a
 * silent one. Real boards (-DQE_SEMIHOSTING=0) halt in a loop instead, the reason in
 * qe_halt_code. */
#include <stdint.h>

#include "riscv.h"

/* Linker-script symbols (firmware/ports/riscv/sections.ld). */
extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __stack_bottom[], __stack_top[];

int main(void);
void qe_reset(void) __attribute__((noreturn, used));
/* mtvec's base: 4-byte aligned in direct mode; a core that only has the vectored mode (the
 * ESP32-C3's) keeps the low 8 bits for itself: its board sets -DQE_RISCV_TRAP_ALIGN=256. */
#ifndef QE_RISCV_TRAP_ALIGN
#define QE_RISCV_TRAP_ALIGN 4
#endif
void qe_trap(void) __attribute__((noreturn, used, aligned(QE_RISCV_TRAP_ALIGN)));

__asm__(
    "    .section .text.qe_entry, \"ax\"\n"
    "    .globl _start\n"
    "_start:\n"
    "    .option push\n"
    "    .option norelax\n"
    "    la gp, __global_pointer$\n"
    "    .option pop\n"
    "    la sp, __stack_top\n"
    "    la tp, __tls_base\n"
    "    .option push\n"
    "    .option arch, +zicsr\n"
    "    la t0, qe_trap\n"
    "    csrw mtvec, t0\n"
    "    csrw mie, zero\n"
    "    csrci mstatus, 8\n"          /* MIE = 0 */
    "    .option pop\n"
    "    j qe_reset\n"
    "    .text\n");

volatile uint32_t qe_halt_code;

#if QE_SEMIHOSTING
/* The RISC-V semihosting call: an ebreak between two marker instructions, all uncompressed and
 * in one aligned 12-byte group (QEMU reads the markers around the ebreak). */
static uint32_t __attribute__((noinline)) semihost(uint32_t op, const void *arg)
{
    register uint32_t a0 __asm("a0") = op;
    register const void *a1 __asm("a1") = arg;
    __asm volatile(".option push\n\t.option norvc\n\t.balign 16\n\t"
                   "slli x0, x0, 0x1f\n\tebreak\n\tsrai x0, x0, 7\n\t.option pop"
                   : "+r"(a0) : "r"(a1) : "memory");
    return a0;
}

static void qe_semihost_write0(const char *msg)
{
    (void)semihost(0x04u, msg);                 /* SYS_WRITE0 */
}

static void __attribute__((noreturn)) qe_semihost_exit(uint32_t code)
{
    static uint32_t block[2];
    block[0] = 0x20026u;                        /* ADP_Stopped_ApplicationExit */
    block[1] = code;
    for (;;)
        (void)semihost(0x20u, block);           /* SYS_EXIT_EXTENDED */
}
#else
static void qe_semihost_write0(const char *msg)
{
    (void)msg;
}

static void __attribute__((noreturn)) qe_semihost_exit(uint32_t code)
{
    qe_halt_code = code;
    for (;;)
        __asm volatile("" ::: "memory");
}
#endif

void qe_trap(void)
{
    qe_semihost_write0("quarl-edge firmware: processor trap (exception)\n");
    qe_semihost_exit(3u);
}

void qe_reset(void)
{
    volatile uint32_t *p;
    uint32_t *src, *dst;
    uint32_t sp;

    qe_family_early_init();
    for (src = __data_load, dst = __data_start; dst < __data_end;)
        *dst++ = *src++;
    for (dst = __bss_start; dst < __bss_end;)
        *dst++ = 0u;
    /* Paint the free stack below the current stack pointer (our own frame lives above it).
     * volatile: the compiler must not turn this into a memset() call, whose frame would sit
     * in the very words being painted. */
    __asm volatile("mv %0, sp" : "=r"(sp));
    for (p = (volatile uint32_t *)__stack_bottom; (uintptr_t)p < (sp & ~3u); p++)
        *p = QE_STACK_PAINT;
    (void)main();
    qe_semihost_write0("quarl-edge firmware: main() returned\n");
    qe_semihost_exit(4u);
}
