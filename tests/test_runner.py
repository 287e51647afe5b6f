"""The serial runner's failure paths: a board that does not answer, a port that does not exist,
replies that are not ours. (The live harness is exercised in test_harness.py and test_e2e_host.py.)"""
import os
import struct
import threading
import time
import tty

import numpy as np
import pytest

from quarl_edge.link import protocol as P
from quarl_edge.core.errors import BoardError, ProtocolError
from quarl_edge.link.runner import BoardLink


def test_missing_port_is_a_clear_error():
    with pytest.raises(BoardError, match="cannot open serial port /dev/does-not-exist"):
        BoardLink("/dev/does-not-exist")


def test_a_silent_board_times_out_with_a_hint():
    master, slave = os.openpty()       # nobody serves the other end
    tty.setraw(slave)
    try:
        with BoardLink(os.ttyname(slave)) as link:
            t0 = time.monotonic()
            with pytest.raises(BoardError, match="no HELLO answer .* is the firmware running"):
                link.hello(total_timeout=1.0)
            assert time.monotonic() - t0 < 3
    finally:
        os.close(master)
        os.close(slave)


def test_loopback_echo_of_our_own_request_is_not_taken_as_a_reply():
    # loop:// sends our HELLO request back to us: same seq, but not a reply frame.
    with BoardLink("loop://") as link:
        with pytest.raises(BoardError, match="no HELLO answer"):
            link.hello(total_timeout=0.6)


def fake_board(fd, reply_for):
    """Answers each request frame on `fd` with reply_for(frame) (bytes to write). The thread
    reads its own duplicate of `fd`: a test's os.close(fd) does not wake a blocked read, and the
    next test's openpty() reuses the number, so a thread reading the number itself would answer
    the next test's requests too (it did: a HELLO from the previous case). The duplicate keeps
    this pty; its read fails once the test closes the slave side, and the thread ends."""
    dec = P.FrameDecoder()
    fd = os.dup(fd)

    def loop():
        try:
            while True:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    return
                if not data:
                    return
                for f in dec.feed(data):
                    os.write(fd, reply_for(f))
        finally:
            os.close(fd)
    threading.Thread(target=loop, daemon=True).start()


def test_error_frames_become_protocol_errors_with_the_error_name():
    master, slave = os.openpty()
    tty.setraw(slave)
    msg = b"no such command"
    fake_board(master, lambda f: P.encode_frame(P.CMD_ERROR, bytes([3, f.cmd]) + msg, f.seq))
    try:
        with BoardLink(os.ttyname(slave)) as link:
            with pytest.raises(ProtocolError, match="MEM with UNKNOWN_CMD: no such command"):
                link.command("MEM", timeout=2)
    finally:
        os.close(master)
        os.close(slave)


def test_handshake_ignores_garbage_and_stale_nonces():
    master, slave = os.openpty()
    tty.setraw(slave)
    hello = P.Hello(0, P.VERSION, "ns", 0, 256, "fake", "m", b"12345678", 64,
                    [P.TensorSpec("float32", (1, 4))], [P.TensorSpec("float32", (1, 2))])
    calls = []

    def reply(f):
        calls.append(f)
        (nonce,) = struct.unpack("<I", f.payload[:4])
        if len(calls) == 1:   # first answer: line noise plus a reply with a wrong nonce
            hello.nonce = nonce ^ 1
            return b"\x00\xffnoise" + P.encode_frame(0x81, P.pack_hello(hello), f.seq)
        hello.nonce = nonce
        return P.encode_frame(0x81, P.pack_hello(hello), f.seq)

    fake_board(master, reply)
    try:
        with BoardLink(os.ttyname(slave)) as link:
            info = link.hello(total_timeout=3)
            assert len(calls) >= 2
            assert info.board_id == "fake" and info.inputs[0].shape == (1, 4)
            assert info.outputs[0].dtype == "float32" and info.max_payload == 256
    finally:
        os.close(master)
        os.close(slave)


# ------------------------------------------------------- CRC-valid but malformed replies
GOOD_HELLO = P.Hello(0, P.VERSION, "ns", 0, 256, "fake", "m", b"12345678", 64,
                     [P.TensorSpec("float32", (1, 4))], [P.TensorSpec("float32", (1, 2))], 7)


def _hello_payload(nonce: int) -> bytes:
    GOOD_HELLO.nonce = nonce
    return P.pack_hello(GOOD_HELLO)


def _spec_with_dtype_9(nonce: int) -> bytes:
    p = bytearray(_hello_payload(nonce))
    at = p.index(struct.pack("<I", 64)) + 4 + 1     # arena bytes, n_inputs, then the dtype
    p[at] = 9
    return bytes(p)


@pytest.mark.parametrize("hello, request_name, reply, message", [
    (lambda n: _hello_payload(n)[:12], None, None, "HELLO reply is cut short"),
    (lambda n: _hello_payload(n) + b"xx", None, None, "HELLO reply has 2 bytes more"),
    (_spec_with_dtype_9, None, None, "dtype 9, which the protocol does not define"),
    (_hello_payload, "INFER", struct.pack("<I", 1) + b"\0" * 4, "its INFER reply has 8 bytes; the model's outputs make 12"),
    (_hello_payload, "MEM", b"\0" * 12, "MEM reply has 12 bytes, expected 20"),
    (_hello_payload, "BENCH", b"\0" * 4, "BENCH reply has 4 bytes, expected 20"),
    (_hello_payload, "RESET", b"\0" * 2, "RESET reply has 2 bytes, expected 4"),
])
def test_malformed_replies_are_protocol_errors(hello, request_name, reply, message):
    """A board (here a fake one on a real pty) whose replies pass the CRC but not their layout:
    one ProtocolError line, never struct.error, KeyError or a numpy error."""
    master, slave = os.openpty()
    tty.setraw(slave)

    def answer(f):
        if f.cmd == P.COMMANDS["HELLO"]:
            (nonce,) = struct.unpack("<I", f.payload)
            return P.encode_frame(0x81, hello(nonce), f.seq)
        return P.encode_frame(f.cmd | P.REPLY_BIT, reply, f.seq)

    fake_board(master, answer)
    try:
        with BoardLink(os.ttyname(slave)) as link:
            with pytest.raises(ProtocolError, match=message) as e:
                link.hello(total_timeout=3)
                {"INFER": lambda: link.infer([np.zeros((1, 4), np.float32)]),
                 "MEM": link.mem, "BENCH": lambda: link.bench(1),
                 "RESET": link.reset_state}[request_name]()
            assert "\n" not in str(e.value)
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize("version", [1, P.VERSION - 1])   # v4: a board built before INFER_Z
def test_a_board_of_another_protocol_version_is_named_at_once(version):
    master, slave = os.openpty()
    tty.setraw(slave)
    fake_board(master, lambda f: P.encode_frame(0x81, b"\0" * 30, f.seq, version=version))
    try:
        with BoardLink(os.ttyname(slave)) as link:
            t0 = time.monotonic()
            with pytest.raises(ProtocolError, match="another protocol version; this quarl-edge "
                                                    f"speaks v{P.VERSION}"):
                link.hello(total_timeout=5)
            assert time.monotonic() - t0 < 1
    finally:
        os.close(master)
        os.close(slave)


def test_reset_state_checks_the_boot_id_in_its_reply():
    """RESET's reply names the board's boot id (protocol v4): the handshake's id passes; another
    one (a restart whose announcement was lost: the state is gone with it) makes the link
    handshake again, which sees the new boot id and raises BoardReset."""
    from quarl_edge.core.errors import BoardReset
    master, slave = os.openpty()
    tty.setraw(slave)
    boot = {"id": 7, "resets": 0}

    def answer(f):
        if f.cmd == P.COMMANDS["HELLO"]:
            (nonce,) = struct.unpack("<I", f.payload)
            GOOD_HELLO.nonce, GOOD_HELLO.boot_id = nonce, boot["id"]
            return P.encode_frame(0x81, P.pack_hello(GOOD_HELLO), f.seq)
        assert f.cmd == P.COMMANDS["RESET"] and f.payload == b""
        boot["resets"] += 1
        return P.encode_frame(0x88, struct.pack(P.RESET_REPLY, boot["id"]), f.seq)

    fake_board(master, answer)
    try:
        with BoardLink(os.ttyname(slave)) as link:
            link.hello(total_timeout=3)
            link.reset_state()
            link.reset_state()
            assert boot["resets"] == 2 and link.stats["resets"] == 0
            boot["id"] = 0          # restarted: no HELLO since, so its boot id is 0 ...
            with pytest.raises(BoardReset, match="restarted"):
                link.reset_state()  # ... and the handshake it triggers gets a new one
            assert link.stats["resets"] == 1
    finally:
        GOOD_HELLO.boot_id = 7
        os.close(master)
        os.close(slave)
