"""The serial runner: talks the harness protocol (docs/protocol.md) to a board over pyserial.

A port is anything pyserial's serial_for_url() opens: a device path (/dev/ttyACM0, a pty) or a
URL (socket://127.0.0.1:PORT, loop://). One `command()` sends a frame and waits for its reply;
error frames become ProtocolError with the error's name."""
from __future__ import annotations

import os
import queue
import struct
import sys
import time
from dataclasses import dataclass

import numpy as np
import serial

from . import protocol as P
from ..errors import BoardError, ProtocolError

HELLO_TIMEOUT_S = 0.25     # per HELLO attempt (a pty answers in < 1 ms; QEMU's pty can take ~1 s)
HANDSHAKE_S = 10.0         # total time to wait for a board to answer HELLO
REPLY_TIMEOUT_S = 5.0      # one command's reply
BYTES_PER_S = 10_000       # extra timeout per payload byte (115200 baud ~ 11.5 kB/s)
WRITE_TIMEOUT_S = 2.0      # a board that stops reading must not block us forever


@dataclass
class BenchStats:
    n: int
    min: int
    max: int
    mean: float


@dataclass
class MemStats:
    flash_bytes: int
    ram_bytes: int
    stack_used: int
    stack_size: int
    arena_bytes: int


class BoardLink:
    """An open connection to a harness. Use as a context manager; call hello() first."""

    def __init__(self, url: str, baudrate: int = 115200, trace: bool = False, alive=None):
        try:
            self.ser = serial.serial_for_url(url, baudrate=baudrate, timeout=0.05,
                                             write_timeout=WRITE_TIMEOUT_S)
        except (serial.SerialException, ValueError) as e:
            raise BoardError(f"cannot open serial port {url}: {e}") from None
        self.url = url
        self.trace = trace
        self.alive = alive or (lambda: True)   # tells whether the board process still runs
        self.decoder = P.FrameDecoder()
        self.seq = 0
        self.info: P.Hello | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.ser.close()

    # ------------------------------------------------------------------------ framing
    def _send(self, cmd: int, payload: bytes) -> int:
        self.seq = (self.seq + 1) & 0xFF
        frame = P.encode_frame(cmd, payload, self.seq)
        if self.trace:
            print(f"[trace {time.monotonic():.4f}] -> {frame.hex(' ')}", file=sys.stderr)
        self._write(frame)
        return self.seq

    def _write(self, data: bytes) -> None:
        try:
            self.ser.write(data)
            self.ser.flush()
        except (serial.SerialTimeoutException, queue.Full):  # loop:// raises queue.Full
            raise BoardError(f"the board on {self.url} does not take our bytes "
                             f"(write timed out after {WRITE_TIMEOUT_S} s)") from None
        except serial.SerialException as e:
            raise BoardError(f"writing to {self.url} failed: {e}") from None

    def _read_frames(self) -> list[P.Frame]:
        try:
            data = self.ser.read(max(1, self.ser.in_waiting))
        except serial.SerialException as e:   # e.g. an emulator's TCP socket closed
            raise BoardError(f"the board stopped: reading from {self.url} failed: {e}") from None
        if data and self.trace:
            print(f"[trace {time.monotonic():.4f}] <- {data.hex(' ')}", file=sys.stderr)
        return self.decoder.feed(data) if data else []

    def command(self, name: str, payload: bytes = b"", timeout: float | None = None) -> bytes:
        """Send one command and return its reply payload; error frames raise ProtocolError."""
        cmd = P.COMMANDS[name]
        timeout = timeout or REPLY_TIMEOUT_S + len(payload) / BYTES_PER_S
        seq = self._send(cmd, payload)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for f in self._read_frames():
                if f.seq != seq:
                    continue            # a late reply to an earlier, timed-out command
                if f.is_error:
                    err, _, msg = f.error()
                    raise ProtocolError(f"board answered {name} with {err}: {msg}")
                if f.cmd == cmd | P.REPLY_BIT:
                    return f.payload
            if not self.alive():
                raise BoardError(f"the board stopped while waiting for {name}")
        raise BoardError(f"no reply to {name} from {self.url} within {timeout:.1f} s")

    # ---------------------------------------------------------------------- commands
    def hello(self, total_timeout: float = HANDSHAKE_S) -> P.Hello:
        """Handshake: HELLO with a random nonce, retried until the board echoes it."""
        deadline = time.monotonic() + total_timeout
        attempts = 0
        while time.monotonic() < deadline:
            if attempts == 1:   # unanswered once: complete any frame a false sync started
                try:
                    self._write(P.resync_bytes())
                except BoardError:
                    pass        # a board that reads nothing will not answer HELLO either
            attempts += 1
            if not self.alive():
                raise BoardError("the board stopped before answering HELLO")
            nonce = struct.unpack("<I", os.urandom(4))[0]
            try:
                reply = self.command("HELLO", struct.pack("<I", nonce), timeout=HELLO_TIMEOUT_S)
            except ProtocolError:
                continue                # e.g. BAD_CRC on bytes left from before we opened
            except BoardError:
                if not self.alive():
                    raise
                continue
            info = P.parse_hello(reply)
            if info.nonce != nonce:
                continue
            if info.version != P.VERSION:
                raise ProtocolError(f"board speaks protocol v{info.version}; we speak v{P.VERSION}")
            self.info = info
            return info
        raise BoardError(f"no HELLO answer from {self.url} within {total_timeout:.0f} s: is the "
                         "firmware running, and is this its port?")

    def infer(self, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
        """Run one inference; returns (outputs, cost in the board's unit)."""
        assert self.info is not None, "call hello() first"
        specs = self.info.inputs
        if len(inputs) != len(specs):
            raise BoardError(f"model has {len(specs)} inputs, got {len(inputs)}")
        payload = b"".join(np.ascontiguousarray(x, dtype=s.np_dtype).tobytes()
                           for x, s in zip(inputs, specs))
        reply = self.command("INFER", payload)
        (cost,) = struct.unpack_from(P.COST_FMT, reply)
        outs, pos = [], struct.calcsize(P.COST_FMT)
        for s in self.info.outputs:
            outs.append(np.frombuffer(reply, dtype=s.np_dtype, count=s.nbytes // np.dtype(s.np_dtype).itemsize,
                                      offset=pos).reshape(s.shape).copy())
            pos += s.nbytes
        if pos != len(reply):
            raise ProtocolError(f"INFER reply has {len(reply)} bytes, expected {pos}")
        return outs, cost

    def bench(self, n: int) -> BenchStats:
        reply = self.command("BENCH", struct.pack("<H", n), timeout=REPLY_TIMEOUT_S + n * 0.05)
        cnt, lo, hi, total = struct.unpack(P.BENCH_REPLY, reply)
        return BenchStats(cnt, lo, hi, total / max(cnt, 1))

    def mem(self) -> MemStats:
        return MemStats(*struct.unpack(P.MEM_REPLY, self.command("MEM")))

    def echo(self, data: bytes) -> bytes:
        return self.command("ECHO", data)


def latency_summary(costs: list[int], unit: str) -> dict:
    arr = np.asarray(costs, dtype=np.float64)
    if arr.size == 0:
        return {"unit": unit, "median": None, "p99": None, "n": 0}
    return {"unit": unit, "median": float(np.median(arr)), "p99": float(np.percentile(arr, 99)),
            "n": int(arr.size)}
