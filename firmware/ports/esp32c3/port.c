/* ESP32-C3 family (RV32IMC, 160 MHz rated): the chip's own USB-serial-JTAG controller as the
 * serial port (USB 303a:1001, a CDC-ACM port on the host: no adapter, no baud rate), the boot
 * ROM's watchdogs switched off, and the core's cycle counter. Everything else is the shared
 * RISC-V port (firmware/ports/riscv/). Compile-only so far: not yet run on a board.
 *
 * Boot: the ROM loads the image into SRAM (esp32c3.ld) with its watchdogs running (the RTC
 * watchdog and timer group 0's, armed for a boot from flash, and the super watchdog), which an
 * ESP-IDF second-stage boot loader would switch off; with no second stage, qe_family_early_init()
 * does. The clock is left as the ROM leaves it (no PLL set-up here): cycles are counted on the
 * core, whatever its clock.
 *
 * Serial: the controller's endpoint-1 FIFO. A byte written goes out when the 64-byte packet is
 * flushed (WR_DONE); qe_uart_tx() flushes every byte (the harness writes whole frames, and a
 * packet per byte costs only USB bandwidth). The controller's interrupt is not routed to the
 * core (the interrupt matrix is not set up): the port polls for received bytes.
 *
 * Cost: the core's performance counter (machine CSRs mpcer 0x7E0, mpcmr 0x7E1, mpccr 0x7E2;
 * the ESP32-C3 has no mcycle), counting core clock cycles; 32 bits wide (26.8 s at 160 MHz). */
#include <stdint.h>

#include "riscv.h"

#if !defined(QE_RISCV_FAMILY_COST)
#error "the ESP32-C3 has no mcycle: its board file sets -DQE_RISCV_FAMILY_COST"
#endif

#define USB_SERIAL_JTAG_BASE 0x60043000u
#define USJ_EP1 QE_REG(USB_SERIAL_JTAG_BASE + 0x00u)
#define USJ_EP1_CONF QE_REG(USB_SERIAL_JTAG_BASE + 0x04u)
#define EP1_WR_DONE (1u << 0)
#define EP1_IN_DATA_FREE (1u << 1)     /* the IN FIFO (to the host) can take a byte */
#define EP1_OUT_DATA_AVAIL (1u << 2)   /* the OUT FIFO (from the host) holds a byte */

#define RTC_CNTL_BASE 0x60008000u
#define RTC_WDTCONFIG0 QE_REG(RTC_CNTL_BASE + 0x90u)
#define RTC_WDTWPROTECT QE_REG(RTC_CNTL_BASE + 0xA8u)
#define RTC_SWD_CONF QE_REG(RTC_CNTL_BASE + 0xACu)
#define RTC_SWD_WPROTECT QE_REG(RTC_CNTL_BASE + 0xB0u)
#define RTC_WDT_KEY 0x50D83AA1u
#define SWD_KEY 0x8F1D312Au
#define SWD_AUTO_FEED_EN (1u << 31)
#define TIMG_WDTCONFIG0(base) QE_REG((base) + 0x48u)
#define TIMG_WDTWPROTECT(base) QE_REG((base) + 0x64u)
#define TIMG0_BASE 0x6001F000u
#define TIMG1_BASE 0x60020000u

const int qe_uart_wakes = 0;

void qe_family_early_init(void)
{
    RTC_WDTWPROTECT = RTC_WDT_KEY;     /* RTC watchdog: off */
    RTC_WDTCONFIG0 = 0u;
    RTC_WDTWPROTECT = 0u;
    RTC_SWD_WPROTECT = SWD_KEY;        /* super watchdog: fed by the hardware itself */
    RTC_SWD_CONF |= SWD_AUTO_FEED_EN;
    RTC_SWD_WPROTECT = 0u;
    TIMG_WDTWPROTECT(TIMG0_BASE) = RTC_WDT_KEY;   /* timer groups' watchdogs: off */
    TIMG_WDTCONFIG0(TIMG0_BASE) = 0u;
    TIMG_WDTWPROTECT(TIMG0_BASE) = 0u;
    TIMG_WDTWPROTECT(TIMG1_BASE) = RTC_WDT_KEY;
    TIMG_WDTCONFIG0(TIMG1_BASE) = 0u;
    TIMG_WDTWPROTECT(TIMG1_BASE) = 0u;
}

void qe_uart_init(void)
{
}

void qe_uart_irq_clear(void)
{
}

int qe_uart_rx_ready(void)
{
    return (USJ_EP1_CONF & EP1_OUT_DATA_AVAIL) != 0u;
}

uint8_t qe_uart_rx(void)
{
    return (uint8_t)USJ_EP1;
}

void qe_uart_tx(uint8_t byte)
{
    while (!(USJ_EP1_CONF & EP1_IN_DATA_FREE)) {
    }
    USJ_EP1 = byte;
    USJ_EP1_CONF = EP1_WR_DONE;
}

/* -------------------------------------------------------------------- cost: core cycles */
#define MPCER_CYCLES 1u
#define MPCMR_COUNT 1u

void qe_family_cost_init(void)
{
    __asm volatile(QE_ZICSR "csrw 0x7E0, %0\n\tcsrw 0x7E1, %1" QE_ZICSR_END
                   ::"r"(MPCER_CYCLES), "r"(MPCMR_COUNT));
}

void qe_family_cost_start(void)
{
    __asm volatile(QE_ZICSR "csrw 0x7E2, zero" QE_ZICSR_END);
}

uint32_t qe_family_cost_stop(void)
{
    uint32_t cycles;
    __asm volatile(QE_ZICSR "csrr %0, 0x7E2" QE_ZICSR_END : "=r"(cycles));
    return cycles;
}
