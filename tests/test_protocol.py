"""The protocol's two implementations agree: the generated C header matches the Python constants,
and firmware/core/protocol.c (compiled with real gcc into a shared library, driven via ctypes)
computes the same CRC, writes byte-identical frames and finds the same frames in a byte stream
as quarl_edge.link.protocol."""
from __future__ import annotations

import ctypes
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quarl_edge.link import protocol as P

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "firmware" / "core"
MAX_PAYLOAD = 1024   # the default QE_MAX_PAYLOAD (qe_port.h); the library is built with it

# Test-only glue: a qe_port_write that records what the frame writer sends, and a driver that
# pushes bytes through the receive state machine and serialises its events for Python.
DRIVER_C = r"""
#include <stdint.h>
#include <string.h>
#include "qe_protocol.h"
#include "qe_port.h"
#include "protocol.h"

static uint8_t out[1u << 17];
static uint32_t out_n;

void qe_port_write(const uint8_t *data, uint32_t n)
{
    if (out_n + n <= sizeof out) {
        memcpy(out + out_n, data, n);
        out_n += n;
    }
}

uint32_t t_take_output(uint8_t *dst, uint32_t cap)
{
    uint32_t n = out_n < cap ? out_n : cap;
    memcpy(dst, out, n);
    out_n = 0;
    return n;
}

static uint32_t record(qe_rx_status_t st, const qe_frame_t *f, uint8_t *ev, uint32_t pos,
                       uint32_t cap)
{
    uint32_t n = 6u + (st == QE_RX_FRAME ? f->len : 0u);
    if (pos + n > cap)
        return pos;
    ev[pos] = (uint8_t)st;
    ev[pos + 1] = f->error;
    ev[pos + 2] = f->cmd;
    ev[pos + 3] = f->seq;
    ev[pos + 4] = (uint8_t)(f->len & 0xFF);
    ev[pos + 5] = (uint8_t)(f->len >> 8);
    if (st == QE_RX_FRAME)
        memcpy(ev + pos + 6, f->payload, f->len);
    return pos + n;
}

/* Events as records: u8 status, u8 error, u8 cmd, u8 seq, u16 len, payload (frames only). */
uint32_t t_feed(const uint8_t *in, uint32_t n, uint8_t *ev, uint32_t cap)
{
    uint32_t i, pos = 0;
    qe_frame_t f;
    for (i = 0; i < n; i++) {
        qe_rx_status_t st = qe_rx_push(in[i], &f);
        while (st != QE_RX_NONE) {
            pos = record(st, &f, ev, pos, cap);
            st = qe_rx_poll(&f);
        }
    }
    return pos;
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("protolib")
    (d / "driver.c").write_text(DRIVER_C)
    so = d / "libqeproto.so"
    cmd = ["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
           "-fPIC", "-shared", f"-I{CORE}", str(CORE / "protocol.c"), str(d / "driver.c"),
           "-o", str(so)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    L = ctypes.CDLL(str(so))
    L.qe_crc16.restype = ctypes.c_uint16
    L.qe_crc16.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    L.qe_crc16_update.restype = ctypes.c_uint16
    L.qe_crc16_update.argtypes = [ctypes.c_uint16, ctypes.c_uint8]
    L.t_feed.restype = ctypes.c_uint32
    L.t_feed.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32]
    L.t_take_output.restype = ctypes.c_uint32
    L.t_take_output.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    L.qe_tx_begin.argtypes = [ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint16]
    L.qe_tx_u8.argtypes = [ctypes.c_uint8]
    L.qe_tx_u16.argtypes = [ctypes.c_uint16]
    L.qe_tx_u32.argtypes = [ctypes.c_uint32]
    L.qe_tx_u64.argtypes = [ctypes.c_uint64]
    L.qe_tx_i32.argtypes = [ctypes.c_int32]
    L.qe_tx_f32.argtypes = [ctypes.c_float]
    L.qe_tx_bytes.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    L.qe_tx_error.argtypes = [ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_char_p]
    return L


def take_output(L) -> bytes:
    buf = ctypes.create_string_buffer(1 << 17)
    n = L.t_take_output(buf, len(buf))
    return buf.raw[:n]


def c_feed(L, data: bytes) -> list[tuple]:
    """Events of the C parser: ("frame", cmd, seq, payload) or ("error", code, cmd, seq)."""
    cap = 8 * len(data) + 64   # each byte ends in at most one frame; each error record is 6 bytes
    ev = ctypes.create_string_buffer(cap)
    n = L.t_feed(data, len(data), ev, cap)
    raw, pos, out = ev.raw[:n], 0, []
    while pos < n:
        status, err, cmd, seq, length = struct.unpack_from("<BBBBH", raw, pos)
        pos += 6
        if status == 1:
            out.append(("frame", cmd, seq, raw[pos:pos + length]))
            pos += length
        else:
            assert status == 2
            out.append(("error", err, cmd, seq))
    return out


def flush_bytes() -> bytes:
    """Enough zero bytes to complete any candidate frame started earlier (see helpers_harness.Board.flush)."""
    return bytes(P.HEADER_SIZE + MAX_PAYLOAD + P.CRC_SIZE)


# ------------------------------------------------------------------------------ constants
def test_committed_header_matches_python_constants():
    assert (CORE / "qe_protocol.h").read_text() == P.c_header()


def test_header_cli_prints_the_same_header():
    out = subprocess.run([sys.executable, "-m", "quarl_edge.link.protocol", "--header"],
                         capture_output=True, text=True, check=True).stdout
    assert out == P.c_header()


def test_every_wire_dtype_is_a_tensor_spec_dtype():
    """The protocol's dtype codes name the one tensor spec's dtypes (quarl_edge/converters/tensor.py), and
    a spec of each packs to code, dims, shape, scale and zero point and parses back."""
    from quarl_edge.converters.tensor import DTYPE_LAYOUT, TensorSpec
    assert sorted(P.DTYPES.values()) == sorted(DTYPE_LAYOUT)
    for code, name in P.DTYPES.items():
        t = TensorSpec(name, (2, 3), 0.5, -3)
        assert P.pack_tensor(t) == struct.pack("<BBHHfi", code, 2, 2, 3, 0.5, -3)
        r = P._Reader(P.pack_tensor(t), "test")
        assert r.tensor() == t and t.nbytes == 6 * DTYPE_LAYOUT[name][1]
        r.end()
    assert P.TensorSpec is TensorSpec      # one class, not a copy with the same fields


# ------------------------------------------------------------------------------------ CRC
def test_crc_check_value(lib):
    # the catalogued check value of CRC-16/CCITT-FALSE
    assert lib.qe_crc16(b"123456789", 9) == 0x29B1 == P.crc16(b"123456789")
    assert lib.qe_crc16(b"", 0) == 0xFFFF


@given(st.binary(max_size=2048))
@settings(max_examples=300, deadline=None)
def test_c_crc_equals_python_crc(lib, data):
    assert lib.qe_crc16(data, len(data)) == P.crc16(data)


@given(st.binary(max_size=64), st.binary(max_size=64))
@settings(max_examples=100, deadline=None)
def test_c_crc_is_incremental(lib, a, b):
    crc = lib.qe_crc16(a, len(a))
    for byte in b:
        crc = lib.qe_crc16_update(crc, byte)
    assert crc == P.crc16(a + b)


# --------------------------------------------------------------------------------- writer
@given(cmd=st.integers(0, 255), seq=st.integers(0, 255), payload=st.binary(max_size=1500))
@settings(max_examples=100, deadline=None)
def test_c_writer_matches_encode_frame(lib, cmd, seq, payload):
    take_output(lib)
    lib.qe_tx_begin(cmd, seq, len(payload))
    lib.qe_tx_bytes(payload, len(payload))
    lib.qe_tx_end()
    assert take_output(lib) == P.encode_frame(cmd, payload, seq)


def test_c_writer_scalars_are_little_endian(lib):
    take_output(lib)
    payload = struct.pack("<BHIQif", 0xAB, 0x1234, 0xDEADBEEF, 0x0102030405060708, -5, -62.5)
    lib.qe_tx_begin(0x85, 3, len(payload))
    lib.qe_tx_u8(0xAB)
    lib.qe_tx_u16(0x1234)
    lib.qe_tx_u32(0xDEADBEEF)
    lib.qe_tx_u64(0x0102030405060708)
    lib.qe_tx_i32(-5)
    lib.qe_tx_f32(-62.5)
    lib.qe_tx_end()
    assert take_output(lib) == P.encode_frame(0x85, payload, 3)


def test_c_writer_keeps_frames_well_formed_on_caller_mistakes(lib):
    take_output(lib)
    lib.qe_tx_begin(0x85, 1, 4)
    lib.qe_tx_u8(7)                       # two bytes short: zero-filled
    lib.qe_tx_u8(8)
    lib.qe_tx_end()
    lib.qe_tx_begin(0x85, 2, 1)
    lib.qe_tx_bytes(b"abc", 3)             # two bytes too many: dropped
    lib.qe_tx_end()
    assert take_output(lib) == P.encode_frame(0x85, b"\x07\x08\x00\x00", 1) + P.encode_frame(0x85, b"a", 2)


def test_c_error_frame(lib):
    take_output(lib)
    lib.qe_tx_error(9, 5, 0x02, b"too short")
    frames = P.FrameDecoder().feed(take_output(lib))
    assert len(frames) == 1 and frames[0].is_error and frames[0].seq == 9
    assert frames[0].error() == ("BAD_PAYLOAD", 2, "too short")


# --------------------------------------------------------------------------------- parser
def test_c_parser_errors(lib):
    good = P.encode_frame(1, b"\x01\x02\x03\x04", 5)
    end = len(good) - P.PAD_SIZE             # the CRC's last byte is just before the pad
    bad_crc = good[:end - 1] + bytes([good[end - 1] ^ 0x01]) + good[end:]
    too_long = P.SYNC + struct.pack("<BBBH", P.VERSION, 5, 6, MAX_PAYLOAD + 1)
    bad_version = P.encode_frame(1, b"\0\0\0\0", 7, version=P.VERSION + 1)
    events = c_feed(lib, bad_crc + too_long + bad_version + good)
    assert events == [("error", 1, 1, 5), ("error", 2, 5, 6), ("error", 4, 1, 7),
                      ("frame", 1, 5, b"\x01\x02\x03\x04")]


def test_c_parser_max_payload_boundary(lib):
    c_feed(lib, flush_bytes())
    full = bytes(range(256)) * (MAX_PAYLOAD // 256)
    assert c_feed(lib, P.encode_frame(5, full, 1)) == [("frame", 5, 1, full)]
    over = P.encode_frame(5, full + b"x", 2)
    assert c_feed(lib, over)[0] == ("error", 2, 5, 2)


def test_c_parser_finds_a_frame_hidden_behind_a_false_sync(lib):
    """A false sync in garbage announces a long payload and swallows the real frame; when the
    false frame's CRC fails, the parser rescans the swallowed bytes and still finds it."""
    c_feed(lib, flush_bytes())
    real = P.encode_frame(5, b"hidden", 42)
    false_header = P.SYNC + struct.pack("<BBBH", P.VERSION, 3, 0, 40)
    events = c_feed(lib, false_header + real + bytes(40))
    assert ("frame", 5, 42, b"hidden") in events
    assert events[0] == ("error", 1, 3, 0)      # the false frame: BAD_CRC, reported first


chunks = st.one_of(
    st.binary(max_size=64).map(lambda b: ("garbage", b)),
    st.tuples(st.integers(1, 0x7F), st.integers(0, 255), st.binary(max_size=300)).map(
        lambda t: ("frame", t)),
    # frame-like garbage: sync plus a partial or corrupted header
    st.binary(max_size=8).map(lambda b: ("garbage", P.SYNC + b)),
)


@given(st.lists(chunks, max_size=12))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_c_parser_finds_the_frames_python_finds(lib, parts):
    """Differential: on garbage interleaved with frames, the C state machine reports exactly the
    frames Python's FrameDecoder reports (frames of our version; C drops others at the header), in
    order, and every frame that was sent."""
    c_feed(lib, flush_bytes())   # start from a clean parser state
    stream, sent = b"", []
    for kind, val in parts:
        if kind == "garbage":
            stream += val
        else:
            cmd, seq, payload = val
            stream += P.encode_frame(cmd, payload, seq)
            sent.append((cmd, seq, payload))
    stream += flush_bytes()
    c_frames = [e[1:] for e in c_feed(lib, stream) if e[0] == "frame"]
    py_frames = [(f.cmd, f.seq, f.payload)
                 for f in P.FrameDecoder(max_payload=MAX_PAYLOAD).feed(stream) if f.version == P.VERSION]
    assert c_frames == py_frames
    it = iter(c_frames)
    assert all(s in it for s in sent), "a sent frame was not found (in order)"


# ------------------------------------------------------------- fuzz: the host's decoder
HOST_LIMITS = {0x81: P.HELLO_REPLY_MAX, 0x82: 12, 0x83: 20, 0x84: 20, 0x85: 256, 0x88: 4,
               P.CMD_ERROR: P.ERROR_REPLY_MAX}
host_bytes = st.lists(st.one_of(
    st.binary(max_size=80),
    st.binary(max_size=12).map(lambda b: P.SYNC + b),                     # false syncs
    st.tuples(st.sampled_from(sorted(HOST_LIMITS)), st.integers(0, 255), st.binary(max_size=60))
      .map(lambda t: P.encode_frame(t[0], t[2], t[1])),                  # CRC-valid, any payload
), max_size=10)


@given(host_bytes, st.integers(1, 50))
@settings(max_examples=400, deadline=None)
def test_the_host_decoder_and_reply_parsers_raise_only_protocol_errors(parts, chunk):
    """Whatever arrives: the decoder never raises and holds no more than one frame's worth of
    bytes, and parsing whatever frames come out fails, if at all, with ProtocolError only."""
    from quarl_edge.core.errors import ProtocolError
    dec = P.FrameDecoder(version=P.VERSION, limits=HOST_LIMITS)
    stream = b"".join(parts)
    for i in range(0, len(stream), chunk):
        for f in dec.feed(stream[i:i + chunk]):
            for parse in (P.parse_hello, lambda p: P.unpack_reply(P.MEM_REPLY, p, "MEM"),
                          lambda p: P.unpack_reply(P.BENCH_REPLY, p, "BENCH"),
                          lambda p: P.unpack_reply(P.RESET_REPLY, p, "RESET"), P.Frame.error):
                try:
                    parse(f.payload) if parse is not P.Frame.error else f.error()
                except ProtocolError as e:
                    assert str(e) and "\n" not in str(e)
        assert len(dec.buf) <= P.HEADER_SIZE + P.HELLO_REPLY_MAX + P.CRC_SIZE
