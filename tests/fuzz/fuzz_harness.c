/* libFuzzer target: the firmware's frame parser and command dispatch (firmware/core/protocol.c,
 * harness.c) with a real generated model, fed each fuzz input as the bytes arriving on the
 * link. This file is the board's port (qe_port.h) for that: reads come from the input, the
 * link goes away at its end (the harness then returns), writes are checked and dropped.
 *
 * Built and run by tests/fuzz/fuzz.py (clang -fsanitize=fuzzer,address,undefined); see
 * `make fuzz`. QE_FUZZ_COUNTS=1 in the environment prints, at exit, how many replies of each
 * kind the harness wrote: the test uses it to see that the inputs reach every command. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "qe_port.h"
#include "qe_protocol.h"

static const uint8_t *in_data;
static size_t in_size, in_pos;
static unsigned long replies[256];
static uint8_t last[8];     /* the last 8 bytes written, to find each reply's command byte */
static unsigned n_written;

void qe_port_init(void) {}
void qe_port_run(void (*fn)(void)) { fn(); }

int qe_port_read_byte(void)
{
    return in_pos < in_size ? in_data[in_pos++] : -1;
}

void qe_port_write(const uint8_t *data, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {   /* a reply header: A5 5A version command ... */
        last[n_written++ % 8u] = data[i];
        if (n_written >= 4u && last[(n_written - 4u) % 8u] == 0xA5u &&
            last[(n_written - 3u) % 8u] == 0x5Au && last[(n_written - 2u) % 8u] == QE_PROTO_VERSION)
            replies[data[i]]++;
    }
}

static uint32_t cost;
void qe_port_cost_start(void) { cost = 0u; }
uint32_t qe_port_cost_stop(void) { return ++cost; }
uint32_t qe_port_flash_bytes(void) { return 0u; }
uint32_t qe_port_ram_bytes(void) { return 0u; }
uint32_t qe_port_stack_used(void) { return 0u; }
uint32_t qe_port_stack_size(void) { return 0u; }

static void print_counts(void)
{
    fprintf(stderr, "fuzz replies: HELLO %lu INFER %lu BENCH %lu MEM %lu ECHO %lu ERROR %lu\n",
            replies[QE_CMD_HELLO | 0x80u], replies[QE_CMD_INFER | 0x80u],
            replies[QE_CMD_BENCH | 0x80u], replies[QE_CMD_MEM | 0x80u],
            replies[QE_CMD_ECHO | 0x80u], replies[0xFFu]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (getenv("QE_FUZZ_COUNTS"))
        atexit(print_counts);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    in_data = data;
    in_size = size;
    in_pos = 0;
    qe_harness_run();
    return 0;
}
