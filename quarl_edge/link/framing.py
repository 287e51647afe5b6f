"""The byte side of a link to a board: the open pyserial port, frames written to it, frames read
back from it through a FrameDecoder that takes only what a board may send, and the counters of
what was garbled on the way. link/runner.py's BoardLink builds the requests, their retries and
the handshake on it (its constants, the retry limits, are there).

A port is anything pyserial's serial_for_url() opens: a device path (/dev/ttyACM0, a pty) or a
URL (socket://127.0.0.1:PORT, loop://, unix:// and our fault-injecting fault://, link/fault.py,
which importing this module registers)."""
from __future__ import annotations

import queue
import struct
import sys
import time

import serial

from . import protocol as P
from ..core.errors import BoardError
from .fault import Serial as FaultPort

# pyserial finds the fault:// handler as quarl_edge.link.urlhandler.protocol_fault
if "quarl_edge.link.urlhandler" not in serial.protocol_handler_packages:
    serial.protocol_handler_packages.append("quarl_edge.link.urlhandler")

WRITE_TIMEOUT_S = 2.0      # a board that stops reading must not block us forever
READ_S = 0.01              # one read's wait: how finely a caller's waits are kept


class FramedPort:
    """An open port to a harness, framed: write bytes, read the frames they complete, count
    what was rejected. Use as a context manager."""

    def __init__(self, url: str, baudrate: int = 115200, trace: bool = False, alive=None):
        try:
            self.ser = serial.serial_for_url(url, baudrate=baudrate, timeout=READ_S,
                                             write_timeout=WRITE_TIMEOUT_S)
        except (serial.SerialException, ValueError) as e:
            raise BoardError(f"cannot open serial port {url}: {e}") from None
        self.url = url
        self.trace = trace
        self.alive = alive or (lambda: True)   # tells whether the board process still runs
        self.seq = 0
        self.info: P.Hello | None = None       # the board's HELLO, once a handshake got it
        # retries: re-sent requests; timeouts: attempts that got no reply in time; bad_frames:
        # frames from the board whose header or CRC failed here; board_errors: error frames
        # saying the board got our request garbled; resyncs: input flushed (handshakes) or a
        # half-received frame given up; resets: board restarts seen; chunks: IN_CHUNK and
        # OUT_CHUNK frames of streamed tensors (each once, however often it was re-sent);
        # restreams: streams resumed where the board said it had the inputs up to, or done again;
        # late_replies: replies that came after their wait (a stall, not a loss), then waited for;
        # coded: inferences whose inputs went zero-run coded (INFER_Z).
        self.stats = {"retries": 0, "timeouts": 0, "bad_frames": 0, "board_errors": 0,
                      "resyncs": 0, "resets": 0, "chunks": 0, "restreams": 0,
                      "late_replies": 0, "coded": 0}
        self._old_version_seq: int | None = None
        self._read_nothing = False     # the last read returned no byte
        self.decoder = self._new_decoder()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.ser.close()

    def report(self) -> dict:
        """`stats`, and on a fault:// port what it injected ("faults")."""
        out = dict(self.stats)
        if isinstance(self.ser, FaultPort):
            out["faults"] = dict(self.ser.counts)
        return out

    # ------------------------------------------------------------------------ framing
    def _reply_limits(self) -> dict[int, int]:
        """Reply command -> the longest payload the board may send with it. Before HELLO: its
        reply and error frames (BoardLink adds every reply's exact size once HELLO is known)."""
        return {P.COMMANDS["HELLO"] | P.REPLY_BIT: P.HELLO_REPLY_MAX, P.CMD_ERROR: P.ERROR_REPLY_MAX}

    def _new_decoder(self) -> P.FrameDecoder:
        """A decoder that takes only what this board may send: this protocol version, reply
        commands, and no reply longer than it can be (_reply_limits)."""
        return P.FrameDecoder(max_payload=0xFFFF, version=P.VERSION, limits=self._reply_limits())

    def _reset_input(self) -> None:
        """Start from a clean slate: drop what the port holds and what the decoder holds."""
        self._absorb_decoder_counts()
        try:
            self.ser.reset_input_buffer()
        except serial.SerialException as e:
            raise BoardError(f"the board stopped: resetting {self.url} failed: {e}") from None
        self.decoder = self._new_decoder()
        self.stats["resyncs"] += 1

    def _absorb_decoder_counts(self) -> None:
        self.stats["bad_frames"] += self.decoder.rejected
        self.decoder.rejected = 0

    def _next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFF
        if self.seq == P.BOOT_SEQ:      # the boot announcement's: never a request's
            self.seq = 1
        return self.seq

    def _write(self, data: bytes) -> None:
        if self.trace:
            print(f"[trace {time.monotonic():.4f}] -> {data.hex(' ')}", file=sys.stderr)
        try:
            self.ser.write(data)
            self.ser.flush()
        except (serial.SerialTimeoutException, queue.Full):  # loop:// raises queue.Full
            raise BoardError(f"the board on {self.url} does not take our bytes "
                             f"(write timed out after {WRITE_TIMEOUT_S} s)") from None
        except serial.SerialException as e:
            raise BoardError(f"writing to {self.url} failed: {e}") from None

    def _bytes_to_read(self, expect: int | None) -> int:
        """How many bytes to ask the port for: the rest of the frame being assembled (its
        header says how long it is), else of the reply expected (`expect`: its whole frame with
        the pad, when its size is known), so a reply is read with one call however many pieces
        it arrives in (an emulated UART sends each byte on its own); else what is waiting."""
        buf = self.decoder.buf
        if buf.startswith(P.SYNC) and len(buf) >= P.HEADER_SIZE:
            frame = P.HEADER_SIZE + (buf[5] | buf[6] << 8) + P.CRC_SIZE + P.PAD_SIZE
            return max(1, frame - len(buf))
        if expect:
            return max(1, expect - len(buf))
        return max(1, self.ser.in_waiting)

    def _read_frames(self, expect: int | None = None) -> list[P.Frame]:
        """The frames completed by one read (which waits at most READ_S)."""
        try:
            data = self.ser.read(self._bytes_to_read(expect))
        except serial.SerialException as e:   # e.g. an emulator's TCP socket closed
            raise BoardError(f"the board stopped: reading from {self.url} failed: {e}") from None
        self._read_nothing = not data
        if not data:
            return []
        if self.trace:
            print(f"[trace {time.monotonic():.4f}] <- {data.hex(' ')}", file=sys.stderr)
        frames = self.decoder.feed(data)
        for code, cmd, seq in self.decoder.errors:   # a header of another protocol version
            if code == 4 and cmd == P.COMMANDS["HELLO"] | P.REPLY_BIT:   # answering HELLO
                self._old_version_seq = seq
        self.decoder.errors.clear()
        return frames

    @staticmethod
    def _is_boot(f: P.Frame) -> bool:
        return (f.cmd == P.COMMANDS["HELLO"] | P.REPLY_BIT and f.seq == P.BOOT_SEQ
                and f.payload[:4] == struct.pack("<I", P.BOOT_NONCE))
