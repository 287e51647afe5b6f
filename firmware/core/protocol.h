/* The frame layer of the harness protocol (docs/protocol.md): CRC-16/CCITT-FALSE, a
 * byte-at-a-time receive state machine and a streaming frame writer.
 *
 * RAM: one receive buffer of QE_PROTO_HEADER_SIZE + QE_MAX_PAYLOAD + QE_PROTO_CRC_SIZE bytes,
 * a QE_TX_CHUNK-byte (default 32) transmit staging buffer and a few counters. Replies are
 * streamed (header, payload pieces, CRC) so no reply buffer is needed. No heap, no recursion. */
#ifndef QE_FRAME_PROTOCOL_H
#define QE_FRAME_PROTOCOL_H

#include <stdint.h>

/* CRC-16/CCITT-FALSE: poly 0x1021, init 0xFFFF, no reflection, no final xor. Bitwise (no
 * table) to keep flash and RAM small on 8-bit parts. */
#define QE_CRC16_INIT 0xFFFFu
uint16_t qe_crc16_update(uint16_t crc, uint8_t byte);
uint16_t qe_crc16(const uint8_t *data, uint32_t n);

/* ------------------------------------------------------------------------------ receive */
typedef enum {
    QE_RX_NONE = 0,   /* nothing complete yet */
    QE_RX_FRAME = 1,  /* a well-formed frame of this protocol version (cmd not checked) */
    QE_RX_ERROR = 2   /* a malformed frame: answer it with an error frame (code in .error) */
} qe_rx_status_t;

typedef struct {
    uint8_t cmd;              /* from the header (for errors: what the header claimed) */
    uint8_t seq;
    uint8_t error;            /* QE_ERR_* for QE_RX_ERROR, else 0 */
    uint16_t len;             /* payload length (for errors: what the header claimed) */
    uint16_t crc;             /* QE_RX_FRAME only: the frame's CRC (tells a retry from a new request) */
    const uint8_t *payload;   /* QE_RX_FRAME only: valid until the next qe_rx_* call */
} qe_frame_t;

void qe_rx_reset(void);
/* Offer one received byte. Returns an event (filling *out) or QE_RX_NONE. After any event,
 * call qe_rx_poll() until it returns QE_RX_NONE before offering the next byte: a frame that
 * fails (bad version, too long, bad CRC) is rescanned from the byte after its sync, because a
 * real frame may hide behind a false sync in garbage; that rescan can yield more events. */
qe_rx_status_t qe_rx_push(uint8_t byte, qe_frame_t *out);
qe_rx_status_t qe_rx_poll(qe_frame_t *out);
/* Optional: a check of each header's (cmd, len), made as soon as the header is in; a header it
 * refuses fails at once with QE_ERR_BAD_PAYLOAD instead of waiting for its payload. The harness
 * knows every request's size: a length a corrupted byte made long then cannot swallow the
 * frames behind it. NULL (the default) checks nothing beyond max_payload. */
typedef int (*qe_rx_length_check_t)(uint8_t cmd, uint16_t len);
void qe_rx_set_length_check(qe_rx_length_check_t check);

/* ----------------------------------------------------------------------------- transmit */
/* A frame is written as: qe_tx_begin(cmd, seq, payload length), exactly that many payload
 * bytes through qe_tx_u8/.../qe_tx_bytes, then qe_tx_end(). Bytes beyond the announced length
 * are dropped and missing ones are zero-filled, so the wire always carries a well-formed frame.
 * Multi-byte values are written little-endian byte by byte (no type punning). */
void qe_tx_begin(uint8_t cmd, uint8_t seq, uint16_t len);
void qe_tx_u8(uint8_t v);
void qe_tx_u16(uint16_t v);
void qe_tx_u32(uint32_t v);
void qe_tx_u64(uint64_t v);
void qe_tx_i32(int32_t v);
void qe_tx_f32(float v);
void qe_tx_bytes(const uint8_t *data, uint32_t n);
void qe_tx_end(void);
/* A complete error frame: u8 code, u8 failed command, ASCII message (may be NULL). */
void qe_tx_error(uint8_t seq, uint8_t code, uint8_t failed_cmd, const char *msg);

#endif /* QE_FRAME_PROTOCOL_H */
