/* simavr bridge: run an AVR firmware ELF on libsimavr with the MCU's USART0 on a pseudo-terminal.
 *
 *     simavr_bridge FIRMWARE.elf MCU FREQUENCY_HZ
 *
 * A host program (not firmware): quarl_edge/targets/simavr.py (class Simavr) compiles it on demand with
 * the host's gcc against libsimavr and caches the binary in the firmware's build directory. It
 * lives beside simavr.py rather than in firmware/ports/avr/ because build.py compiles every .c
 * file of a port directory into the firmware.
 *
 * The `simavr` command-line tool only prints what the firmware sends; it cannot feed it bytes.
 * This bridge opens a pseudo-terminal and moves bytes between its master side and USART0; the
 * host opens the pty's slave side with pyserial like any serial port. The simulation is
 * cycle-accurate, so the firmware's Timer1 counts real CPU cycles.
 *
 * One thread does everything, inside the simulation's own callbacks. (libsimavrparts' uart_pty,
 * which this bridge used before, feeds the UART from a second thread through FIFOs without
 * memory barriers; on a loaded machine its board now and then stopped taking bytes for good:
 * "no HELLO answer within 40 s" and write time-outs, about 1 validate in 20 with the CPUs
 * oversubscribed.) The UART model raises XON whenever the firmware polls its status or reads
 * UDR with the receive FIFO empty, which is exactly when it waits for input: the XON callback
 * reads what the pty has (non-blocking) and hands it to the UART until the model says XOFF
 * (its FIFO full); the rest waits for the next XON. Each byte the firmware sends is written to
 * the pty at once; if the host is not reading and the pty is full, bytes queue here (64 KiB,
 * then the oldest are dropped, as a real line would lose them). The bridge keeps the slave side
 * open too, so the master never reads end-of-file while the host has the port closed.
 *
 * Protocol with the launcher: once the pty exists, one line `qe-simavr-pty /dev/pts/N` on
 * stdout; then the simulation runs until this process is killed. If the firmware stops (the
 * simulator reports it done or crashed) the bridge says so on stderr and exits with 3 (done)
 * or 4 (crashed); it exits with 2 when the ELF or the MCU cannot be loaded or the pty cannot be
 * opened. */
#define _DEFAULT_SOURCE 1   /* openpty(), cfmakeraw() */

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <simavr/avr_uart.h>
#include <simavr/sim_avr.h>
#include <simavr/sim_elf.h>
#include <simavr/sim_io.h>
#include <simavr/sim_irq.h>

#define TX_QUEUE 65536u            /* firmware -> host bytes waiting for room in the pty */

static struct {
    int master, slave;
    char slave_name[64];
    avr_irq_t *to_uart;            /* UART_IRQ_INPUT: a byte for the firmware */
    int xon;                       /* the UART's receive FIFO has room */
    uint8_t rx[256];               /* read from the pty, not yet taken by the UART */
    size_t rx_len, rx_done;
    uint8_t tx[TX_QUEUE];          /* ring: firmware -> pty */
    size_t tx_head, tx_len;
} port;

static void flush_tx(void)
{
    while (port.tx_len > 0) {
        size_t run = TX_QUEUE - port.tx_head;
        if (run > port.tx_len)
            run = port.tx_len;
        ssize_t n = write(port.master, port.tx + port.tx_head, run);
        if (n <= 0)
            return;                /* EAGAIN (the host is not reading) or an error: later */
        port.tx_head = (port.tx_head + (size_t)n) % TX_QUEUE;
        port.tx_len -= (size_t)n;
    }
}

/* The firmware sent a byte. */
static void on_uart_output(struct avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)param;
    if (port.tx_len == TX_QUEUE) {  /* full: drop the oldest */
        port.tx_head = (port.tx_head + 1) % TX_QUEUE;
        port.tx_len--;
    }
    port.tx[(port.tx_head + port.tx_len) % TX_QUEUE] = (uint8_t)value;
    port.tx_len++;
    flush_tx();
}

/* The UART can take input (the firmware waits for it): give it what the pty has. */
static void on_uart_xon(struct avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)value;
    (void)param;
    port.xon = 1;
    flush_tx();
    while (port.xon) {
        if (port.rx_done == port.rx_len) {
            ssize_t n = read(port.master, port.rx, sizeof port.rx);
            if (n <= 0)
                return;            /* nothing waiting (EAGAIN) */
            port.rx_len = (size_t)n;
            port.rx_done = 0;
        }
        /* may raise XOFF (the FIFO just filled), which ends this loop */
        avr_raise_irq(port.to_uart, port.rx[port.rx_done++]);
    }
}

static void on_uart_xoff(struct avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)param;
    if (value)
        port.xon = 0;
}

static int open_link(avr_t *avr)
{
    struct termios tio;
    uint32_t flags = 0;

    if (openpty(&port.master, &port.slave, port.slave_name, NULL, NULL) != 0) {
        fprintf(stderr, "simavr bridge: cannot open a pseudo-terminal: %s\n", strerror(errno));
        return -1;
    }
    if (tcgetattr(port.master, &tio) == 0) {
        cfmakeraw(&tio);
        tcsetattr(port.master, TCSANOW, &tio);
    }
    fcntl(port.master, F_SETFL, fcntl(port.master, F_GETFL) | O_NONBLOCK);

    /* binary frames: no line echo of the UART's output on the simulator's console */
    avr_ioctl(avr, AVR_IOCTL_UART_GET_FLAGS('0'), &flags);
    flags &= ~(uint32_t)AVR_UART_FLAG_STDIO;
    avr_ioctl(avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);

    port.to_uart = avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_INPUT);
    avr_irq_t *out = avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUTPUT);
    avr_irq_t *xon = avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUT_XON);
    avr_irq_t *xoff = avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUT_XOFF);
    if (!port.to_uart || !out || !xon || !xoff) {
        fprintf(stderr, "simavr bridge: the MCU has no USART0\n");
        return -1;
    }
    avr_irq_register_notify(out, on_uart_output, NULL);
    avr_irq_register_notify(xon, on_uart_xon, NULL);
    avr_irq_register_notify(xoff, on_uart_xoff, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    static elf_firmware_t fw;   /* large: not on the stack */
    avr_t *avr;
    char *end;
    unsigned long freq;
    int state;

    if (argc != 4) {
        fprintf(stderr, "usage: %s FIRMWARE.elf MCU FREQUENCY_HZ\n", argv[0]);
        return 2;
    }
    freq = strtoul(argv[3], &end, 10);
    if (*argv[3] == '\0' || *end != '\0' || freq == 0 || freq > 100000000ul) {
        fprintf(stderr, "simavr bridge: bad frequency '%s'\n", argv[3]);
        return 2;
    }
    if (elf_read_firmware(argv[1], &fw) != 0) {
        fprintf(stderr, "simavr bridge: cannot load the AVR firmware ELF '%s'\n", argv[1]);
        return 2;
    }
    snprintf(fw.mmcu, sizeof fw.mmcu, "%s", argv[2]);
    fw.frequency = (uint32_t)freq;
    avr = avr_make_mcu_by_name(fw.mmcu);
    if (avr == NULL) {
        fprintf(stderr, "simavr bridge: simavr does not know the MCU '%s'\n", fw.mmcu);
        return 2;
    }
    avr_init(avr);
    avr->log = LOG_ERROR;
    avr_load_firmware(avr, &fw);
    if (open_link(avr) != 0)
        return 2;
    printf("qe-simavr-pty %s\n", port.slave_name);
    fflush(stdout);

    do {
        state = avr_run(avr);
    } while (state != cpu_Done && state != cpu_Crashed);

    fprintf(stderr, "simavr bridge: the firmware %s at cycle %llu (pc 0x%05x)\n",
            state == cpu_Done ? "stopped (sleep with interrupts disabled, or main returned)"
                              : "crashed", (unsigned long long)avr->cycle, (unsigned)avr->pc);
    flush_tx();
    avr_terminate(avr);
    return state == cpu_Done ? 3 : 4;
}
