/* simavr bridge: run an AVR firmware ELF on libsimavr with the MCU's USART0 on a pseudo-terminal.
 *
 *     simavr_bridge FIRMWARE.elf MCU FREQUENCY_HZ
 *
 * A host program (not firmware): quarl_edge/targets/launch.py (class Simavr) compiles it on demand with
 * the host's gcc against libsimavr and libsimavrparts and caches the binary in the firmware's
 * build directory. It lives beside launch.py rather than in firmware/ports/avr/ because build.py
 * compiles every .c file of a port directory into the firmware.
 *
 * The `simavr` command-line tool only prints what the firmware sends; it cannot feed it bytes.
 * libsimavrparts' uart_pty part connects a UART to a new pseudo-terminal (served by its own
 * thread); the host opens the pty's slave side with pyserial like any serial port. The
 * simulation is cycle-accurate, so the firmware's Timer1 counts real CPU cycles.
 *
 * Protocol with the launcher: once the pty exists, one line `qe-simavr-pty /dev/pts/N` on
 * stdout; then the simulation runs until this process is killed. If the firmware stops (the
 * simulator reports it done or crashed) the bridge says so on stderr and exits with 3 (done)
 * or 4 (crashed); it exits with 2 when the ELF or the MCU cannot be loaded. */
#define _DEFAULT_SOURCE 1   /* readlink(), unlink() */

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <simavr/sim_avr.h>
#include <simavr/sim_elf.h>
#include <simavr/parts/uart_pty.h>

/* uart_pty_connect() also points the fixed symlink /tmp/simavr-uart0 at the pty, for people
 * running one simulator by hand. We talk through the pty path we print; a shared link that
 * another simulator may overwrite at any time is removed again if it is still ours. */
static void remove_shared_link(const char *pty_path)
{
    char target[PATH_MAX];
    ssize_t n = readlink("/tmp/simavr-uart0", target, sizeof target - 1);
    if (n > 0) {
        target[n] = '\0';
        if (strcmp(target, pty_path) == 0)
            unlink("/tmp/simavr-uart0");
    }
}

int main(int argc, char **argv)
{
    static elf_firmware_t fw;   /* large: not on the stack */
    static uart_pty_t pty;
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

    uart_pty_init(avr, &pty);
    uart_pty_connect(&pty, '0');
    remove_shared_link(pty.port[0].slavename);
    printf("qe-simavr-pty %s\n", pty.port[0].slavename);
    fflush(stdout);

    do {
        state = avr_run(avr);
    } while (state != cpu_Done && state != cpu_Crashed);

    fprintf(stderr, "simavr bridge: the firmware %s at cycle %llu (pc 0x%05x)\n",
            state == cpu_Done ? "stopped (sleep with interrupts disabled, or main returned)"
                              : "crashed", (unsigned long long)avr->cycle, (unsigned)avr->pc);
    uart_pty_stop(&pty);
    avr_terminate(avr);
    return state == cpu_Done ? 3 : 4;
}
