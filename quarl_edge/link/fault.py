"""fault://, a pyserial port that wraps another port and damages what passes through it, as
a bad cable, a noisy radio or a board that resets would: for testing the link (runner.py) and
for trying a setup under stress.

    fault://?flip=1e-3&drop=1e-3&dup=1e-3&seed=1&url=socket://127.0.0.1:4321

`url=` comes last and takes the rest of the URL verbatim, so the inner URL may carry its own
query (or be another fault:// URL). The other parameters, all optional:

    flip=P        each byte has one bit flipped with probability P
    drop=P        each byte is lost with probability P
    dup=P         each byte arrives twice with probability P
    delay=P       after a byte, the stream stalls for delay_s seconds with probability P
    delay_s=S     how long a stall lasts (default 0.02)
    dir=D         which bytes the random faults above hit: both (default), rx (board to
                  host) or tx (host to board)
    seed=N        the random faults are drawn per direction from random.Random seeded with N
                  (default 0): the same bytes get the same faults
    inject=HEX    bytes inserted into the board's stream just before its first byte (noise at
                  boot, a banner)
    drop_rx=I,J   drop these bytes of the board's stream (0-based indices since opening)
    cut=N         after the host's N-th write, nothing passes either way: a cut cable
    reset_at=N,M  reset the board just before the host's N-th, M-th, ... write reaches it
    reset=HANDLE  how to reset it: signal:PID (SIGUSR1; the host firmware and the linux agent
                  restart from scratch on it) or qemu-monitor:PATH (QEMU's human monitor socket,
                  which `quarl-edge flash` prints: `system_reset`)

The runner writes each request frame with one write(), so N counts requests (and the zeros a
handshake may send). `counts` holds what was injected so far.
"""
from __future__ import annotations

import collections
import os
import random
import signal
import socket
import time
from urllib.parse import parse_qsl

import serial
from serial.serialutil import PortNotOpenError, SerialBase, SerialException

SCHEME = "fault://"
RESET_SETTLE_S = 0.05      # after a reset: let the board go down before bytes reach it
MONITOR_TIMEOUT_S = 5.0
PUMP_S = 0.005             # the inner port's read timeout while we wait for bytes


def parse_url(url: str) -> tuple[dict[str, str], str]:
    """('fault://?a=1&url=INNER') -> ({'a': '1'}, 'INNER'); a malformed one is a ValueError."""
    if not url.startswith(SCHEME):
        raise ValueError(f"not a {SCHEME} URL: {url!r}")
    body = url[len(SCHEME):].lstrip("?")
    at = body.find("url=")
    if at < 0 or (at > 0 and body[at - 1] != "&") or not body[at + 4:]:
        raise ValueError(f"{url!r} names no inner port: end it with url=<the port to wrap>")
    params = dict(parse_qsl(body[:at].rstrip("&"), keep_blank_values=True, strict_parsing=False))
    return params, body[at + 4:]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


class Faults:
    """The settings of one fault:// port, checked."""

    KEYS = {"flip", "drop", "dup", "delay", "delay_s", "dir", "seed", "inject", "drop_rx", "cut",
            "reset_at", "reset"}

    def __init__(self, params: dict[str, str]):
        unknown = set(params) - self.KEYS
        if unknown:
            raise ValueError(f"unknown fault:// parameter(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(self.KEYS))}")
        rate = {k: float(params.get(k, 0)) for k in ("flip", "drop", "dup", "delay")}
        for k, v in rate.items():
            if not 0 <= v <= 1:
                raise ValueError(f"fault:// {k}={v} is not a probability in [0, 1]")
        if rate["flip"] + rate["drop"] + rate["dup"] > 1:
            raise ValueError("fault:// flip + drop + dup must not exceed 1")
        self.flip, self.drop, self.dup, self.delay = (rate[k] for k in ("flip", "drop", "dup", "delay"))
        self.delay_s = float(params.get("delay_s", 0.02))
        self.dir = params.get("dir", "both")
        if self.dir not in ("both", "rx", "tx"):
            raise ValueError(f"fault:// dir={self.dir}: use both, rx or tx")
        self.seed = int(params.get("seed", 0))
        self.inject = bytes.fromhex(params.get("inject", ""))
        self.drop_rx = set(_ints(params.get("drop_rx", "")))
        self.cut = int(params["cut"]) if params.get("cut") else None
        self.reset_at = set(_ints(params.get("reset_at", "")))
        self.reset = params.get("reset")
        if self.reset_at and not self.reset:
            raise ValueError("fault:// reset_at needs reset=signal:PID or reset=qemu-monitor:PATH")
        if self.reset and not self.reset.startswith(("signal:", "qemu-monitor:")):
            raise ValueError(f"fault:// reset={self.reset}: use signal:PID or qemu-monitor:PATH")


def reset_board(handle: str) -> None:
    """Reset the board that `handle` names (see the module docstring)."""
    kind, _, where = handle.partition(":")
    if kind == "signal":
        try:
            os.kill(int(where), signal.SIGUSR1)
        except (OSError, ValueError) as e:
            raise SerialException(f"fault://: cannot reset the board (signal to {where}): {e}")
    else:   # qemu-monitor: QEMU's human monitor, which prints "(qemu) " when it is ready
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(MONITOR_TIMEOUT_S)
                s.connect(where)
                _until_prompt(s)
                s.sendall(b"system_reset\n")
                _until_prompt(s)
        except OSError as e:
            raise SerialException(f"fault://: cannot reset the board through QEMU's monitor "
                                  f"{where}: {e}")
    time.sleep(RESET_SETTLE_S)


def _until_prompt(s: socket.socket) -> None:
    seen = b""
    while not seen.endswith(b"(qemu) "):
        chunk = s.recv(4096)
        if not chunk:
            raise OSError("the monitor closed")
        seen += chunk


class Serial(SerialBase):
    """The fault:// port (pyserial finds it as quarl_edge.link.urlhandler.protocol_fault)."""

    def __init__(self, *args, **kwargs):
        self.inner = None
        self.faults: Faults | None = None
        self.counts = collections.Counter()
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------------- open / close
    def open(self):
        if self.is_open:
            raise SerialException("Port is already open.")
        if self._port is None:
            raise SerialException("Port must be configured before it can be used.")
        try:
            params, inner_url = parse_url(self.portstr)
            self.faults = Faults(params)
        except ValueError as e:
            raise SerialException(str(e)) from None
        f = self.faults
        self._rng = {d: random.Random(f"{f.seed}:{d}") for d in ("rx", "tx")}
        self._rx = collections.deque()     # [release time, bytearray] segments, in order
        self._rx_seen = 0                  # bytes read from the inner port
        self._writes = 0
        self._injected = not f.inject
        self._cut = False
        self.inner = serial.serial_for_url(inner_url, baudrate=self.baudrate, timeout=PUMP_S,
                                           write_timeout=self._write_timeout)
        self.is_open = True

    def close(self):
        if self.inner is not None:
            self.inner.close()
            self.inner = None
        self.is_open = False

    def _reconfigure_port(self):
        if self.inner is not None:
            self.inner.baudrate = self.baudrate

    def from_url(self, url):   # pyserial's hook; open() parses the URL
        return url

    # ----------------------------------------------------------------------- faults
    def _damage(self, direction: str, data: bytes, now: float) -> list[tuple[float, bytes]]:
        """Apply the random faults to bytes going one way: [(time they may pass, bytes)]."""
        f = self.faults
        if f.dir not in ("both", direction) or not (f.flip or f.drop or f.dup or f.delay):
            return [(now, data)]
        rng, pieces, cur, t = self._rng[direction], [], bytearray(), now
        for b in data:
            u = rng.random()
            if u < f.flip:
                cur.append(b ^ (1 << rng.randrange(8)))
                self.counts["flipped"] += 1
            elif u < f.flip + f.drop:
                self.counts["dropped"] += 1
            elif u < f.flip + f.drop + f.dup:
                cur += bytes([b, b])
                self.counts["duplicated"] += 1
            else:
                cur.append(b)
            if f.delay and rng.random() < f.delay:
                pieces.append((t, bytes(cur)))
                cur, t = bytearray(), t + f.delay_s
                self.counts["delayed"] += 1
        pieces.append((t, bytes(cur)))
        return pieces

    def _pump(self) -> None:
        """Take what the inner port has (waiting up to PUMP_S for it) into the damaged queue."""
        try:
            data = self.inner.read(max(1, self.inner.in_waiting))
        except SerialException:
            if self._cut:
                return
            raise
        if not data or self._cut:
            return
        f = self.faults
        if f.drop_rx:
            kept = bytes(b for i, b in enumerate(data, self._rx_seen) if i not in f.drop_rx)
            self.counts["dropped"] += len(data) - len(kept)
        else:
            kept = data
        self._rx_seen += len(data)
        if not self._injected:
            kept, self._injected = f.inject + kept, True
            self.counts["injected"] += len(f.inject)
        now = time.monotonic()
        start = max([now] + [t for t, _ in self._rx])     # a stall holds back what follows
        for t, piece in self._damage("rx", kept, start):
            self._rx.append([t, bytearray(piece)])

    def _released(self, limit: int) -> bytes:
        out, now = bytearray(), time.monotonic()
        while self._rx and self._rx[0][0] <= now and len(out) < limit:
            seg = self._rx[0][1]
            take = limit - len(out)
            out += seg[:take]
            del seg[:take]
            if not seg:
                self._rx.popleft()
        return bytes(out)

    # ------------------------------------------------------------------- the port API
    @property
    def in_waiting(self):
        if not self.is_open:
            raise PortNotOpenError()
        if self.inner.in_waiting:
            self._pump()
        now = time.monotonic()
        n = 0
        for t, seg in self._rx:
            if t > now:
                break
            n += len(seg)
        return n

    def read(self, size=1):
        if not self.is_open:
            raise PortNotOpenError()
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        out = bytearray()
        while True:
            out += self._released(size - len(out))
            if len(out) >= size or (deadline is not None and time.monotonic() >= deadline):
                return bytes(out)
            self._pump()

    def write(self, data):
        if not self.is_open:
            raise PortNotOpenError()
        data = bytes(data)
        self._writes += 1
        f = self.faults
        if f.cut is not None and self._writes > f.cut:
            if not self._cut:
                self.counts["cut"] += 1
            self._cut = True
        if self._cut:
            self._rx.clear()
            return len(data)
        if self._writes in f.reset_at:
            reset_board(f.reset)
            self.counts["resets"] += 1
        for t, piece in self._damage("tx", data, time.monotonic()):
            pause = t - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if piece:
                self.inner.write(piece)
        return len(data)

    def flush(self):
        if self.inner is not None:
            self.inner.flush()

    def reset_input_buffer(self):
        if not self.is_open:
            raise PortNotOpenError()
        self.inner.reset_input_buffer()
        self._rx.clear()

    def reset_output_buffer(self):
        if not self.is_open:
            raise PortNotOpenError()
        self.inner.reset_output_buffer()

    # modem lines: none to fake
    def _update_dtr_state(self):
        pass

    def _update_rts_state(self):
        pass

    def _update_break_state(self):
        pass
