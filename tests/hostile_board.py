"""A hostile board for issue 36: the linux agent (quarl_edge/link/agent.py, an honest board that
runs the .tflite with tflite-runtime) on a pty of its own, lying in one way (`MODES`).

    python tests/hostile_board.py MODEL.tflite MODE            # on a pty of its own
    python tests/hostile_board.py MODEL.tflite MODE --stdio    # on its stdin/stdout

prints the pty's device (the board's serial port, for `--port`) on its first line of stdout,
then serves until the host closes the port; with --stdio it serves on its stdin and stdout (a
`pty` board's program: the host runs it behind a pty, as the host firmware). Its MEM answers what a 16 KiB board would (the
agent's own would be its process's RSS): see tests/test_hostile_board.py's board file.
"""
from __future__ import annotations

import os
import struct
import sys
import time
import tty
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quarl_edge.link import protocol as P            # noqa: E402
from quarl_edge.link.agent import Agent, _error, _reply   # noqa: E402

ESC = "\x1b[2J\x1b]0;owned\x07\r\b\x7f"     # clear screen, set title, CR, BS, DEL (ASCII: the wire's)
HONEST_MEM = (20_000, 4_000, 800, 4_096, 0)   # flash, static RAM, stack used, stack size, arena


class Hostile(Agent):
    def __init__(self, model: Path, mode: str):
        super().__init__(model, board_id="hostile")
        self.mode = mode
        self.flooding: str | None = None    # a flood mode, once it started

    # -------------------------------------------------------------------- HELLO lies
    def hello_reply(self, seq: int, nonce: int) -> bytes:
        ins = [self.spec(d) for d in self.inputs]
        outs = [self.spec(d) for d in self.outputs]
        h = P.Hello(nonce, P.VERSION, "ns", 0, 4096, self.board_id,
                    self.model_path.stem, self.model_hash, 0, ins, outs, self.boot_id)
        m = self.mode
        if m == "hello-shape":
            ins[0].shape = (1, 5)
        elif m == "hello-dtype":
            ins[0].dtype = "int32"
        elif m == "hello-scale":         # (a model whose first input is quantized)
            ins[0].scale *= 2
        elif m == "hello-zero-point":
            ins[0].zero_point += 1
        elif m == "hello-outputs":
            outs.append(outs[0])
        elif m == "hello-unit":
            h.cost_unit = "cycles"
        elif m == "hello-payload":
            h.max_payload = 8
        elif m == "hello-arena":
            h.arena_bytes = 1 << 30
        elif m == "hello-hash":
            h.model_hash, h.model_name = b"\x13" * 8, f"evil{ESC}model"
        elif m == "hello-changes" and self.boot_id and nonce != self.boot_id:
            outs[0].shape = (1, 3)      # the second handshake: another output, same boot id
        return P.encode_frame(P.COMMANDS["HELLO"] | P.REPLY_BIT, P.pack_hello(h), seq)

    # ------------------------------------------------------------ MEM, INFER, BENCH lies
    def _mem(self, f: P.Frame) -> bytes:
        flash, ram, used, size, arena = HONEST_MEM
        if self.mode == "mem-stack":
            used = size = 0xFFFF0000          # a 4 GB stack
        elif self.mode == "mem-flash":
            flash = 1 << 20
        elif self.mode == "mem-used":
            used = size + 1
        elif self.mode == "mem-arena":
            arena = 12_000
        return _reply(f, struct.pack(P.MEM_REPLY, flash, ram, used, size, arena))

    def _infer(self, f: P.Frame) -> bytes:
        reply = super()._infer(f)
        m = self.mode
        if m.endswith("-after-hello"):      # the session is up: from now on, no end of bytes
            self.flooding = m[:-len("-after-hello")]
            return b""
        if m == "infer-cost":
            frame = P.FrameDecoder().feed(reply)[0]
            return _reply(f, struct.pack(P.COST_FMT, 0xFFFFFFF0) + frame.payload[4:])
        if m == "infer-short":
            frame = P.FrameDecoder().feed(reply)[0]
            return _reply(f, frame.payload[:-1])
        if m == "boot-storm":             # every INFER answered with a boot announcement
            return self.announcement()
        if m == "infer-error":
            return _error(f, 3, f"no such thing{ESC}")
        if m == "infer-changes":
            # another HELLO mid-session is asked for by a boot announcement; then answered
            # with other specs (hello-changes)
            self.mode = "hello-changes"
            return self.announcement()
        return reply

    def _bench(self, f: P.Frame) -> bytes:
        reply = super()._bench(f)
        frame = P.FrameDecoder().feed(reply)[0]
        n, lo, hi, total = struct.unpack(P.BENCH_REPLY, frame.payload)
        if self.mode == "bench-n":
            n -= 1
        elif self.mode == "bench-sum":
            total = n * hi + 1
        elif self.mode == "bench-zeros":    # as before any INFER, but one has run
            n = lo = hi = total = 0
        elif self.mode == "bench-cost":
            lo, hi, total = 0xFFFFFF00, 0xFFFFFF00, 0xFFFFFF00 * n
        return _reply(f, struct.pack(P.BENCH_REPLY, n, lo, hi, total))


def flood(fd: int, mode: str) -> None:
    """Modes that never stop sending: random bytes, frames that never end, huge lengths."""
    if mode == "flood":
        chunk = os.urandom(4096)
    elif mode == "endless-frame":      # a HELLO reply's header, then no end to its payload
        chunk = P.SYNC + struct.pack("<BBBH", P.VERSION, P.COMMANDS["HELLO"] | P.REPLY_BIT, 1,
                                     P.HELLO_REPLY_MAX) + bytes(range(1, 256)) * 16
    else:                              # huge-length: every header says 65535 bytes follow
        chunk = (P.SYNC + struct.pack("<BBBH", P.VERSION, P.CMD_ERROR, 1, 0xFFFF)) * 512
    while True:
        try:
            os.write(fd, chunk)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            return


def main() -> None:
    model, mode = Path(sys.argv[1]), sys.argv[2]
    if sys.argv[3:] == ["--stdio"]:
        if os.isatty(0):
            tty.setraw(0)
        serve(Hostile(model, mode), 0, 1)
        return
    master, slave = os.openpty()
    tty.setraw(slave)
    tty.setraw(master)
    if mode in ("flood", "endless-frame", "huge-length"):
        print(os.ttyname(slave), flush=True)
        os.set_blocking(master, False)
        flood(master, mode)
        return
    board = Hostile(model, mode)
    print(os.ttyname(slave), flush=True)
    serve(board, master, master)


def serve(board: Hostile, rfd: int, wfd: int) -> None:
    while True:
        try:
            data = os.read(rfd, 4096)
        except OSError:
            return
        if not data:
            return
        out = board.feed(data)
        if out:
            os.write(wfd, out)
        if board.flooding:
            os.set_blocking(wfd, False)
            flood(wfd, board.flooding)
            return


if __name__ == "__main__":
    main()
