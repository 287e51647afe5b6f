/* The host port: the harness as an ordinary Linux process (the "host" board).
 *
 * Link: stdin (fd 0) and stdout (fd 1), as raw bytes through read(2)/write(2), no stdio. The
 * launcher (quarl_edge/targets/launch.py) gives the process the master side of a pseudo-terminal as
 * stdin and stdout and opens the slave side (a real tty device) with pyserial, exactly like a
 * board's serial port. Pipes work too (`harness < requests > replies`). When fd 0 is a tty it is
 * switched to raw mode here as well, so no line discipline can echo, translate or buffer bytes.
 * The harness returns, and the process exits with 0, when reading fails or hits end of file:
 * a pipe was closed, or no process holds the pty's slave side open any more (read gives EIO).
 *
 * Reset: SIGUSR1 restarts the firmware from scratch, as a reset button would: the process
 * executes its own image again (/proc/self/exe), keeping its pid, environment and the pty on
 * stdin/stdout, so the host's serial port stays open (the fault link's `reset=signal:PID`,
 * quarl_edge/link/fault.py). Bytes already in the pty stay there, like bytes in a UART's FIFO.
 *
 * Cost: nanoseconds of CLOCK_MONOTONIC between qe_port_cost_start() and _stop(), saturated
 * at 2^32-1 (4.29 s) rather than wrapped.
 *
 * Memory: flash and static RAM are 0 ("cannot tell": the host reads the ELF). The stack
 * high-water mark is measured honestly: qe_port_run() runs the harness on a dedicated, statically
 * allocated stack (POSIX ucontext: makecontext/swapcontext, which glibc implements) that is
 * painted with a byte pattern first; qe_port_stack_used() counts the bytes from the far end
 * (stacks grow down on every Linux target we use) that still hold the pattern. This measures
 * exactly the harness + model + kernels + port calls, with no guesswork about where the
 * process's main stack begins, and it is the same paint-and-scan method the MCU ports use.
 *
 * Under AddressSanitizer ucontext stack switching is only partly supported (ASan warns and may
 * report false positives), so when the build defines __SANITIZE_ADDRESS__ (gcc's
 * -fsanitize=address) or QE_HOST_USE_UCONTEXT=0, the harness runs on the normal stack and the
 * stack used/size are reported as 0 ("cannot tell"). */
#define _DEFAULT_SOURCE 1   /* cfmakeraw(); the ucontext functions on glibc */

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "qe_protocol.h"
#include "qe_port.h"
#include "harness.h"

#ifndef QE_HOST_USE_UCONTEXT
#if defined(__SANITIZE_ADDRESS__)
#define QE_HOST_USE_UCONTEXT 0
#else
#define QE_HOST_USE_UCONTEXT 1
#endif
#endif

#ifndef QE_HOST_STACK_BYTES
#define QE_HOST_STACK_BYTES (64u * 1024u)
#endif
#define QE_HOST_STACK_PAINT 0xC5u   /* unlikely as the last byte of a real frame */

#if QE_HOST_USE_UCONTEXT
#include <ucontext.h>
#endif

/* ---------------------------------------------------------------------------------- link */
static uint8_t rx_chunk[256];   /* read(2) in chunks; bytes are handed out one at a time */
static size_t rx_len, rx_pos;
static int link_gone;

static void make_raw(int fd)
{
    struct termios t;
    if (!isatty(fd) || tcgetattr(fd, &t) != 0)
        return;
    cfmakeraw(&t);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    (void)tcsetattr(fd, TCSANOW, &t);
}

static void reset_now(int sig)
{
    /* execv is async-signal-safe; SA_NODEFER (below) keeps SIGUSR1 unblocked in the new image */
    static char name[] = "qe-host-firmware";
    char *const argv[] = {name, 0};
    (void)sig;
    execv("/proc/self/exe", argv);
    _exit(120);   /* could not restart: the host sees the board stop */
}

void qe_port_init(void)
{
    struct sigaction reset;
    /* A host that goes away while we write must end the loop, not kill us with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    memset(&reset, 0, sizeof reset);
    reset.sa_handler = reset_now;
    reset.sa_flags = SA_NODEFER;
    sigemptyset(&reset.sa_mask);
    (void)sigaction(SIGUSR1, &reset, 0);
    make_raw(0);
    make_raw(1);
}

int qe_port_read_byte(void)
{
    while (rx_pos == rx_len) {
        ssize_t n;
        if (link_gone)
            return -1;
        n = read(0, rx_chunk, sizeof rx_chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {   /* EOF (pipe closed) or error (EIO: pty slave closed) */
            link_gone = 1;
            return -1;
        }
        rx_len = (size_t)n;
        rx_pos = 0;
    }
    return rx_chunk[rx_pos++];
}

void qe_port_write(const uint8_t *data, uint32_t n)
{
    while (n > 0u && !link_gone) {
        ssize_t w = write(1, data, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {   /* EPIPE, EIO: the host is gone; the next read ends the harness */
            link_gone = 1;
            return;
        }
        data += w;
        n -= (uint32_t)w;
    }
}

/* ---------------------------------------------------------------------------------- cost */
static struct timespec cost_t0;

void qe_port_cost_start(void)
{
    clock_gettime(CLOCK_MONOTONIC, &cost_t0);
}

uint32_t qe_port_cost_stop(void)
{
    struct timespec t1;
    int64_t ns;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ns = (int64_t)(t1.tv_sec - cost_t0.tv_sec) * 1000000000 + (int64_t)(t1.tv_nsec - cost_t0.tv_nsec);
    if (ns < 0)
        return 0u;
    if (ns > (int64_t)0xFFFFFFFFu)
        return 0xFFFFFFFFu;
    return (uint32_t)ns;
}

/* -------------------------------------------------------------------------------- memory */
uint32_t qe_port_flash_bytes(void) { return 0u; }
uint32_t qe_port_ram_bytes(void) { return 0u; }

#if QE_HOST_USE_UCONTEXT
static uint8_t harness_stack[QE_HOST_STACK_BYTES] __attribute__((aligned(16)));
static ucontext_t main_ctx, harness_ctx;
static void (*harness_fn)(void);
static int on_own_stack;

static void harness_entry(void)
{
    harness_fn();   /* returning resumes main_ctx (uc_link) */
}

void qe_port_run(void (*fn)(void))
{
    memset(harness_stack, QE_HOST_STACK_PAINT, sizeof harness_stack);
    harness_fn = fn;
    if (getcontext(&harness_ctx) != 0) {
        fn();   /* cannot switch stacks: run on the normal stack, report "cannot tell" */
        return;
    }
    harness_ctx.uc_stack.ss_sp = harness_stack;
    harness_ctx.uc_stack.ss_size = sizeof harness_stack;
    harness_ctx.uc_link = &main_ctx;
    makecontext(&harness_ctx, harness_entry, 0);
    on_own_stack = 1;
    if (swapcontext(&main_ctx, &harness_ctx) != 0) {
        on_own_stack = 0;
        fn();
    }
    on_own_stack = 0;
}

uint32_t qe_port_stack_used(void)
{
    uint32_t untouched = 0;
    if (!on_own_stack)
        return 0u;
    /* The stack grows down from harness_stack + size: the deepest use is the lowest byte that
     * lost its paint. (A used byte that happens to equal the paint makes this undercount by
     * at most a few bytes, the usual price of the method.) */
    while (untouched < sizeof harness_stack && harness_stack[untouched] == QE_HOST_STACK_PAINT)
        untouched++;
    return (uint32_t)(sizeof harness_stack - untouched);
}

uint32_t qe_port_stack_size(void)
{
    return on_own_stack ? (uint32_t)sizeof harness_stack : 0u;
}

#else /* !QE_HOST_USE_UCONTEXT */
void qe_port_run(void (*fn)(void))
{
    fn();
}

uint32_t qe_port_stack_used(void) { return 0u; }
uint32_t qe_port_stack_size(void) { return 0u; }
#endif
