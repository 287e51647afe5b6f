/* The I/O of the kernel checkers (fc_kernels_check.c, conv_kernels_check.c): on the host stdin
 * and stdout, on an emulated Cortex-M or RISC-V core the files IN_FILE and OUT_FILE in QEMU's
 * working directory through semihosting (ARM: `bkpt 0xAB`; RISC-V: the marked ebreak); io_exit
 * ends the program with the checker's status. */
#ifndef QE_CHECKER_IO_H
#define QE_CHECKER_IO_H

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------------ I/O */
#if defined(__arm__) && !defined(__linux__)
void qe_semihost_exit(uint32_t code);   /* firmware/ports/cortex-m/startup.c */

static int32_t semihost(uint32_t op, void *arg)
{
    register uint32_t r0 __asm("r0") = op;
    register void *r1 __asm("r1") = arg;
    __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return (int32_t)r0;
}

#elif defined(__riscv) && !defined(__linux__)
/* RISC-V semihosting (firmware/ports/riscv/startup.c's call): an ebreak between two marker
 * instructions, uncompressed, in one aligned 12-byte group */
static int32_t __attribute__((noinline)) semihost(uint32_t op, void *arg)
{
    register uint32_t a0 __asm("a0") = op;
    register void *a1 __asm("a1") = arg;
    __asm volatile(".option push\n\t.option norvc\n\t.balign 16\n\t"
                   "slli x0, x0, 0x1f\n\tebreak\n\tsrai x0, x0, 7\n\t.option pop"
                   : "+r"(a0) : "r"(a1) : "memory");
    return (int32_t)a0;
}

static void qe_semihost_exit(uint32_t code)
{
    static uint32_t block[2];
    block[0] = 0x20026u;                        /* ADP_Stopped_ApplicationExit */
    block[1] = code;
    for (;;)
        (void)semihost(0x20u, block);           /* SYS_EXIT_EXTENDED */
}
#endif

#if (defined(__arm__) || defined(__riscv)) && !defined(__linux__)
static int32_t in_handle, out_handle;

static int32_t sh_open(const char *name, uint32_t mode)
{
    uint32_t block[3] = {(uint32_t)(uintptr_t)name, mode, (uint32_t)strlen(name)};
    return semihost(0x01u, block);   /* SYS_OPEN */
}

static int io_open(void)
{
    in_handle = sh_open(IN_FILE, 1u);    /* "rb" */
    out_handle = sh_open(OUT_FILE, 5u);     /* "wb" */
    return in_handle >= 0 && out_handle >= 0;
}

/* 1 when all n bytes were read, 0 at the end of the input */
static int io_read(void *buf, uint32_t n)
{
    uint32_t block[3] = {(uint32_t)in_handle, (uint32_t)(uintptr_t)buf, n};
    return n == 0 || semihost(0x06u, block) == 0;   /* SYS_READ: returns the bytes NOT read */
}

static void io_write(const void *buf, uint32_t n)
{
    uint32_t block[3] = {(uint32_t)out_handle, (uint32_t)(uintptr_t)buf, n};
    (void)semihost(0x05u, block);   /* SYS_WRITE */
}

static int io_exit(int status)
{
    uint32_t block[1] = {(uint32_t)out_handle};
    (void)semihost(0x02u, block);   /* SYS_CLOSE: flush the output file */
    qe_semihost_exit((uint32_t)status);
    return status;
}
#else
#include <stdio.h>

static int io_open(void)
{
    return 1;
}

static int io_read(void *buf, uint32_t n)
{
    return fread(buf, 1, n, stdin) == n;
}

static void io_write(const void *buf, uint32_t n)
{
    fwrite(buf, 1, n, stdout);
}

static int io_exit(int status)
{
    fflush(stdout);
    return status;
}
#endif

#endif /* QE_CHECKER_IO_H */
