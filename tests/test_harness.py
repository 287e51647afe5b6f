"""The on-device harness (firmware/core) with the host port, end to end.

The harness is built with real gcc from firmware/core + firmware/ports/host + a small real model
(tests/fixtures/identity_model.c) and run the way quarl_edge/targets/launch.py runs the host board: the
process gets the MASTER side of a pseudo-terminal as stdin/stdout, and the test opens the SLAVE
side (a real tty device, raw mode) with pyserial, exactly like a board's serial port. (The other
way round - the harness on the slave - would need pyserial to open a bare master fd, which it
cannot, and would put the line discipline in front of the harness.) The test keeps the slave
open through pyserial for the harness's lifetime: once no one holds the slave, the harness's
read() fails with EIO and it exits, which is how a run ends.

A reader thread drains the port continuously, so the harness never blocks on a full pty buffer
while the test is still writing (hostile inputs can make it answer with many error frames).

Robustness tests also run against a build with -fsanitize=address,undefined (the host port then
uses the normal stack; see firmware/ports/host/port.c) and check its stderr stays clean.
"""
from __future__ import annotations

import os
import queue
import random
import signal
import struct
import subprocess
import tempfile
import threading
import time
import tty
from pathlib import Path

import pytest
import serial
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quarl_edge.link import protocol as P

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "firmware" / "core"
SOURCES = [CORE / "main.c", CORE / "harness.c", CORE / "protocol.c",
           ROOT / "firmware" / "ports" / "host" / "port.c",
           ROOT / "tests" / "fixtures" / "identity_model.c"]
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", f"-I{CORE}",
          '-DQE_BOARD_ID="host"', "-DQE_COST_UNIT=QE_COST_NS"]
# Bind libc symbols at load time: otherwise the dynamic linker's lazy-binding trampoline (which
# saves the whole vector register file, ~3 kB) runs on the harness stack and dominates MEM.
LDFLAGS = ["-Wl,-z,now"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
            "-g"]
SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}

MAX_PAYLOAD = 1024                 # QE_MAX_PAYLOAD's default, which these builds use
STACK_BYTES = 64 * 1024            # QE_HOST_STACK_BYTES's default
REPLY_S = 5.0

# the fixture model (tests/fixtures/identity_model.c)
IN_SCALE, IN_ZP = 0.5, -3
MODEL_HASH = bytes([0x1D, 0xE0, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05])


def dequant(values):
    return [(v - IN_ZP) * IN_SCALE for v in values]


# ---------------------------------------------------------------------------- building
def build(out: Path, extra=()) -> Path:
    cmd = ["gcc", *CFLAGS, *extra, *map(str, SOURCES), *LDFLAGS, "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    d = tmp_path_factory.mktemp("harness")
    t0 = time.monotonic()
    plain = build(d / "harness")
    san = build(d / "harness_san", SANITIZE)
    print(f"built both harnesses in {time.monotonic() - t0:.2f} s")
    return {"plain": (plain, {}), "sanitized": (san, SAN_ENV)}


# ------------------------------------------------------------------------------ the board
class Board:
    """A running host harness behind a pty, with a background reader decoding its frames."""

    def __init__(self, exe: Path, env: dict | None = None):
        master, slave = os.openpty()
        tty.setraw(slave)
        self.port = serial.serial_for_url(os.ttyname(slave), baudrate=115200, timeout=0.02)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([str(exe)], stdin=master, stdout=master, stderr=self.stderr,
                                     close_fds=True, env={**os.environ, **(env or {})})
        os.close(master)     # the child holds the master; pyserial holds the slave
        os.close(slave)
        self.frames: queue.Queue[P.Frame] = queue.Queue()
        self.decoder = P.FrameDecoder()
        self.read_error: Exception | None = None
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.seq = 0
        self.boot = self.frame()   # what the harness sends first: its boot announcement

    def expect_boot(self) -> P.Hello:
        """The next frame is a boot announcement (docs/protocol.md, "Retries and resets")."""
        f = self.frame()
        assert f.cmd == 0x81 and f.seq == P.BOOT_SEQ, f
        h = P.parse_hello(f.payload)
        assert h.is_boot_announcement and h.boot_id == 0, h
        return h

    def _read(self):
        while not self._stop.is_set():
            try:
                data = self.port.read(max(1, self.port.in_waiting))
            except (serial.SerialException, OSError) as e:   # e.g. the harness died
                if not self._stop.is_set():
                    self.read_error = e
                return
            for f in self.decoder.feed(data):
                self.frames.put(f)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, data: bytes):
        self.port.write(data)
        self.port.flush()

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFF
        return self.seq

    def frame(self, timeout=REPLY_S) -> P.Frame:
        try:
            return self.frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no frame within {timeout} s (alive={self.alive()}, "
                                 f"reader error={self.read_error}, stderr={self.stderr_text()!r})")

    def request(self, cmd: int, payload: bytes = b"", version: int = P.VERSION) -> P.Frame:
        """Send one frame and return the next frame the harness sends (strict: nothing else may
        arrive in between)."""
        seq = self.next_seq()
        self.send(P.encode_frame(cmd, payload, seq, version=version))
        f = self.frame()
        assert f.seq == seq, f"reply seq {f.seq} != request seq {seq}: {f}"
        return f

    def hello(self, skip_others=False) -> P.Hello:
        nonce = random.getrandbits(32)
        seq = self.next_seq()
        self.send(P.encode_frame(P.COMMANDS["HELLO"], struct.pack("<I", nonce), seq))
        deadline = time.monotonic() + REPLY_S
        while True:
            f = self.frame(max(0.01, deadline - time.monotonic()))
            if f.cmd == 0x81 and f.seq == seq and P.parse_hello(f.payload).nonce == nonce:
                return P.parse_hello(f.payload)
            assert skip_others, f"expected the HELLO reply, got {f}"

    def flush(self):
        """Zero bytes enough to complete any candidate frame the harness may be assembling from
        earlier bytes: after them the parser is back to scanning for a sync. (A false sync in
        garbage can announce up to max_payload bytes; zeros contain no sync.)"""
        self.send(bytes(P.HEADER_SIZE + MAX_PAYLOAD + P.CRC_SIZE))

    def drain(self, quiet_s=0.05) -> list[P.Frame]:
        out = []
        while True:
            try:
                out.append(self.frames.get(timeout=quiet_s))
            except queue.Empty:
                return out

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close(self) -> int:
        """Close the port (the harness then sees EOF/EIO and exits); return its exit code."""
        self._stop.set()
        self._reader.join(timeout=2)
        self.port.close()
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the harness did not exit after its port was closed")
        return code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None and not self._stop.is_set():
            self.close()
        self.stderr.close()


def assert_clean_exit(b: Board):
    """The harness is still running, exits with 0 when the port closes, and (for the sanitized
    build) the sanitizers reported nothing."""
    assert b.alive(), f"harness died: {b.proc.returncode}: {b.stderr_text()}"
    code = b.close()
    err = b.stderr_text()
    assert code == 0, f"exit code {code}: {err}"
    assert "AddressSanitizer" not in err and "runtime error" not in err, err


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


# ---------------------------------------------------------------------------- commands
def test_hello_reports_board_and_model(board):
    h = board.hello()
    assert (h.version, h.cost_unit, h.clock_hz, h.max_payload) == (P.VERSION, "ns", 0, MAX_PAYLOAD)
    assert (h.board_id, h.model_name, h.model_hash, h.arena_bytes) == ("host", "identity",
                                                                       MODEL_HASH, 20)
    assert h.inputs == [P.TensorSpec("int8", (1, 4), 0.5, -3)]
    assert h.outputs == [P.TensorSpec("float32", (1, 4), 0.0, 0),
                         P.TensorSpec("float32", (1, 1), 0.0, 0)]
    assert_clean_exit(board)


def test_hello_echoes_each_nonce_and_seq(plain):
    for _ in range(20):
        nonce = random.getrandbits(32)
        f = plain.request(0x01, struct.pack("<I", nonce))
        assert f.cmd == 0x81 and P.parse_hello(f.payload).nonce == nonce


def infer(b: Board, values) -> tuple[int, list[float], float]:
    f = b.request(0x02, struct.pack("<4b", *values))
    assert f.cmd == 0x82, f
    assert len(f.payload) == 4 + 16 + 4
    cost, *out, total = struct.unpack("<I4ff", f.payload)
    return cost, out, total


def test_infer_computes_the_model(plain):
    x = [-128, -3, 0, 127]
    cost, out, total = infer(plain, x)
    assert out == dequant(x) == [-62.5, 0.0, 1.5, 65.0]
    assert total == -62.5
    assert 0 < cost < 10**8          # ns: the two clock reads alone take some
    cost, out, total = infer(plain, [1, 2, 3, 4])
    assert out == dequant([1, 2, 3, 4]) and total == -62.5 + 2.0


@given(st.lists(st.integers(-128, 127), min_size=4, max_size=4))
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_infer_random_inputs(plain, x):
    _, out, _ = infer(plain, x)
    assert out == dequant(x)


def test_bench_reruns_the_last_input(plain):
    """The model writes its output over its input (in-place arena) and keeps a running sum of
    output[0]: after INFER x, BENCH n, INFER x the sum is (n + 2) * x's output[0] only if BENCH
    restored the input before every run."""
    x = [-128, 5, 6, 7]
    _, out, total = infer(plain, x)
    n = 7
    f = plain.request(0x03, struct.pack("<H", n))
    assert f.cmd == 0x83
    cnt, lo, hi, total_cost = struct.unpack(P.BENCH_REPLY, f.payload)
    assert cnt == n and 0 < lo <= total_cost / n <= hi < 10**8
    _, _, total = infer(plain, x)
    assert total == (n + 2) * out[0]


def test_bench_before_any_infer_runs_on_zeros(plain):
    f = plain.request(0x03, struct.pack("<H", 3))
    assert f.cmd == 0x83 and struct.unpack(P.BENCH_REPLY, f.payload)[0] == 3
    _, _, total = infer(plain, [9, 9, 9, 9])
    assert total == 3 * dequant([0])[0] + dequant([9])[0]


def test_bench_statistics_many_runs(plain):
    infer(plain, [1, 2, 3, 4])
    f = plain.request(0x03, struct.pack("<H", 65535))
    cnt, lo, hi, total = struct.unpack(P.BENCH_REPLY, f.payload)
    assert cnt == 65535 and lo <= total / cnt <= hi and lo < hi   # timing noise over 65535 runs


def test_mem_reports_a_measured_stack(plain):
    infer(plain, [1, 2, 3, 4])
    f = plain.request(0x04)
    assert f.cmd == 0x84
    flash, ram, used, size, arena = struct.unpack(P.MEM_REPLY, f.payload)
    assert (flash, ram, size, arena) == (0, 0, STACK_BYTES, 20)
    # harness + frame layer + model + read/write/clock_gettime: a few hundred bytes
    assert 64 < used < 4096, used


def test_mem_on_sanitized_build_says_it_cannot_tell(builds):
    exe, env = builds["sanitized"]
    with Board(exe, env) as b:
        flash, ram, used, size, arena = struct.unpack(P.MEM_REPLY, b.request(0x04).payload)
        assert (used, size, arena) == (0, 0, 20)
        assert_clean_exit(b)


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 4])
def test_echo_roundtrip(board, payload):
    f = board.request(0x05, payload)
    assert (f.cmd, f.payload) == (0x85, payload)
    assert_clean_exit(board)


def test_harness_exits_cleanly_on_pipe_eof(builds):
    """Pipes instead of a pty: replies are written, then end of input ends the process."""
    exe, env = builds["plain"]
    req = P.encode_frame(0x05, b"over a pipe", 1) + P.encode_frame(0x01, b"\1\2\3\4", 2)
    p = subprocess.run([str(exe)], input=req, capture_output=True, timeout=10,
                       env={**os.environ, **env})
    assert p.returncode == 0, p.stderr
    frames = P.FrameDecoder().feed(p.stdout)
    assert [(f.cmd, f.seq) for f in frames] == [(0x81, P.BOOT_SEQ), (0x85, 1), (0x81, 2)]
    assert frames[1].payload == b"over a pipe"


# ----------------------------------------------------------------- retries and resets
def test_boot_announcement_then_the_first_hello_sets_the_boot_id(plain):
    boot = P.parse_hello(plain.boot.payload)
    assert plain.boot.seq == P.BOOT_SEQ and boot.is_boot_announcement and boot.boot_id == 0
    assert (boot.board_id, boot.model_hash) == ("host", MODEL_HASH)
    nonces = [random.getrandbits(32) | 1 for _ in range(3)]
    ids = [P.parse_hello(plain.request(0x01, struct.pack("<I", n)).payload).boot_id for n in nonces]
    assert ids == [nonces[0]] * 3       # the first HELLO's nonce, for as long as it runs


def test_a_retried_infer_is_answered_again_not_run_again(plain):
    """The model keeps a running sum of its output over every invoke: a retry (same seq, same
    bytes) gets the identical reply, cost included, and the sum shows the model ran once."""
    x = struct.pack("<4b", 10, 0, 0, 0)
    seq = plain.next_seq()
    plain.send(P.encode_frame(0x02, x, seq))
    first = plain.frame()
    plain.send(P.encode_frame(0x02, x, seq))
    again = plain.frame()
    assert first.seq == again.seq == seq and first.payload == again.payload
    _, out, total = infer(plain, [10, 0, 0, 0])
    assert total == 2 * out[0]          # two invokes, not three
    # the same seq with other bytes is a new request; so is anything after a HELLO
    plain.send(P.encode_frame(0x02, struct.pack("<4b", 11, 0, 0, 0), plain.seq))
    assert struct.unpack("<I4ff", plain.frame().payload)[-1] == 2 * out[0] + dequant([11])[0]
    plain.hello()
    plain.send(P.encode_frame(0x02, struct.pack("<4b", 11, 0, 0, 0), plain.seq - 1))
    assert struct.unpack("<I4ff", plain.frame().payload)[-1] == 2 * out[0] + 2 * dequant([11])[0]


def test_a_retried_bench_is_answered_again_not_run_again(plain):
    infer(plain, [1, 2, 3, 4])
    seq = plain.next_seq()
    plain.send(P.encode_frame(0x03, struct.pack("<H", 5), seq))
    first = plain.frame()
    plain.send(P.encode_frame(0x03, struct.pack("<H", 5), seq))
    assert plain.frame().payload == first.payload
    _, out, total = infer(plain, [1, 2, 3, 4])
    assert total == 7 * out[0]          # INFER, 5 BENCH runs, INFER: the retry ran nothing


def reset(b: Board, seq: int | None = None) -> int:
    """RESET; returns the boot id its reply carries."""
    seq = b.next_seq() if seq is None else seq
    b.send(P.encode_frame(P.COMMANDS["RESET"], b"", seq))
    f = b.frame()
    assert (f.cmd, f.seq) == (P.COMMANDS["RESET"] | P.REPLY_BIT, seq), f
    (boot,) = struct.unpack(P.RESET_REPLY, f.payload)
    return boot


def test_reset_zeroes_the_model_state_and_names_the_boot_id(plain):
    """The fixture's running sum is its state (as an LSTM's h and c): RESET zeroes it, the next
    INFER's sum starts again; the reply is the boot id of the first HELLO (0 before any)."""
    assert reset(plain) == 0                                   # no HELLO yet since boot
    boot = plain.hello().boot_id
    infer(plain, [7, 0, 0, 0])
    infer(plain, [7, 0, 0, 0])
    assert infer(plain, [7, 0, 0, 0])[2] == 3 * dequant([7])[0]
    assert reset(plain) == boot
    _, out, total = infer(plain, [9, 0, 0, 0])
    assert total == out[0] == dequant([9])[0]


def test_a_retried_reset_leaves_the_state_zero_and_an_infer_retry_still_replays(plain):
    """RESET has no effect to repeat: its retry (same seq) is answered again and the state is
    still zero. An INFER retry after it is answered from the first attempt and the model does
    not run again, so the state moves on once per step, not once per attempt."""
    boot = plain.hello().boot_id
    infer(plain, [5, 0, 0, 0])
    seq = plain.next_seq()
    assert reset(plain, seq) == reset(plain, seq) == boot
    x = struct.pack("<4b", 5, 0, 0, 0)
    seq = plain.next_seq()
    plain.send(P.encode_frame(0x02, x, seq))
    first = plain.frame()
    plain.send(P.encode_frame(0x02, x, seq))
    assert plain.frame().payload == first.payload
    assert struct.unpack("<I4ff", first.payload)[-1] == dequant([5])[0]
    assert infer(plain, [5, 0, 0, 0])[2] == 2 * dequant([5])[0]   # two runs since the RESET


@given(st.lists(st.tuples(st.sampled_from(["infer", "reset"]), st.integers(-20, 20),
                          st.integers(0, 2)), min_size=1, max_size=12))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_reset_and_infer_with_retries_keep_the_state_of_a_model_run_once_per_step(plain, steps):
    """Any sequence of INFERs and RESETs, each sent 1 + `retries` times with its sequence
    number (a host whose replies got lost): the state (the fixture's running sum) is the sum of
    the INFERs since the last RESET, each counted once, as if no request had been repeated."""
    boot = plain.hello().boot_id
    assert reset(plain) == boot
    expected = 0.0
    for what, x, retries in steps:
        seq = plain.next_seq()
        if what == "reset":
            for _ in range(1 + retries):
                assert reset(plain, seq) == boot
            expected = 0.0
            continue
        frame = P.encode_frame(0x02, struct.pack("<4b", x, 0, 0, 0), seq)
        replies = []
        for _ in range(1 + retries):
            plain.send(frame)
            replies.append(plain.frame().payload)
        expected += dequant([x])[0]
        assert all(r == replies[0] for r in replies)
        assert struct.unpack("<I4ff", replies[0])[-1] == pytest.approx(expected, abs=1e-4)


def test_sigusr1_restarts_the_host_board_which_announces_it(plain):
    """A reset from outside (the fault link's reset=signal:PID): the same process restarts
    from scratch on the same pty, announces its boot and takes the next HELLO's nonce as its
    new boot id; the model's state is gone (its running sum starts again)."""
    old = plain.hello().boot_id
    infer(plain, [20, 0, 0, 0])
    pid = plain.proc.pid
    os.kill(pid, signal.SIGUSR1)
    plain.expect_boot()
    new = plain.hello()
    assert new.boot_id != old and plain.proc.pid == pid and plain.alive()
    _, out, total = infer(plain, [20, 0, 0, 0])
    assert total == out[0]
    assert_clean_exit(plain)


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
