"""The on-device harness (firmware/core) with the host port, against hostile input: garbage, bad
CRCs, too long or unknown frames, wrong versions and payload sizes, on the plain and the
sanitized build (whose stderr must stay clean); and property tests, of the Python frame decoder
and of the live harness under random bytes. (How the harness is run: test_harness.py.)"""
from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_harness import (MAX_PAYLOAD, Board, assert_clean_exit, dequant, infer,
                             shared_builds)
from quarl_edge.link import protocol as P


@pytest.fixture(scope="module")
def builds(tmp_path_factory, worker_id):
    return shared_builds(tmp_path_factory, worker_id)


@pytest.fixture
def plain(builds):
    exe, env = builds["plain"]
    with Board(exe, env) as b:
        yield b


@pytest.fixture(params=["plain", "sanitized"])
def board(builds, request):
    exe, env = builds[request.param]
    with Board(exe, env) as b:
        yield b


# -------------------------------------------------------------------------- robustness
def expect_error(b: Board, name: str, failed_cmd: int, seq: int | None = None):
    f = b.frame()
    assert f.is_error, f
    err, failed, msg = f.error()
    assert (err, failed) == (name, failed_cmd), (err, failed, msg)
    assert msg, "error frames carry a message"
    if seq is not None:
        assert f.seq == seq


def test_garbage_without_sync_is_skipped(board):
    board.send(bytes([0x00, 0xFF, 0x5A, 0xA5, 0x00, 0xA5, 0xA5, 0x11]) + os.urandom(64).replace(b"\xa5", b""))
    board.hello()     # answered at once: nothing else comes first
    assert_clean_exit(board)


def test_bad_crc(board):
    good = P.encode_frame(0x01, b"\1\2\3\4", 17)
    end = len(good) - P.PAD_SIZE
    board.send(good[:end - 2] + bytes([good[end - 2] ^ 0xFF]) + good[end - 1:])
    expect_error(board, "BAD_CRC", 0x01, seq=17)
    board.hello()
    assert_clean_exit(board)


def test_too_long(board):
    board.send(P.SYNC + struct.pack("<BBBH", P.VERSION, 0x05, 18, MAX_PAYLOAD + 1))
    expect_error(board, "TOO_LONG", 0x05, seq=18)
    board.hello()
    assert_clean_exit(board)


def test_too_long_with_its_payload_sent_anyway(board):
    """The host sends the whole oversized frame: the board answers TOO_LONG, then skips the
    payload as garbage (no sync inside) and answers the next request."""
    board.send(P.encode_frame(0x05, b"\x11" * (MAX_PAYLOAD + 1), 19))
    expect_error(board, "TOO_LONG", 0x05, seq=19)
    board.hello()
    assert_clean_exit(board)


def test_wrong_version(board):
    board.send(P.encode_frame(0x01, b"\1\2\3\4", 20, version=P.VERSION + 1))
    expect_error(board, "BAD_VERSION", 0x01, seq=20)
    board.hello()
    assert_clean_exit(board)


@pytest.mark.parametrize("cmd", [0x00, 0x0A, 0x42, 0x7F])   # 0x09 is INFER_Z (v5)
def test_unknown_command(board, cmd):
    f = board.request(cmd, b"abc")
    assert f.is_error and f.error()[:2] == ("UNKNOWN_CMD", cmd)
    board.hello()
    assert_clean_exit(board)


def test_reply_frames_are_ignored(plain):
    """Frames with the reply bit are not requests: no answer (a looped-back reply must not start
    an error ping-pong), and the harness carries on."""
    for cmd in (0x81, 0x85, 0xFF):
        plain.send(P.encode_frame(cmd, b"\0\0\0\0", 1))
    plain.hello()
    assert plain.drain() == []


@pytest.mark.parametrize("cmd,payload", [
    (0x02, b"\1\2\3"),             # INFER: 3 bytes, the input has 4
    (0x02, b"\1\2\3\4\5"),
    (0x02, b""),
    (0x01, b"\1\2\3"),             # HELLO: nonce is a u32
    (0x03, b"\5"),                 # BENCH: u16 n
    (0x03, b"\0\0"),               # BENCH: n >= 1
    (0x04, b"\0"),                 # MEM: no payload
    (0x08, b"\0"),                 # RESET: no payload
])
def test_wrong_payload_size(board, cmd, payload):
    f = board.request(cmd, payload)
    assert f.is_error and f.error()[:2] == ("BAD_PAYLOAD", cmd), f.error()
    board.hello()
    assert_clean_exit(board)


def test_all_errors_back_to_back_then_everything_works(board):
    crc_end = P.HEADER_SIZE + 4 + P.CRC_SIZE
    bad = (P.encode_frame(0x01, b"\0\0\0\0", 1)[:crc_end - 1] + b"\x00"
           + P.SYNC + struct.pack("<BBBH", P.VERSION, 2, 2, 0xFFFF)
           + P.encode_frame(0x01, b"\0\0\0\0", 3, version=0)
           + P.encode_frame(0x33, b"", 4)
           + P.encode_frame(0x02, b"\0", 5))
    board.send(bad)
    got = [board.frame() for _ in range(5)]
    assert [(f.seq, f.error()[0]) for f in got] == [
        (1, "BAD_CRC"), (2, "TOO_LONG"), (3, "BAD_VERSION"), (4, "UNKNOWN_CMD"), (5, "BAD_PAYLOAD")]
    board.hello()
    _, out, _ = infer(board, [0, 1, 2, 3])
    assert out == dequant([0, 1, 2, 3])
    assert_clean_exit(board)


def test_frame_hidden_behind_a_false_sync_is_found(board):
    """Garbage that looks like a header announcing 100 bytes swallows a real HELLO; once the
    false frame fails its CRC the harness rescans and answers the HELLO."""
    board.send(P.SYNC + struct.pack("<BBBH", P.VERSION, 0x09, 0, 100))
    nonce = 0x12345678
    board.send(P.encode_frame(0x01, struct.pack("<I", nonce), 77) + b"\x00" * 100)
    first, second = board.frame(), board.frame()
    assert first.error()[0] == "BAD_CRC"
    assert second.cmd == 0x81 and second.seq == 77 and P.parse_hello(second.payload).nonce == nonce
    assert_clean_exit(board)


# ------------------------------------------------------------------- property: Python side
frame_parts = st.tuples(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=MAX_PAYLOAD))


@given(st.lists(st.one_of(frame_parts, st.binary(max_size=100)), max_size=10),
       st.lists(st.integers(1, 200), min_size=1, max_size=20))
@settings(max_examples=200, deadline=None)
def test_python_decoder_roundtrip_and_resync(parts, chunk_sizes):
    """Frames interleaved with garbage, fed in arbitrary chunks: every frame comes out intact and
    in order (after a flush that completes any false frame started in the garbage)."""
    stream, sent = b"", []
    for p in parts:
        if isinstance(p, tuple):
            cmd, seq, payload = p
            stream += P.encode_frame(cmd, payload, seq)
            sent.append((cmd, seq, payload))
        else:
            stream += p
    stream += bytes(P.HEADER_SIZE + MAX_PAYLOAD + P.CRC_SIZE)
    dec = P.FrameDecoder(max_payload=MAX_PAYLOAD)
    got, pos, i = [], 0, 0
    while pos < len(stream):
        n = chunk_sizes[i % len(chunk_sizes)]
        got += [(f.cmd, f.seq, f.payload) for f in dec.feed(stream[pos:pos + n])]
        pos, i = pos + n, i + 1
    it = iter(got)
    assert all(s in it for s in sent)
    # garbage alone produces no frames (a random 16-bit CRC match is not expected here)
    assert len(got) == len(sent)


@given(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=2000))
def test_python_encode_decode_roundtrip(cmd, seq, payload):
    (f,) = P.FrameDecoder().feed(P.encode_frame(cmd, payload, seq))
    assert (f.version, f.cmd, f.seq, f.payload) == (P.VERSION, cmd, seq, payload)


# ------------------------------------------------------------------ property: live harness
@st.composite
def near_frame(draw) -> bytes:
    """Sync + random header fields + random payload: usually a bad version, length or CRC."""
    version, cmd, length = draw(st.integers(0, 255)), draw(st.integers(0, 255)), draw(st.integers(0, 0xFFFF))
    return P.SYNC + struct.pack("<BBBH", version, cmd, 0, length) + draw(st.binary(max_size=200))


@st.composite
def damaged_frame(draw) -> bytes:
    """A valid frame of any command and payload, as is, with one byte changed, or cut short."""
    frame = P.encode_frame(draw(st.integers(0, 255)), draw(st.binary(max_size=40)), 0)
    how = draw(st.sampled_from(["as is", "changed", "cut"]))
    pos = draw(st.integers(0, len(frame) - 1))
    if how == "changed":
        return frame[:pos] + bytes([draw(st.integers(0, 255))]) + frame[pos + 1:]
    if how == "cut":
        return frame[:pos]
    return frame


hostile = st.one_of(
    st.binary(max_size=3000),
    near_frame(),
    damaged_frame(),
    st.integers(1, 50).map(lambda n: P.SYNC * n),
)


@pytest.fixture(scope="module", params=["plain", "sanitized"])
def live(builds, request):
    exe, env = builds[request.param]
    with Board(exe, env) as b:
        yield b
        assert_clean_exit(b)


@given(st.lists(hostile, min_size=1, max_size=5))
@settings(max_examples=60, deadline=None)
def test_random_bytes_never_kill_the_harness(live, chunks):
    live.send(b"".join(chunks))
    live.flush()
    live.hello(skip_others=True)   # first try: after the flush the parser must be in sync
    assert live.alive(), live.stderr_text()
