"""The harness of `linux` boards (Raspberry Pi class): a small Python agent that runs a .tflite
with tflite-runtime and answers the same protocol as the C firmware (docs/protocol.md), over a
serial device, a TCP port or its own stdin/stdout (behind a pty when tested here).

    python -m quarl_edge.link.agent MODEL.tflite --stdio                 # behind a pty
    python -m quarl_edge.link.agent MODEL.tflite --serial /dev/ttyGS0    # a USB gadget / UART
    python -m quarl_edge.link.agent MODEL.tflite --tcp 0.0.0.0:5555      # one client at a time

It needs only numpy, pyserial (for --serial) and tflite-runtime or LiteRT (ai-edge-litert,
whichever quarl_edge/core/tflite_host.py finds), so it runs on the board itself; of quarl-edge it
imports only the protocol and tflite_host (targets/launch.py's AGENT_FILES are what a deploy
copies).
Costs are nanoseconds of the board's monotonic clock around invoke(). A malformed frame gets an
error frame, as from the firmware; the agent never stops on bad input. Like the firmware, it
announces its start with an unsolicited HELLO reply, answers a retried INFER or BENCH (same
command, sequence number and payload as the last one) with the last reply instead of running
it again, and its boot id is the nonce of the first HELLO it answered. RESET zeroes the model's
variable tensors (a recurrent policy's state) with tflite-runtime's reset_all_variables(). SIGUSR1 restarts it (the
process executes itself again, keeping its stdin/stdout): a board reset, for tests.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import resource
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

from . import protocol as P
from ..core.tflite_host import Interpreter, resolver

MAX_PAYLOAD = 4096
DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.int8): "int8",
               np.dtype(np.int16): "int16", np.dtype(np.int32): "int32", np.dtype(np.uint8): "uint8"}


class Agent:
    def __init__(self, model_path: Path, board_id: str = "linux-tflite"):
        self.model_path = Path(model_path)
        data = self.model_path.read_bytes()
        self.model_hash = hashlib.sha256(data).digest()[:8]
        # the builtin kernels only, as the host references run it (measure/reference.py)
        self.interp = Interpreter(
            model_path=str(self.model_path),
            experimental_op_resolver_type=resolver("optimized"))
        self.interp.allocate_tensors()
        self.inputs = self.interp.get_input_details()
        self.outputs = self.interp.get_output_details()
        self.board_id = board_id
        self.flash_bytes = len(data)
        self.decoder = P.FrameDecoder(MAX_PAYLOAD, version=P.VERSION)
        self.last_input: list[np.ndarray] | None = None
        self.boot_id = 0
        # the last INFER or BENCH request, (cmd, seq, payload), and the reply it got
        self.last_request: tuple[int, int, bytes] | None = None
        self.last_reply = b""
        # streamed tensors (docs/protocol.md, "Streamed tensors"), as the firmware does them
        self.in_bytes = sum(self.spec(d).nbytes for d in self.inputs)
        self.out_bytes = sum(self.spec(d).nbytes for d in self.outputs)
        self.stream = P.InputStream(bytearray(self.in_bytes))
        self.last_outputs: bytes | None = None    # for OUT_CHUNK; None: none since the last run

    def spec(self, d) -> P.TensorSpec:
        scale, zp = d["quantization"]
        return P.TensorSpec(DTYPE_NAMES[np.dtype(d["dtype"])], tuple(int(v) for v in d["shape"]),
                            float(scale), int(zp))

    def hello_reply(self, seq: int, nonce: int) -> bytes:
        return P.encode_frame(P.COMMANDS["HELLO"] | P.REPLY_BIT, P.pack_hello(P.Hello(
            nonce, P.VERSION, "ns", 0, MAX_PAYLOAD, self.board_id, self.model_path.stem[:255],
            self.model_hash, 0, [self.spec(d) for d in self.inputs],
            [self.spec(d) for d in self.outputs], self.boot_id)), seq)

    def announcement(self) -> bytes:
        """What the agent sends when it starts (docs/protocol.md, "Retries and resets")."""
        return self.hello_reply(P.BOOT_SEQ, P.BOOT_NONCE)

    # ---------------------------------------------------------------------- commands
    def _invoke(self, inputs: list[np.ndarray]) -> int:
        for d, x in zip(self.inputs, inputs):
            self.interp.set_tensor(d["index"], x)
        t0 = time.monotonic_ns()
        self.interp.invoke()
        return min(time.monotonic_ns() - t0, 0xFFFFFFFF)

    # the request handlers by command code (INFER_Z is INFER with zero-run coded inputs)
    HANDLERS = {P.COMMANDS["HELLO"]: "_hello", P.COMMANDS["INFER"]: "_infer",
                P.COMMANDS["INFER_Z"]: "_infer", P.COMMANDS["IN_CHUNK"]: "_in_chunk",
                P.COMMANDS["OUT_CHUNK"]: "_out_chunk", P.COMMANDS["BENCH"]: "_bench",
                P.COMMANDS["RESET"]: "_reset", P.COMMANDS["MEM"]: "_mem",
                P.COMMANDS["ECHO"]: "_echo"}

    def handle(self, f: P.Frame) -> bytes:
        """One request frame -> the reply frame's bytes."""
        if (f.cmd, f.seq, f.payload) == self.last_request:
            return self.last_reply          # a retry: answered again, not run again
        name = self.HANDLERS.get(f.cmd)
        if name is None:
            return _error(f, 3, f"unknown command 0x{f.cmd:02X}")
        return getattr(self, name)(f)

    def _hello(self, f: P.Frame) -> bytes:
        if len(f.payload) != 4:
            return _error(f, 5, "HELLO takes a u32 nonce")
        (nonce,) = struct.unpack("<I", f.payload)
        self.boot_id = self.boot_id or nonce
        self.last_request = None        # a new session: nothing to replay
        return self.hello_reply(f.seq, nonce)

    def _infer(self, f: P.Frame) -> bytes:
        """INFER (the inputs in its payload, or streamed before in IN_CHUNK frames) and INFER_Z
        (its payload zero-run coded) -> the cost and the outputs (streamed: read with
        OUT_CHUNK)."""
        payload = f.payload
        if f.cmd == P.COMMANDS["INFER_Z"]:
            try:
                payload = P.zrun_decode(payload, self.in_bytes)
            except ValueError as e:
                return _error(f, 5, f"INFER_Z: {e}")
            if P.streamed(self.in_bytes, MAX_PAYLOAD):
                self.stream.received = 0
        elif P.streamed(self.in_bytes, MAX_PAYLOAD):
            payload = None                              # taken from the IN_CHUNK frames below
        specs = [self.spec(d) for d in self.inputs]
        if payload is None:                             # the inputs came in IN_CHUNK frames
            if f.payload:
                return _error(f, 5, "streamed inputs: INFER takes no payload")
            if not self.stream.complete:
                return _error(f, 6, f"input chunks missing: {self.stream.received} of "
                                    f"{self.in_bytes} B received")
            payload = bytes(self.stream.buf)
            self.stream.received = 0
        if len(payload) != sum(s.nbytes for s in specs):
            return _error(f, 5, "INFER payload does not match the inputs' size")
        inputs, pos = [], 0
        for s in specs:
            inputs.append(np.frombuffer(payload, s.np_dtype, count=int(np.prod(s.shape)),
                                        offset=pos).reshape(s.shape))
            pos += s.nbytes
        self.last_input = inputs
        cost = self._invoke(inputs)
        outs = b"".join(self.interp.get_tensor(d["index"]).tobytes() for d in self.outputs)
        self.last_outputs = outs
        if P.streamed(len(outs), MAX_PAYLOAD):
            outs = b""                                  # read with OUT_CHUNK
        return self._remember(f, _reply(f, struct.pack(P.COST_FMT, cost) + outs))

    def _in_chunk(self, f: P.Frame) -> bytes:
        if len(f.payload) < 4:
            return _error(f, 5, "IN_CHUNK takes a u32 offset and bytes")
        (off,) = struct.unpack_from(P.IN_CHUNK_HEAD, f.payload)
        try:
            received = self.stream.write(off, f.payload[4:])
        except ValueError as e:
            return _error(f, 5, str(e))
        self.last_outputs = None
        return self._remember(f, _reply(f, struct.pack(P.IN_CHUNK_HEAD, received)))

    def _out_chunk(self, f: P.Frame) -> bytes:
        if len(f.payload) != struct.calcsize(P.OUT_CHUNK_REQ):
            return _error(f, 5, "OUT_CHUNK takes a u32 offset and a u16 length")
        off, n = struct.unpack(P.OUT_CHUNK_REQ, f.payload)
        if self.last_outputs is None:
            return _error(f, 6, "no outputs since the last run")
        if off + n > len(self.last_outputs):
            return _error(f, 5, f"chunk [{off}, {off + n}) ends beyond the outputs' "
                                f"{len(self.last_outputs)} B")
        return _reply(f, struct.pack(P.IN_CHUNK_HEAD, off) + self.last_outputs[off:off + n])

    def _bench(self, f: P.Frame) -> bytes:
        if len(f.payload) != 2:
            return _error(f, 5, "BENCH takes a u16 count")
        (n,) = struct.unpack("<H", f.payload)
        if n == 0:
            return _error(f, 5, "BENCH needs n >= 1")
        inputs = self.last_input or [np.zeros(d["shape"], d["dtype"]) for d in self.inputs]
        costs = [self._invoke(inputs) for _ in range(n)]
        self.last_outputs = None    # as on the firmware
        return self._remember(f, _reply(f, struct.pack(P.BENCH_REPLY, n, min(costs), max(costs),
                                                       sum(costs))))

    def _reset(self, f: P.Frame) -> bytes:
        if f.payload:
            return _error(f, 5, "RESET takes no payload")
        self.interp.reset_all_variables()      # the model's state (an LSTM's), as the firmware
        return _reply(f, struct.pack(P.RESET_REPLY, self.boot_id))

    def _mem(self, f: P.Frame) -> bytes:
        if f.payload:
            return _error(f, 5, "MEM takes no payload")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return _reply(f, struct.pack(P.MEM_REPLY, self.flash_bytes, min(rss, 0xFFFFFFFF), 0, 0, 0))

    def _echo(self, f: P.Frame) -> bytes:
        return _reply(f, f.payload)

    def _remember(self, f: P.Frame, reply: bytes) -> bytes:
        self.last_request, self.last_reply = (f.cmd, f.seq, f.payload), reply
        return reply

    def feed(self, data: bytes) -> bytes:
        """Bytes in -> reply bytes out (error frames for frames that failed to parse)."""
        out = []
        for f in self.decoder.feed(data):
            if f.cmd & P.REPLY_BIT:
                continue            # a looped-back reply: never answer it
            out.append(self.handle(f))
        for code, cmd, seq in self.decoder.errors:
            out.append(P.encode_frame(P.CMD_ERROR, bytes([code, cmd]) + P.ERRORS[code][0].encode(), seq))
        self.decoder.errors.clear()
        return b"".join(out)


def _reply(f: P.Frame, payload: bytes) -> bytes:
    """The reply frame to request `f`."""
    return P.encode_frame(f.cmd | P.REPLY_BIT, payload, f.seq)


def _error(f: P.Frame, code: int, msg: str) -> bytes:
    """The error frame answering request `f` (docs/protocol.md: the code, the command, why)."""
    return P.encode_frame(P.CMD_ERROR, bytes([code, f.cmd]) + msg.encode(), f.seq)


def restart_on_sigusr1() -> None:
    """SIGUSR1 makes the agent start again from scratch (a board reset): the process executes
    its own command line again, with the same stdin/stdout."""
    def restart(signum, frame):
        os.execv(sys.executable, sys.orig_argv)
    signal.signal(signal.SIGUSR1, restart)


def serve_fds(agent: Agent, rfd: int, wfd: int) -> None:
    while True:
        try:
            data = os.read(rfd, 4096)
        except OSError:             # the pty's other side is gone
            return
        if not data:
            return
        out = agent.feed(data)
        if out:
            os.write(wfd, out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="quarl_edge.link.agent", description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--stdio", action="store_true")
    g.add_argument("--serial", metavar="DEVICE")
    g.add_argument("--tcp", metavar="HOST:PORT")
    ap.add_argument("--board-id", default="linux-tflite")
    ap.add_argument("--baudrate", type=int, default=115200)
    a = ap.parse_args(argv)
    agent = Agent(a.model, a.board_id)
    restart_on_sigusr1()
    if a.stdio:
        import tty
        if os.isatty(0):
            tty.setraw(0)
        os.write(1, agent.announcement())
        serve_fds(agent, 0, 1)
    elif a.serial:
        import serial
        with serial.Serial(a.serial, a.baudrate, timeout=0.1) as port:
            port.write(agent.announcement())
            while True:
                out = agent.feed(port.read(max(1, port.in_waiting)))
                if out:
                    port.write(out)
    else:
        host, _, port = a.tcp.rpartition(":")
        with socket.create_server((host or "0.0.0.0", int(port))) as srv:
            print(f"agent: listening on {a.tcp}", file=sys.stderr, flush=True)
            while True:
                conn, _ = srv.accept()
                with conn:
                    serve_fds(agent, conn.fileno(), conn.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
