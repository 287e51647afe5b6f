/* The frame layer of the harness protocol: see protocol.h and docs/protocol.md. */
#include <string.h>

#include "qe_protocol.h"
#include "qe_port.h"
#include "protocol.h"

#define QE_FRAME_MAX (QE_PROTO_HEADER_SIZE + QE_MAX_PAYLOAD + QE_PROTO_CRC_SIZE)

#ifndef QE_TX_CHUNK
#define QE_TX_CHUNK 32u
#endif

/* C99 has no static_assert: a negative array size stops the build instead. */
typedef char qe_frame_fits_u16_check[(QE_FRAME_MAX <= 0xFFFFu) ? 1 : -1];
typedef char qe_tx_chunk_check[(QE_TX_CHUNK >= 1u && QE_TX_CHUNK <= 255u) ? 1 : -1];
typedef char qe_f32_size_check[(sizeof(float) == 4u) ? 1 : -1];

/* ---------------------------------------------------------------------------------- CRC */
uint16_t qe_crc16_update(uint16_t crc, uint8_t byte)
{
    uint8_t i;
    crc ^= (uint16_t)((uint16_t)byte << 8);
    for (i = 0; i < 8u; i++) {
        if (crc & 0x8000u)
            crc = (uint16_t)((crc << 1) ^ 0x1021u);
        else
            crc = (uint16_t)(crc << 1);
    }
    return crc;
}

uint16_t qe_crc16(const uint8_t *data, uint32_t n)
{
    uint16_t crc = QE_CRC16_INIT;
    uint32_t i;
    for (i = 0; i < n; i++)
        crc = qe_crc16_update(crc, data[i]);
    return crc;
}

/* ------------------------------------------------------------------------------ receive
 * rx_buf[0 .. rx_fill) holds the candidate frame being assembled, starting at its sync bytes.
 * rx_buf[rx_rd .. rx_wr) holds bytes still to be examined: normally just the byte offered by
 * qe_rx_push(), but after a candidate fails, its bytes after the sync plus whatever was still
 * pending (a "rescan"). Invariant: rx_fill <= rx_rd <= rx_wr <= QE_FRAME_MAX. Each examined
 * byte appends at most one byte to the candidate, so the candidate (written at rx_fill) never
 * overtakes the bytes being read (at rx_rd): rescanning happens in place, in one buffer.
 *
 * The candidate's state follows from rx_fill: 0 = looking for sync byte 0, 1 = expecting sync
 * byte 1, 2..6 = in the header, >= 7 = in the payload and CRC (rx_need bytes in all).
 *
 * Each failed candidate drops at least its two sync bytes, so rescanning always terminates. */
static uint8_t rx_buf[QE_FRAME_MAX];
static uint16_t rx_fill;
static uint16_t rx_need;
static uint16_t rx_rd;
static uint16_t rx_wr;

static qe_rx_length_check_t rx_length_ok;

void qe_rx_set_length_check(qe_rx_length_check_t check)
{
    rx_length_ok = check;
}

void qe_rx_reset(void)
{
    rx_fill = rx_need = rx_rd = rx_wr = 0;
}

static qe_rx_status_t rx_fail(qe_frame_t *out, uint8_t code)
{
    uint16_t pending = (uint16_t)(rx_wr - rx_rd);
    out->error = code;
    out->payload = 0;
    /* Rescan: candidate bytes [2, rx_fill) followed by the pending bytes. */
    memmove(rx_buf + rx_fill, rx_buf + rx_rd, pending);
    rx_wr = (uint16_t)(rx_fill + pending);
    rx_rd = 2;
    rx_fill = 0;
    return QE_RX_ERROR;
}

static qe_rx_status_t rx_step(uint8_t b, qe_frame_t *out)
{
    uint16_t got;

    if (rx_fill == 0) {
        if (b == QE_PROTO_SYNC0)
            rx_buf[rx_fill++] = b;
        return QE_RX_NONE;
    }
    if (rx_fill == 1) {
        if (b == QE_PROTO_SYNC1)
            rx_buf[rx_fill++] = b;
        else if (b != QE_PROTO_SYNC0)   /* in "A5 A5 5A" the second A5 starts the sync */
            rx_fill = 0;
        return QE_RX_NONE;
    }
    rx_buf[rx_fill++] = b;
    if (rx_fill < QE_PROTO_HEADER_SIZE)
        return QE_RX_NONE;

    out->cmd = rx_buf[3];
    out->seq = rx_buf[4];
    out->len = (uint16_t)(rx_buf[5] | ((uint16_t)rx_buf[6] << 8));
    out->error = 0;
    out->crc = 0;
    if (rx_fill == QE_PROTO_HEADER_SIZE) {
        /* Checked as soon as the header is in: a false sync in garbage is then usually dropped
         * after 7 bytes instead of swallowing up to max_payload bytes that may hold a real frame. */
        if (rx_buf[2] != QE_PROTO_VERSION)
            return rx_fail(out, QE_ERR_BAD_VERSION);
        if (out->len > QE_MAX_PAYLOAD)
            return rx_fail(out, QE_ERR_TOO_LONG);
        if (rx_length_ok && !rx_length_ok(out->cmd, out->len))
            return rx_fail(out, QE_ERR_BAD_PAYLOAD);
        rx_need = (uint16_t)(QE_PROTO_HEADER_SIZE + out->len + QE_PROTO_CRC_SIZE);
        return QE_RX_NONE;
    }
    if (rx_fill < rx_need)
        return QE_RX_NONE;

    got = (uint16_t)(rx_buf[rx_need - 2] | ((uint16_t)rx_buf[rx_need - 1] << 8));
    if (got != qe_crc16(rx_buf + 2, (uint32_t)rx_need - 4u))
        return rx_fail(out, QE_ERR_BAD_CRC);
    out->crc = got;
    out->payload = rx_buf + QE_PROTO_HEADER_SIZE;
    rx_fill = 0;   /* the next byte overwrites the header only: payload stays valid until then */
    return QE_RX_FRAME;
}

qe_rx_status_t qe_rx_poll(qe_frame_t *out)
{
    while (rx_rd < rx_wr) {
        qe_rx_status_t st = rx_step(rx_buf[rx_rd++], out);
        if (st != QE_RX_NONE)
            return st;
    }
    return QE_RX_NONE;
}

qe_rx_status_t qe_rx_push(uint8_t byte, qe_frame_t *out)
{
    if (rx_rd == rx_wr)
        rx_rd = rx_wr = rx_fill;   /* nothing pending: the byte lands where the candidate grows */
    if (rx_wr >= QE_FRAME_MAX)     /* only if the caller skipped qe_rx_poll(): drop the byte */
        return qe_rx_poll(out);
    rx_buf[rx_wr++] = byte;
    return qe_rx_poll(out);
}

/* ----------------------------------------------------------------------------- transmit */
static uint8_t tx_buf[QE_TX_CHUNK];
static uint8_t tx_n;        /* staged bytes in tx_buf */
static uint16_t tx_crc;
static uint16_t tx_left;    /* payload bytes announced but not yet written */

static void tx_flush(void)
{
    if (tx_n) {
        qe_port_write(tx_buf, tx_n);
        tx_n = 0;
    }
}

static void tx_raw(uint8_t b)
{
    tx_buf[tx_n++] = b;
    if (tx_n == QE_TX_CHUNK)
        tx_flush();
}

static void tx_body(uint8_t b)   /* a byte covered by the CRC */
{
    tx_crc = qe_crc16_update(tx_crc, b);
    tx_raw(b);
}

void qe_tx_begin(uint8_t cmd, uint8_t seq, uint16_t len)
{
    tx_crc = QE_CRC16_INIT;
    tx_left = len;
    tx_raw(QE_PROTO_SYNC0);
    tx_raw(QE_PROTO_SYNC1);
    tx_body(QE_PROTO_VERSION);
    tx_body(cmd);
    tx_body(seq);
    tx_body((uint8_t)(len & 0xFFu));
    tx_body((uint8_t)(len >> 8));
}

void qe_tx_u8(uint8_t v)
{
    if (tx_left) {
        tx_left--;
        tx_body(v);
    }
}

void qe_tx_u16(uint16_t v)
{
    qe_tx_u8((uint8_t)(v & 0xFFu));
    qe_tx_u8((uint8_t)(v >> 8));
}

void qe_tx_u32(uint32_t v)
{
    uint8_t i;
    for (i = 0; i < 4u; i++)
        qe_tx_u8((uint8_t)((v >> (8u * i)) & 0xFFu));
}

void qe_tx_u64(uint64_t v)
{
    uint8_t i;
    for (i = 0; i < 8u; i++)
        qe_tx_u8((uint8_t)((v >> (8u * i)) & 0xFFu));
}

void qe_tx_i32(int32_t v)
{
    qe_tx_u32((uint32_t)v);   /* two's complement bit pattern (conversion is well defined) */
}

void qe_tx_f32(float v)
{
    /* memcpy, not a pointer cast: no aliasing trouble; float and uint32_t share byte order
     * on every target we build for (IEEE-754 binary32, including avr-gcc's float). */
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    qe_tx_u32(bits);
}

void qe_tx_bytes(const uint8_t *data, uint32_t n)
{
    uint32_t i;
    for (i = 0; i < n; i++)
        qe_tx_u8(data[i]);
}

void qe_tx_end(void)
{
    uint16_t crc;
    uint8_t i;
    while (tx_left)
        qe_tx_u8(0);
    crc = tx_crc;
    tx_raw((uint8_t)(crc & 0xFFu));
    tx_raw((uint8_t)(crc >> 8));
    for (i = 0; i < QE_PROTO_PAD_SIZE; i++)   /* a receiver that lost a byte sees it at once */
        tx_raw(0u);
    tx_flush();
}

void qe_tx_error(uint8_t seq, uint8_t code, uint8_t failed_cmd, const char *msg)
{
    uint16_t n = 0;
    if (msg) {
        while (msg[n] != '\0' && n < 200u)
            n++;
    }
    qe_tx_begin(QE_PROTO_CMD_ERROR, seq, (uint16_t)(2u + n));
    qe_tx_u8(code);
    qe_tx_u8(failed_cmd);
    qe_tx_bytes((const uint8_t *)msg, n);
    qe_tx_end();
}
