/* libFuzzer target: the firmware's frame parser and command dispatch (firmware/core/protocol.c,
 * harness.c) with a real generated model, fed each fuzz input as the bytes arriving on the
 * link. This file is the board's port (qe_port.h) for that: reads come from the input, the
 * link goes away at its end (the harness then returns), writes are checked and dropped.
 *
 * Built and run by tests/fuzz/fuzz.py (clang -fsanitize=fuzzer,address,undefined); see
 * `make fuzz`. A random mutation almost never keeps a frame's CRC right, so inputs of even length
 * get every complete frame's CRC recomputed before they are fed (odd ones are fed as they are,
 * for the bad-CRC paths): the mutations then reach the command dispatch, not only the CRC
 * check. QE_FUZZ_COUNTS=1 in the environment prints, at exit, how many replies of each
 * kind the harness wrote: the test uses it to see that the inputs reach every command. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "harness.h"
#include "protocol.h"
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
    fprintf(stderr, "fuzz replies: HELLO %lu INFER %lu BENCH %lu MEM %lu ECHO %lu IN_CHUNK %lu "
            "OUT_CHUNK %lu RESET %lu INFER_Z %lu ERROR %lu\n",
            replies[QE_CMD_HELLO | 0x80u], replies[QE_CMD_INFER | 0x80u],
            replies[QE_CMD_BENCH | 0x80u], replies[QE_CMD_MEM | 0x80u],
            replies[QE_CMD_ECHO | 0x80u], replies[QE_CMD_IN_CHUNK | 0x80u],
            replies[QE_CMD_OUT_CHUNK | 0x80u], replies[QE_CMD_RESET | 0x80u],
            replies[QE_CMD_INFER_Z | 0x80u], replies[0xFFu]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (getenv("QE_FUZZ_COUNTS"))
        atexit(print_counts);
    return 0;
}

/* Recompute the CRC of every complete frame (sync, header, payload, CRC) in buf. BENCH's repeat
 * count is bounded by the build (-DQE_BENCH_MAX_N=4, tests/fuzz/fuzz.py), not here: a mutation
 * that keeps a BENCH frame's CRC valid without this fix-up (libFuzzer's comparison tracing finds
 * such CRCs) would otherwise run the model up to 65535 times, seconds under ASan for one input:
 * tests/fuzz/slow/ keeps two such inputs (BENCH 8448 inside an IN_CHUNK's payload). */
static void fix_crcs(uint8_t *buf, size_t n)
{
    size_t i = 0;
    while (i + QE_PROTO_HEADER_SIZE + QE_PROTO_CRC_SIZE <= n) {
        if (buf[i] == 0xA5u && buf[i + 1] == 0x5Au) {
            size_t len = (size_t)buf[i + 5] | ((size_t)buf[i + 6] << 8);
            size_t end = i + QE_PROTO_HEADER_SIZE + len;
            if (end + QE_PROTO_CRC_SIZE <= n) {
                uint16_t crc = qe_crc16(buf + i + 2, (uint32_t)(QE_PROTO_HEADER_SIZE - 2 + len));
                buf[end] = (uint8_t)(crc & 0xFFu);
                buf[end + 1] = (uint8_t)(crc >> 8);
                i = end + QE_PROTO_CRC_SIZE;
                continue;
            }
        }
        i++;
    }
}

static uint8_t input[1 << 16];

#if QE_FUZZ_PLANTED_BUG
/* tests/test_fuzz.py's proof that the fuzzer finds bugs: an ECHO of "boom" reads far out of
 * the input. Never built otherwise. */
static void planted_bug(const uint8_t *buf, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i++)
        if (memcmp(buf + i, "boom", 4) == 0)
            fprintf(stderr, "%u\n", buf[i + 100000]);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > sizeof input)
        size = sizeof input;
    memcpy(input, data, size);
    if (size % 2u == 0u)
        fix_crcs(input, size);
    in_data = input;
    in_size = size;
#if QE_FUZZ_PLANTED_BUG
    planted_bug(data, size);
#endif
    in_pos = 0;
    qe_harness_run();
    return 0;
}
