/* simavr bridge: run an AVR firmware ELF on libsimavr with the MCU's USART0 on a pseudo-terminal.
 *
 *     simavr_bridge FIRMWARE.elf MCU FREQUENCY_HZ
 *     simavr_bridge --boot BOOTLOADER.hex MCU FREQUENCY_HZ HIGH_FUSE
 *
 * The second form is a board with its boot loader and nothing else (a new Arduino Uno: Optiboot
 * in the boot section, the application flash erased), which the host flashes through the
 * serial port with avrdude, as a real one. The high fuse places the boot section (BOOTSZ) and
 * starts the MCU there at reset (BOOTRST programmed); the boot loader writes the application
 * with SPM (simavr's self-programming model). The boot loader tells a reset by the RESET pin
 * (EXTRF: wait for avrdude) from the others (power-on, watchdog: start the application), and
 * on an Uno the host pulls RESET when it opens the port (DTR through a capacitor). A pty has no
 * DTR, so the bridge does not keep the slave side open: while no client has it open, the
 * master polls as hung up (POLLHUP); when that ends, a client has just opened the port, and
 * the bridge resets the MCU with EXTRF set, as the Uno's DTR would. Closing the port does not
 * reset (on the Uno DTR rises, which the capacitor does not pass as a reset). The MCU's clock
 * is kept from running ahead of the wall clock (at most FREQUENCY_HZ cycles a second, as the
 * real chip), so the boot loader's time-outs last what they last on the board, and the
 * application's cycles take the wall time they take on the board (the host checks that a
 * real board's cost in cycles fits the time an exchange took: link/checks.py).
 * Fault injection for tests, from the environment: QE_SIMAVR_CORRUPT_PAGE=N flips a bit of
 * the N-th flash page (SPM_PAGESIZE bytes, from 0) when the boot loader writes it (a verify
 * mismatch); QE_SIMAVR_VANISH_AFTER_PAGES=N makes the bridge exit (its pty disappears, as a
 * board pulled off USB) after the N-th page write.
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
 * opened, and with 5 when QE_SIMAVR_VANISH_AFTER_PAGES says so. */
#define _DEFAULT_SOURCE 1   /* openpty(), cfmakeraw(), nanosleep() */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <simavr/avr_uart.h>
#include <simavr/sim_avr.h>
#include <simavr/avr_flash.h>
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

static int open_link(avr_t *avr, int keep_slave)
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
    if (!keep_slave) {             /* boot mode: see whether a client has the port open */
        close(port.slave);
        port.slave = -1;
    }

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

/* ------------------------------------------------------------------ boot-loader mode */
static struct {
    int client;                    /* a client has the pty open (the master is not hung up) */
    int reset_pending;
    long corrupt_page, vanish_after, pages_written;
    int (*spm)(struct avr_io_t *io, uint32_t ctl, void *io_param);   /* simavr's SPM */
    struct timespec wall0;         /* pacing: wall time and cycle at the last sync */
    avr_cycle_count_t cycle0;
} boot = { .corrupt_page = -1, .vanish_after = -1 };

static long env_long(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long n;
    if (v == NULL || *v == '\0')
        return -1;
    n = strtol(v, &end, 10);
    return (*end == '\0' && n >= 0) ? n : -1;
}

/* SPM through simavr's flash module; a page write is counted, and corrupted on request. */
static int spm_hook(struct avr_io_t *io, uint32_t ctl, void *io_param)
{
    avr_flash_t *f = (avr_flash_t *)io;
    avr_t *avr = io->avr;
    int page_write = ctl == AVR_IOCTL_FLASH_SPM && avr_regbit_get(avr, f->selfprgen)
                     && avr_regbit_get(avr, f->pgwrt);
    uint32_t z = (uint32_t)(avr->data[R_ZL] | (avr->data[R_ZH] << 8)) & ~(uint32_t)(f->spm_pagesize - 1);
    int r = boot.spm(io, ctl, io_param);
    if (!page_write)
        return r;
    if (boot.corrupt_page >= 0 && z / f->spm_pagesize == (uint32_t)boot.corrupt_page) {
        avr->flash[z + 3] ^= 0x10;
        fprintf(stderr, "simavr bridge: corrupted flash page %ld (byte 0x%04x) on request\n",
                boot.corrupt_page, (unsigned)(z + 3));
    }
    if (++boot.pages_written == boot.vanish_after) {
        fprintf(stderr, "simavr bridge: vanishing after %ld page writes, on request\n",
                boot.pages_written);
        exit(5);
    }
    return r;
}

static void hook_spm(avr_t *avr)
{
    for (avr_io_t *io = avr->io_port; io; io = io->next)
        if (io->kind && strcmp(io->kind, "flash") == 0) {
            boot.spm = io->ioctl;
            io->ioctl = spm_hook;
        }
}

static int hex_byte(const char *s)
{
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else return -1;
    }
    return v;
}

/* Intel HEX into the flash: data, end-of-file, extended segment / linear address records (the
 * start-address records, 03 and 05, say where to run and are ignored: the fuses say that).
 * simavr's reader refuses record 03, which Optiboot's hex has. */
static int read_hex(avr_t *avr, const char *path)
{
    char line[600];
    uint8_t rec[256];
    uint32_t upper = 0;
    int lineno = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        int n, sum = 0;
        lineno++;
        if (len == 0)
            continue;
        if (line[0] != ':' || len < 11 || (len - 1) % 2 || (len - 1) / 2 > sizeof rec)
            goto bad;
        n = (int)(len - 1) / 2;
        for (int i = 0; i < n; i++) {
            int b = hex_byte(line + 1 + 2 * i);
            if (b < 0)
                goto bad;
            rec[i] = (uint8_t)b;
            sum += b;
        }
        if ((sum & 0xFF) != 0 || rec[0] + 5 != n)
            goto bad;
        uint32_t addr = upper + ((uint32_t)rec[1] << 8 | rec[2]);
        switch (rec[3]) {
        case 0:
            if (addr + rec[0] > avr->flashend + 1)
                goto bad;
            memcpy(avr->flash + addr, rec + 4, rec[0]);
            break;
        case 1:
            fclose(f);
            return 0;
        case 2: upper = ((uint32_t)rec[4] << 8 | rec[5]) << 4; break;
        case 4: upper = ((uint32_t)rec[4] << 8 | rec[5]) << 16; break;
        case 3: case 5: break;
        default: goto bad;
        }
    }
bad:
    fprintf(stderr, "simavr bridge: '%s' line %d is not Intel HEX for this flash\n", path, lineno);
    fclose(f);
    return -1;
}

/* Load the boot loader's Intel HEX into the flash (erased elsewhere), set the fuses and start
 * at the boot section, as an Uno's ATmega328P with BOOTRST programmed. */
static int load_bootloader(avr_t *avr, const char *hex, unsigned long high_fuse)
{
    uint32_t words = (avr->flashend + 1) / 2;
    uint32_t boot_words = (words >= 0x4000 ? 256u : 128u) << (3 - ((high_fuse >> 1) & 3));

    if (read_hex(avr, hex) != 0) {
        fprintf(stderr, "simavr bridge: cannot load the boot loader '%s'\n", hex);
        return -1;
    }
    avr->fuse[AVR_FUSE_LOW] = 0xFF;
    avr->fuse[AVR_FUSE_HIGH] = (uint8_t)high_fuse;
    avr->fuse[AVR_FUSE_EXT] = 0xFD;
    avr->reset_pc = (high_fuse & 1) ? 0 : 2 * (words - boot_words);   /* BOOTRST: 0 = programmed */
    avr->codeend = avr->flashend;
    avr->pc = avr->reset_pc;
    return 0;
}

/* Every 256 instructions: has a client opened or closed the port (the master's
 * hang-up state), and is the simulation ahead of the wall clock (then sleep). */
static void boot_poll(avr_t *avr)
{
    struct pollfd pfd = { .fd = port.master, .events = POLLIN };
    struct timespec now;
    int hung_up = poll(&pfd, 1, 0) >= 0 && (pfd.revents & POLLHUP);

    if (!hung_up && !boot.client)
        boot.reset_pending = 1;    /* opened: the DTR reset */
    boot.client = !hung_up;

    clock_gettime(CLOCK_MONOTONIC, &now);
    double wall = (double)(now.tv_sec - boot.wall0.tv_sec) + (now.tv_nsec - boot.wall0.tv_nsec) * 1e-9;
    double sim = (double)(avr->cycle - boot.cycle0) / avr->frequency;
    if (sim > wall + 0.0002) {   /* ahead by at most 0.2 ms: an inference's 4 ms take 4 ms */
        struct timespec d = { 0, (long)((sim - wall) * 1e9) };
        nanosleep(&d, NULL);
    } else if (wall > sim) {   /* behind (idle, or a loaded host): never catch up in a burst */
        boot.wall0 = now;
        boot.cycle0 = avr->cycle;
    }
}

static void boot_reset(avr_t *avr)
{
    boot.reset_pending = 0;
    port.rx_len = port.rx_done = 0;
    port.tx_len = 0;
    tcflush(port.master, TCIOFLUSH);
    avr_reset(avr);
    avr_regbit_set(avr, avr->reset_flags.extrf);
}


static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s FIRMWARE.elf MCU FREQUENCY_HZ\n"
                    "       %s --boot BOOTLOADER.hex MCU FREQUENCY_HZ HIGH_FUSE\n", argv0, argv0);
    return 2;
}

int main(int argc, char **argv)
{
    static elf_firmware_t fw;   /* large: not on the stack */
    avr_t *avr;
    char *end;
    unsigned long freq, high_fuse = 0;
    int state, boot_mode = argc == 6 && strcmp(argv[1], "--boot") == 0;
    unsigned long steps = 0;
    char **a = argv + boot_mode;

    if (argc != 4 && !boot_mode)
        return usage(argv[0]);
    freq = strtoul(a[3], &end, 10);
    if (*a[3] == '\0' || *end != '\0' || freq == 0 || freq > 100000000ul) {
        fprintf(stderr, "simavr bridge: bad frequency '%s'\n", a[3]);
        return 2;
    }
    if (boot_mode) {
        high_fuse = strtoul(a[4], &end, 0);
        if (*a[4] == '\0' || *end != '\0' || high_fuse > 0xFF) {
            fprintf(stderr, "simavr bridge: bad high fuse '%s'\n", a[4]);
            return 2;
        }
    } else if (elf_read_firmware(a[1], &fw) != 0) {
        fprintf(stderr, "simavr bridge: cannot load the AVR firmware ELF '%s'\n", a[1]);
        return 2;
    }
    snprintf(fw.mmcu, sizeof fw.mmcu, "%s", a[2]);
    fw.frequency = (uint32_t)freq;
    avr = avr_make_mcu_by_name(fw.mmcu);
    if (avr == NULL) {
        fprintf(stderr, "simavr bridge: simavr does not know the MCU '%s'\n", fw.mmcu);
        return 2;
    }
    avr_init(avr);
    if (boot_mode) {
        avr->log = LOG_NONE;       /* erased flash decodes as invalid opcodes: not news */
        avr->frequency = (uint32_t)freq;
        boot.corrupt_page = env_long("QE_SIMAVR_CORRUPT_PAGE");
        boot.vanish_after = env_long("QE_SIMAVR_VANISH_AFTER_PAGES");
        if (load_bootloader(avr, a[1], high_fuse) != 0)
            return 2;
        hook_spm(avr);
        clock_gettime(CLOCK_MONOTONIC, &boot.wall0);
    } else {
        avr->log = LOG_ERROR;
        avr_load_firmware(avr, &fw);
    }
    if (open_link(avr, !boot_mode) != 0)
        return 2;
    printf("qe-simavr-pty %s\n", port.slave_name);
    fflush(stdout);

    do {
        state = avr_run(avr);
        if (boot_mode && (++steps & 255) == 0) {
            boot_poll(avr);
            if (boot.reset_pending)
                boot_reset(avr);
        }
    } while (state != cpu_Done && state != cpu_Crashed);

    fprintf(stderr, "simavr bridge: the firmware %s at cycle %llu (pc 0x%05x)\n",
            state == cpu_Done ? "stopped (sleep with interrupts disabled, or main returned)"
                              : "crashed", (unsigned long long)avr->cycle, (unsigned)avr->pc);
    flush_tx();
    avr_terminate(avr);
    return state == cpu_Done ? 3 : 4;
}
