"""The host harness of the live tests (tests/test_harness*.py, test_stream.py, test_infer_z.py):
firmware/core + the host port + the fixture model (tests/fixtures/identity_model.c) built with gcc,
and `Board`, a running harness behind a pty that a test talks to through pyserial (see
test_harness.py's docstring)."""
from __future__ import annotations

import os
import queue
import random
import struct
import subprocess
import tempfile
import threading
import time
import tty
from pathlib import Path

import serial

from helpers_once import once_per_run
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


def shared_builds(tmp_path_factory, worker_id) -> dict:
    """The plain and the sanitized harness, built once per test run (helpers_once): the
    modules test_harness.py and test_harness_robustness.py share them."""
    def make(d: Path):
        t0 = time.monotonic()
        build(d / "harness")
        build(d / "harness_san", SANITIZE)
        print(f"built both harnesses in {time.monotonic() - t0:.2f} s")
    d = once_per_run(tmp_path_factory, worker_id, "harness-builds", make)
    return {"plain": (d / "harness", {}), "sanitized": (d / "harness_san", SAN_ENV)}


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


def infer(b: Board, values) -> tuple[int, list[float], float]:
    f = b.request(0x02, struct.pack("<4b", *values))
    assert f.cmd == 0x82, f
    assert len(f.payload) == 4 + 16 + 4
    cost, *out, total = struct.unpack("<I4ff", f.payload)
    return cost, out, total
