/* The on-device harness: see harness.h. Requests and replies are described in docs/protocol.md.
 *
 * RAM: the frame layer's receive buffer (protocol.c), a copy of the last INFER input
 * (QE_INPUT_COPY_BYTES, default QE_MAX_PAYLOAD: an INFER payload never exceeds it; a build
 * that knows the model's input size can pass it to save RAM; 0 for a model whose inputs are
 * streamed), what a retried INFER or BENCH is answered with (about 30 bytes) and a few
 * locals. Replies are streamed from the arena, so there is no reply buffer.
 *
 * Streamed tensors (docs/protocol.md, "Streamed tensors"): inputs larger than one frame come
 * in IN_CHUNK frames, each written straight into the input tensors in the arena at its
 * offset; outputs larger than one frame are read with OUT_CHUNK, straight from the output
 * tensors. So the board needs no buffer of a tensor's size besides the arena: any model whose
 * arena fits the board's RAM runs, whatever its frame size.
 *
 * Retries (docs/protocol.md, "Retries and resets"): a request with the command, sequence
 * number and CRC of the last one is the host's retry after a lost reply. INFER and BENCH, the
 * commands that run the model, and IN_CHUNK are then answered again from what they left (the
 * cost, the outputs still in the arena, BENCH's statistics, the input bytes received) without
 * running or writing again; HELLO, MEM, ECHO, OUT_CHUNK and RESET have no effect to repeat and
 * are simply answered again (a second RESET zeroes a state that is still zero: nothing ran in
 * between, as the host sends nothing else before its reply).
 *
 * State (docs/protocol.md, "State"): a recurrent model keeps its variable tensors (an LSTM's
 * hidden and cell state) in the arena from one INFER to the next; RESET zeroes them
 * (qe_model_reset_state(), a no-op for a model without state) and answers with the boot id, so
 * a host notices a restart (which lost the state) whose announcement it missed.
 *
 * Boot id: the nonce of the first HELLO answered since boot. A board has no entropy of its own
 * at boot (QEMU with -icount runs the same instructions every time), but the host's nonces are
 * random, so after a restart the boot id differs from the one the host knew. At boot the
 * harness announces itself with an unsolicited HELLO reply (sequence number
 * QE_PROTO_BOOT_SEQ, nonce QE_PROTO_BOOT_NONCE, boot id 0). */
#include <string.h>

#include "qe_protocol.h"
#include "qe_port.h"
#include "qe_model.h"
#include "protocol.h"
#include "harness.h"
#ifdef QE_ACT   /* ACT: the exported library's NAME_act on the board (act/qe_act.c) */
void qe_act_handle(const qe_frame_t *f);
void qe_act_reset(void);
#endif

#ifndef QE_INPUT_COPY_BYTES
#define QE_INPUT_COPY_BYTES QE_MAX_PAYLOAD
#endif

/* Set QE_ERROR_MESSAGES=0 to drop the error texts (they cost RAM on AVR, where string
 * literals live in .data); error frames then carry only their code and command. */
#ifndef QE_ERROR_MESSAGES
#define QE_ERROR_MESSAGES 1
#endif
#if QE_ERROR_MESSAGES
#define QE_MSG(s) (s)
#else
#define QE_MSG(s) ((const char *)0)
#endif

/* Output tensors go on the wire straight from the arena, so the arena's byte order must be the
 * protocol's (little-endian): true for x86, Cortex-M and AVR. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the harness sends arena bytes verbatim and needs a little-endian target"
#endif
#endif

#define QE_REPLY(cmd) ((uint8_t)((cmd) | QE_PROTO_REPLY_BIT))

/* The last INFER input, restored before every BENCH run: a planner may place an output or a
 * scratch tensor over an input (in-place arena), so after one invoke the arena no longer holds
 * the input. Zero until the first INFER (BENCH before INFER runs on zeros). */
static uint8_t last_input[QE_INPUT_COPY_BYTES > 0 ? QE_INPUT_COPY_BYTES : 1];

static uint32_t boot_id;   /* 0 until the first HELLO */

/* The last request (valid once one ran; cleared by HELLO: a new session) and what a retry of
 * it is answered with. */
static uint8_t last_valid, last_cmd, last_seq;
static uint16_t last_crc;
static uint32_t last_cost;                         /* INFER */
static uint32_t bench_n, bench_lo, bench_hi;       /* BENCH */
static uint64_t bench_sum;

/* Streamed inputs: bytes [0, in_received) of the inputs are in the input tensors, written by
 * IN_CHUNK in order since the last run. out_ready: the output tensors hold the last INFER's
 * outputs (nothing has written the arena since), so OUT_CHUNK may read them. */
static uint32_t in_received;
static uint8_t out_ready;

static void remember(const qe_frame_t *f)   /* after an INFER or BENCH ran */
{
    last_valid = 1;
    last_cmd = f->cmd;
    last_seq = f->seq;
    last_crc = f->crc;
}

static uint32_t tensors_bytes(const qe_tensor_spec_t *t, uint8_t n)
{
    uint32_t sum = 0;
    uint8_t i;
    for (i = 0; i < n; i++)
        sum += t[i].bytes;
    return sum;
}

/* Tensors t[0..n) as one run of bytes (their concatenation, as on the wire): bytes
 * [off, off + len) of it are written from src into the arena, or sent from the arena. */
static void write_tensors(const qe_tensor_spec_t *t, uint8_t n, uint32_t off, uint32_t len,
                          const uint8_t *src)
{
    uint8_t i;
    for (i = 0; i < n && len; i++) {
        uint32_t k;
        if (off >= t[i].bytes) {
            off -= t[i].bytes;
            continue;
        }
        k = t[i].bytes - off < len ? t[i].bytes - off : len;
        memcpy(qe_arena + t[i].arena_offset + off, src, k);
        src += k;
        len -= k;
        off = 0;
    }
}

static void tx_tensors(const qe_tensor_spec_t *t, uint8_t n, uint32_t off, uint32_t len)
{
    uint8_t i;
    for (i = 0; i < n && len; i++) {
        uint32_t k;
        if (off >= t[i].bytes) {
            off -= t[i].bytes;
            continue;
        }
        k = t[i].bytes - off < len ? t[i].bytes - off : len;
        qe_tx_bytes(qe_arena + t[i].arena_offset + off, k);
        len -= k;
        off = 0;
    }
}

static int inputs_streamed(void)
{
    return tensors_bytes(qe_model_info.inputs, qe_model_info.n_inputs) > QE_MAX_PAYLOAD;
}

static int outputs_streamed(void)
{
    return tensors_bytes(qe_model_info.outputs, qe_model_info.n_outputs) > QE_MAX_PAYLOAD;
}

static void restore_inputs(void)   /* no copy of streamed inputs: BENCH runs on the arena */
{
    const qe_model_info_t *m = &qe_model_info;
    if (!inputs_streamed())
        write_tensors(m->inputs, m->n_inputs, 0, tensors_bytes(m->inputs, m->n_inputs), last_input);
}

#if defined(QE_PER_OP)
static uint32_t perop_tail;   /* the last run's: from the last op's restart to the final read */
#endif

/* Not inlined: INFER and BENCH then measure the very same instructions between the cost
 * counter's start and stop (inlined into BENCH's loop, the compiler may schedule a loop
 * instruction in between: 6,692 vs 6,691 instructions on the Cortex-M7 board). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static uint32_t run_once(void)
{
#if defined(QE_PER_OP)   /* the ops' windows tile the run: its cost is their sum + the tail */
    uint32_t sum;
    uint16_t i;
    qe_port_cost_start();
    qe_model_invoke();
    sum = qe_port_cost_stop();
    perop_tail = sum;
    for (i = 0; i < qe_op_count; i++)
        sum += qe_op_costs[i];
    return sum;
#else
    qe_port_cost_start();
    qe_model_invoke();
    return qe_port_cost_stop();
#endif
}

static uint32_t rd_u16(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void bad_payload(const qe_frame_t *f, const char *msg)
{
    qe_tx_error(f->seq, QE_ERR_BAD_PAYLOAD, f->cmd, msg);
}

/* ------------------------------------------------------------------------------- HELLO */
static uint8_t str_len(const char *s)
{
    uint8_t n = 0;
    if (s) {
        while (s[n] != '\0' && n < 255u)
            n++;
    }
    return n;
}

static void tx_str(const char *s)
{
    uint8_t n = str_len(s);
    qe_tx_u8(n);
    qe_tx_bytes((const uint8_t *)s, n);
}

static uint8_t spec_ndims(const qe_tensor_spec_t *t)
{
    return t->ndims > QE_MAX_DIMS ? (uint8_t)QE_MAX_DIMS : t->ndims;
}

static uint32_t specs_wire_bytes(const qe_tensor_spec_t *t, uint8_t n)
{
    uint32_t sum = 0;
    uint8_t i;
    for (i = 0; i < n; i++)   /* u8 dtype, u8 ndims, ndims x u16, f32 scale, i32 zero point */
        sum += 2u + 2u * spec_ndims(&t[i]) + 8u;
    return sum;
}

static void tx_specs(const qe_tensor_spec_t *t, uint8_t n)
{
    uint8_t i, d;
    qe_tx_u8(n);
    for (i = 0; i < n; i++) {
        uint8_t nd = spec_ndims(&t[i]);
        qe_tx_u8(t[i].dtype);
        qe_tx_u8(nd);
        for (d = 0; d < nd; d++)
            qe_tx_u16(t[i].dims[d]);
        qe_tx_f32(t[i].scale);
        qe_tx_i32(t[i].zero_point);
    }
}

static void tx_hello(uint8_t seq, uint32_t nonce)
{
    const qe_model_info_t *m = &qe_model_info;
    uint32_t len;

    len = 4u + 1u + 4u                           /* nonce, version, boot id */
        + 1u + 4u + 2u                           /* cost unit, clock, max_payload */
        + 1u + str_len(QE_BOARD_ID) + 1u + str_len(m->name)
        + 8u + 4u                                /* model hash, arena bytes */
        + 1u + specs_wire_bytes(m->inputs, m->n_inputs)
        + 1u + specs_wire_bytes(m->outputs, m->n_outputs);
    qe_tx_begin(QE_REPLY(QE_CMD_HELLO), seq, (uint16_t)len);   /* < 12 kB even for 255+255 specs */
    qe_tx_u32(nonce);
    qe_tx_u8(QE_PROTO_VERSION);
    qe_tx_u32(boot_id);
    qe_tx_u8((uint8_t)(QE_COST_UNIT));
    qe_tx_u32((uint32_t)(QE_CLOCK_HZ));
    qe_tx_u16((uint16_t)(QE_MAX_PAYLOAD));
    tx_str(QE_BOARD_ID);
    tx_str(m->name);
    qe_tx_bytes(m->hash, 8u);
    qe_tx_u32(m->arena_bytes);
    tx_specs(m->inputs, m->n_inputs);
    tx_specs(m->outputs, m->n_outputs);
    qe_tx_end();
}

static void do_hello(const qe_frame_t *f)
{
    uint32_t nonce;

    if (f->len != 4u) {
        bad_payload(f, QE_MSG("HELLO takes a u32 nonce"));
        return;
    }
    nonce = rd_u32(f->payload);
    if (boot_id == 0u)
        boot_id = nonce;
    last_valid = 0;   /* a new session: nothing to replay */
    tx_hello(f->seq, nonce);
}

/* ------------------------------------------------------------------------------- INFER */
/* The reply to the last INFER: its cost and the outputs, still in the arena (nothing runs the
 * model between an INFER and its retry). */
static void tx_infer(uint8_t cmd, uint8_t seq)   /* INFER's or INFER_Z's reply; streamed
                                                   * outputs: the cost only (OUT_CHUNK reads them) */
{
    const qe_model_info_t *m = &qe_model_info;
    uint32_t out_bytes = outputs_streamed() ? 0u : tensors_bytes(m->outputs, m->n_outputs);
    qe_tx_begin(QE_REPLY(cmd), seq, (uint16_t)(4u + out_bytes));
    qe_tx_u32(last_cost);
    tx_tensors(m->outputs, m->n_outputs, 0, out_bytes);
    qe_tx_end();
}

static void do_infer(const qe_frame_t *f)
{
    const qe_model_info_t *m = &qe_model_info;
    uint32_t in_bytes = tensors_bytes(m->inputs, m->n_inputs);

    if (inputs_streamed()) {   /* the inputs came in IN_CHUNK frames; INFER carries none */
        if (f->len != 0u) {
            bad_payload(f, QE_MSG("streamed inputs: INFER takes no payload"));
            return;
        }
        if (in_received != in_bytes) {
            qe_tx_error(f->seq, QE_ERR_NOT_READY, f->cmd, QE_MSG("input chunks missing"));
            return;
        }
    } else {
        if (f->len != in_bytes) {
            bad_payload(f, QE_MSG("INFER payload size differs from the inputs' bytes"));
            return;
        }
        if (in_bytes > sizeof last_input) {
            bad_payload(f, QE_MSG("inputs exceed QE_INPUT_COPY_BYTES"));
            return;
        }
        memcpy(last_input, f->payload, in_bytes);
        restore_inputs();
    }
    last_cost = run_once();
    in_received = 0;   /* the run may have reused the input tensors' arena bytes */
    out_ready = 1;
    remember(f);
    tx_infer(f->cmd, f->seq);
}

/* ----------------------------------------------------------------------------- INFER_Z */
/* INFER with the inputs zero-run coded (docs/protocol.md, "Zero-run coded inputs"): a nonzero
 * byte stands for itself, 0x00 k (k = 1..255) for k zero bytes. The code is checked whole
 * before a byte is written (zrun_size), so a malformed one changes nothing: BENCH still runs
 * on the last good input. */
static uint32_t zrun_size(const uint8_t *code, uint32_t n, uint32_t limit)
{   /* the bytes `code` stands for, or limit + 1 if malformed or more than `limit` */
    uint32_t i = 0, size = 0;
    while (i < n && size <= limit) {
        if (code[i] != 0u) {
            size++;
            i++;
        } else if (i + 1u >= n || code[i + 1u] == 0u) {
            return limit + 1u;   /* a run token cut off, or a run of length 0 */
        } else {
            size += code[i + 1u];
            i += 2u;
        }
    }
    return size <= limit ? size : limit + 1u;
}

/* Bytes [0, size) of the decoded inputs, written to dst (not streamed: the copy of the last
 * input) or straight into the input tensors (streamed), 32 bytes at a time. */
static void zrun_write(const uint8_t *code, uint32_t n, uint8_t *dst)
{
    const qe_model_info_t *m = &qe_model_info;
    uint8_t buf[32];
    uint32_t i = 0, off = 0, k = 0, run;
    while (i < n) {
        if (code[i] != 0u) {
            buf[k++] = code[i++];
            run = 0u;
        } else {
            run = code[i + 1u];
            i += 2u;
        }
        for (;;) {
            uint32_t take = run < sizeof buf - k ? run : (uint32_t)sizeof buf - k;
            memset(buf + k, 0, take);
            k += take;
            run -= take;
            if (k == sizeof buf || (i == n && run == 0u)) {
                if (dst)
                    memcpy(dst + off, buf, k);
                else
                    write_tensors(m->inputs, m->n_inputs, off, k, buf);
                off += k;
                k = 0;
            }
            if (run == 0u)
                break;
        }
    }
}

static void do_infer_z(const qe_frame_t *f)
{
    const qe_model_info_t *m = &qe_model_info;
    uint32_t in_bytes = tensors_bytes(m->inputs, m->n_inputs);

    if (zrun_size(f->payload, f->len, in_bytes) != in_bytes) {
        bad_payload(f, QE_MSG("INFER_Z code is malformed or not the inputs' size"));
        return;
    }
    if (inputs_streamed()) {   /* no copy of the inputs: straight into the tensors */
        zrun_write(f->payload, f->len, (uint8_t *)0);
    } else {
        if (in_bytes > sizeof last_input) {
            bad_payload(f, QE_MSG("inputs exceed QE_INPUT_COPY_BYTES"));
            return;
        }
        zrun_write(f->payload, f->len, last_input);
        restore_inputs();
    }
    last_cost = run_once();
    in_received = 0;
    out_ready = 1;
    remember(f);
    tx_infer(f->cmd, f->seq);
}

/* ----------------------------------------------------------------- IN_CHUNK, OUT_CHUNK */
static void tx_in_chunk(uint8_t seq)   /* the reply: how many input bytes are in, in order */
{
    qe_tx_begin(QE_REPLY(QE_CMD_IN_CHUNK), seq, 4u);
    qe_tx_u32(in_received);
    qe_tx_end();
}

static void do_in_chunk(const qe_frame_t *f)
{
    const qe_model_info_t *m = &qe_model_info;
    uint32_t off = rd_u32(f->payload);   /* the length check made sure of the offset's 4 bytes */
    uint32_t n = (uint32_t)f->len - 4u;

    if (off > tensors_bytes(m->inputs, m->n_inputs) ||
        n > tensors_bytes(m->inputs, m->n_inputs) - off) {
        bad_payload(f, QE_MSG("chunk ends beyond the inputs"));
        return;
    }
    if (off <= in_received) {   /* else a gap: not written; the reply says where to resume */
        write_tensors(m->inputs, m->n_inputs, off, n, f->payload + 4);
        in_received = off + n;
        out_ready = 0;          /* the arena changed: the outputs may be overwritten */
    }
    remember(f);
    tx_in_chunk(f->seq);
}

static void do_out_chunk(const qe_frame_t *f)
{
    const qe_model_info_t *m = &qe_model_info;
    uint32_t off = rd_u32(f->payload), n = rd_u16(f->payload + 4);

    if (!out_ready) {
        qe_tx_error(f->seq, QE_ERR_NOT_READY, f->cmd, QE_MSG("no outputs since the last run"));
        return;
    }
    if (off > tensors_bytes(m->outputs, m->n_outputs) ||
        n > tensors_bytes(m->outputs, m->n_outputs) - off) {
        bad_payload(f, QE_MSG("chunk ends beyond the outputs"));
        return;
    }
    qe_tx_begin(QE_REPLY(QE_CMD_OUT_CHUNK), f->seq, (uint16_t)(4u + n));
    qe_tx_u32(off);
    tx_tensors(m->outputs, m->n_outputs, off, n);
    qe_tx_end();
}

/* ------------------------------------------------------------------------------- RESET */
static void do_reset(const qe_frame_t *f)
{
    if (f->len != 0u) {
        bad_payload(f, QE_MSG("RESET takes no payload"));
        return;
    }
    qe_model_reset_state();
#ifdef QE_ACT
    qe_act_reset();
#endif
    qe_tx_begin(QE_REPLY(QE_CMD_RESET), f->seq, 4u);
    qe_tx_u32(boot_id);
    qe_tx_end();
}

/* ------------------------------------------------------------------------------- BENCH */
/* The largest n a BENCH may ask for: all of u16 on a board. The fuzz target
 * (tests/fuzz/fuzz_harness.c) builds with a small one: an input whose mutated BENCH keeps a valid
 * CRC would otherwise run the model up to 65535 times under ASan (seconds for one input). */
#ifndef QE_BENCH_MAX_N
#define QE_BENCH_MAX_N 65535u
#endif

static void tx_bench(uint8_t seq)
{
    qe_tx_begin(QE_REPLY(QE_CMD_BENCH), seq, 4u + 4u + 4u + 8u);
    qe_tx_u32(bench_n);
    qe_tx_u32(bench_lo);
    qe_tx_u32(bench_hi);
    qe_tx_u64(bench_sum);
    qe_tx_end();
}

static void do_bench(const qe_frame_t *f)
{
    uint32_t n, i, c, lo = 0xFFFFFFFFu, hi = 0;
    uint64_t sum = 0;

    if (f->len != 2u || rd_u16(f->payload) == 0u) {
        bad_payload(f, QE_MSG("BENCH takes a u16 n >= 1"));
        return;
    }
#if QE_BENCH_MAX_N < 65535u
    if (rd_u16(f->payload) > QE_BENCH_MAX_N) {
        bad_payload(f, QE_MSG("BENCH n is over this build's QE_BENCH_MAX_N"));
        return;
    }
#endif
    n = rd_u16(f->payload);
    for (i = 0; i < n; i++) {
        restore_inputs();   /* outside the measurement */
        c = run_once();
        if (c < lo)
            lo = c;
        if (c > hi)
            hi = c;
        sum += c;
    }
    bench_n = n;
    bench_lo = lo;
    bench_hi = hi;
    bench_sum = sum;
    out_ready = 0;   /* streamed inputs are not restored: the outputs may differ from INFER's */
    remember(f);
    tx_bench(f->seq);
}

/* ------------------------------------------------------------------------------- PEROP */
/* Per-op cost (docs/protocol.md, "Per-op cost"), in a build with -DQE_PER_OP only. PEROP with
 * first = 0 runs the model `runs` times on the last input (as BENCH) and keeps each op's
 * smallest cost, the tail's (the schedule's return), and the timer's own overhead: the smallest
 * cost of an empty start/stop pair, measured as often. Every PEROP replies with the slots
 * [first, first + count). */
#if defined(QE_PER_OP)
#define QE_PEROP_PAGE 32u
static uint32_t perop_overhead, perop_tail_min;

#if defined(__GNUC__)
__attribute__((noinline))
#endif
static uint32_t empty_pair(void)   /* what the counter reads with nothing between */
{
    qe_port_cost_start();
    return qe_port_cost_stop();
}

static void tx_perop(uint8_t seq, uint16_t first)
{
    uint16_t n = qe_op_count, k = (uint16_t)(n - first), i;
    if (k > QE_PEROP_PAGE)
        k = QE_PEROP_PAGE;
    qe_tx_begin(QE_REPLY(QE_CMD_PEROP), seq, (uint16_t)(14u + 4u * k));
    qe_tx_u16(n);
    qe_tx_u16(first);
    qe_tx_u16(k);
    qe_tx_u32(perop_overhead);
    qe_tx_u32(perop_tail_min);
    for (i = 0; i < k; i++)
        qe_tx_u32(qe_op_min[first + i]);
    qe_tx_end();
}

static void do_perop(const qe_frame_t *f)
{
    uint16_t first = (uint16_t)rd_u16(f->payload), runs = (uint16_t)rd_u16(f->payload + 2), r, i;
    uint32_t c;

    if (first > qe_op_count || (first == 0u && runs == 0u)) {
        bad_payload(f, QE_MSG("PEROP: first beyond the ops, or runs 0"));
        return;
    }
    if (first == 0u) {
        perop_overhead = perop_tail_min = 0xFFFFFFFFu;
        for (i = 0; i < qe_op_count; i++)
            qe_op_min[i] = 0xFFFFFFFFu;
        for (r = 0; r < runs; r++) {
            restore_inputs();
            (void)run_once();
            if (perop_tail < perop_tail_min)
                perop_tail_min = perop_tail;
            for (i = 0; i < qe_op_count; i++)
                if (qe_op_costs[i] < qe_op_min[i])
                    qe_op_min[i] = qe_op_costs[i];
            c = empty_pair();
            if (c < perop_overhead)
                perop_overhead = c;
        }
        out_ready = 0;
    }
    remember(f);
    tx_perop(f->seq, first);
}
#endif

/* --------------------------------------------------------------------------------- MEM */
static void do_mem(const qe_frame_t *f)
{
    if (f->len != 0u) {
        bad_payload(f, QE_MSG("MEM takes no payload"));
        return;
    }
    qe_tx_begin(QE_REPLY(QE_CMD_MEM), f->seq, 5u * 4u);
    qe_tx_u32(qe_port_flash_bytes());
    qe_tx_u32(qe_port_ram_bytes());
    qe_tx_u32(qe_port_stack_used());
    qe_tx_u32(qe_port_stack_size());
    qe_tx_u32(qe_model_info.arena_bytes);
    qe_tx_end();
}

/* -------------------------------------------------------------------------------- ECHO */
static void do_echo(const qe_frame_t *f)
{
    qe_tx_begin(QE_REPLY(QE_CMD_ECHO), f->seq, f->len);
    qe_tx_bytes(f->payload, f->len);
    qe_tx_end();
}

/* ---------------------------------------------------------------------------- dispatch */
static const char *rx_error_text(uint8_t code)
{
    switch (code) {
    case QE_ERR_BAD_CRC: return QE_MSG("CRC mismatch");
    case QE_ERR_TOO_LONG: return QE_MSG("length exceeds max_payload");
    case QE_ERR_BAD_VERSION: return QE_MSG("protocol version mismatch");
    default: return QE_MSG("malformed frame");
    }
}

/* A retry of the last request that ran the model: answered again, not run again. */
static int replayed(const qe_frame_t *f)
{
    if (!last_valid || f->cmd != last_cmd || f->seq != last_seq || f->crc != last_crc)
        return 0;
    if (f->cmd == QE_CMD_INFER || f->cmd == QE_CMD_INFER_Z)
        tx_infer(f->cmd, f->seq);
    else if (f->cmd == QE_CMD_BENCH)
        tx_bench(f->seq);
    else if (f->cmd == QE_CMD_IN_CHUNK)
        tx_in_chunk(f->seq);
#if defined(QE_PER_OP)
    else if (f->cmd == QE_CMD_PEROP)
        tx_perop(f->seq, (uint16_t)rd_u16(f->payload));
#endif
    else
        return 0;
    return 1;
}

static void handle(qe_rx_status_t st, const qe_frame_t *f)
{
    if (st == QE_RX_ERROR) {
        /* The failed command is the header's cmd byte: the host can tell which request it was
         * (for BAD_CRC it may itself be corrupted). */
        qe_tx_error(f->seq, f->error, f->cmd, rx_error_text(f->error));
        return;
    }
    if (replayed(f))
        return;
    switch (f->cmd) {
    case QE_CMD_HELLO: do_hello(f); break;
    case QE_CMD_INFER: do_infer(f); break;
    case QE_CMD_INFER_Z: do_infer_z(f); break;
    case QE_CMD_BENCH: do_bench(f); break;
    case QE_CMD_MEM: do_mem(f); break;
    case QE_CMD_ECHO: do_echo(f); break;
    case QE_CMD_IN_CHUNK: do_in_chunk(f); break;
    case QE_CMD_OUT_CHUNK: do_out_chunk(f); break;
    case QE_CMD_RESET: do_reset(f); break;
#if defined(QE_PER_OP)
    case QE_CMD_PEROP: do_perop(f); break;
#endif
#ifdef QE_ACT
    case QE_CMD_ACT: qe_act_handle(f); break;
#endif
    default:
        /* A frame with the reply bit set (a reply or error frame: our own output looped back by
         * a tty still echoing, or another board) is not a request: answering it could start an
         * endless error ping-pong, so it is dropped silently. */
        if (f->cmd & QE_PROTO_REPLY_BIT)
            break;
        qe_tx_error(f->seq, QE_ERR_UNKNOWN_CMD, f->cmd, QE_MSG("unknown command"));
        break;
    }
}

/* The payload size of each request, checked at its header (protocol.h). */
static int length_ok(uint8_t cmd, uint16_t len)
{
    const qe_model_info_t *m = &qe_model_info;
    switch (cmd) {
    case QE_CMD_HELLO: return len == 4u;
    case QE_CMD_INFER: return len == (inputs_streamed() ? 0u : tensors_bytes(m->inputs, m->n_inputs));
    case QE_CMD_IN_CHUNK: return len >= 4u;
    case QE_CMD_INFER_Z: return len >= 1u;
    case QE_CMD_OUT_CHUNK: return len == 6u;
    case QE_CMD_BENCH: return len == 2u;
    case QE_CMD_MEM: return len == 0u;
    case QE_CMD_RESET: return len == 0u;
#if defined(QE_PER_OP)
    case QE_CMD_PEROP: return len == 4u;
#endif
    default: return 1;   /* ECHO takes any size; others are answered once complete */
    }
}

void qe_harness_run(void)
{
    qe_frame_t f;
    int c;

    qe_rx_reset();
    qe_rx_set_length_check(length_ok);
    tx_hello(QE_PROTO_BOOT_SEQ, QE_PROTO_BOOT_NONCE);   /* the boot announcement */
    for (;;) {
        qe_rx_status_t st;
        c = qe_port_read_byte();
        if (c < 0)
            return;
        st = qe_rx_push((uint8_t)c, &f);
        while (st != QE_RX_NONE) {
            handle(st, &f);
            st = qe_rx_poll(&f);
        }
    }
}
