"""The serial runner: talks the harness protocol (docs/protocol.md) to a board over pyserial.

A port is anything pyserial's serial_for_url() opens: a device path (/dev/ttyACM0, a pty) or a
URL (socket://127.0.0.1:PORT, loop://, and our fault-injecting fault://, link/fault.py, which
importing this module registers); opening it, writing frames and decoding what comes back is
link/framing.py's FramedPort, which BoardLink extends. One `command()` sends a request and
returns its reply; a lost or garbled exchange is retried (the sequence number makes a retry
idempotent: the board answers it with its last reply), a board that restarted raises
BoardReset after a new handshake, and error frames for a well-formed request become
ProtocolError with the error's name. `BoardLink.stats` counts what the link survived."""
from __future__ import annotations

import collections
import os
import struct
import time
from dataclasses import dataclass

import numpy as np

from . import protocol as P
from ..core.errors import BoardError, BoardReset, ProtocolError
from .checks import check_bench, check_cost, describe, impossible
from .framing import FramedPort

HELLO_TIMEOUT_S = 0.25     # per HELLO attempt (a pty answers in < 1 ms; QEMU's pty can take ~1 s)
HANDSHAKE_S = 10.0         # total time to wait for a board to answer HELLO
REPLY_TIMEOUT_S = 5.0      # one command's reply: REPLY_TIMEOUT_S only bounds explicit waits
BYTES_PER_S = 10_000       # extra timeout per payload byte (115200 baud ~ 11.5 kB/s)

# Retries (docs/protocol.md, "Retries and resets"): their limits, in this one place.
RETRIES = 8                # re-sends of one request; then HELLO tells a reset from a dead board
FIRST_ATTEMPT_S = 1.0      # the first wait for a command never answered before (+ payload time)
ATTEMPT_MIN_S = 0.03       # the shortest wait for one attempt's reply ...
RTT_FACTOR = 4             # ... else RTT_FACTOR x the slowest of the command's last round trips
RTT_HISTORY = 32           # (how many round trips are remembered per command)
LATE_HISTORY = 8           # late replies (a re-sent request answered twice): their round
                           # trips are learnt (the last 8 per command) ...
LATE_MARGIN = 1.5          # ... and waited for, x 1.5, from then on
ATTEMPT_MAX_S = 1.0        # each retry doubles the wait, up to this (bounded backoff)
REHANDSHAKE_S = 3.0        # how long the HELLO after failed retries, or after a reset, may take
RESET_REPLAYS = 3          # how often a caller redoes what board resets interrupted (hil: an
                           # episode, validate: an input) before the BoardReset is the error
# A garbled exchange is re-sent at once. So a board that falls silent is reported within
# FIRST_ATTEMPT_S + RETRIES x ATTEMPT_MAX_S + (zeros) + REHANDSHAKE_S (~13 s) at most; during a
# session (known round trips) within 0.03 + 0.06 + ... + 0.96 + 1 + 1 + 0.4 + 3 = 8.3 s.

# Streamed tensors (docs/protocol.md, "Streamed tensors"): tensor bytes per IN_CHUNK/OUT_CHUNK
# frame (fewer if the board's max_payload is smaller). Small enough that a chunk at a 1e-3
# byte error rate gets through in ~1.3 attempts, large enough that the 15-byte frame and the
# reply cost little.
STREAM_CHUNK = 256

TRANSPORT_ERRORS = {"BAD_CRC", "TOO_LONG", "BAD_VERSION"}   # the board got our bytes garbled


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


class BoardLink(FramedPort):
    """An open connection to a harness (its port and framing: link/framing.py). Use as a context
    manager; call hello() first."""

    def __init__(self, url: str, baudrate: int = 115200, trace: bool = False, alive=None):
        super().__init__(url, baudrate, trace, alive)
        self._rtt: dict[int, collections.deque] = {}
        self._late: dict[int, collections.deque] = {}     # round trips of late replies
        self._maybe_late: tuple | None = None    # (cmd, seq, round trip) of a re-sent request
        # cost units per wall-clock second the board cannot exceed (link/checks.py, cost_rate;
        # set by the session that knows the board file), None: no such bound
        self.cost_rate: float | None = None
        self.inferred = False      # an INFER ran in this session (BENCH has an input then)
        self.act_size = 0      # floats of ACT's action (`hil --act`; 0: no ACT is sent)

    def _reply_limits(self) -> dict[int, int]:
        """Once HELLO is known, every reply's exact size (else FramedPort's HELLO and errors)."""
        limits = super()._reply_limits()
        if self.info is None:
            return limits
        R = P.REPLY_BIT
        outs = sum(s.nbytes for s in self.info.outputs)
        if P.streamed(outs, self.info.max_payload):
            outs = 0    # read with OUT_CHUNK
        limits.update({P.COMMANDS["INFER"] | R: struct.calcsize(P.COST_FMT) + outs,
                       P.COMMANDS["INFER_Z"] | R: struct.calcsize(P.COST_FMT) + outs,
                       P.COMMANDS["BENCH"] | R: struct.calcsize(P.BENCH_REPLY),
                       P.COMMANDS["MEM"] | R: struct.calcsize(P.MEM_REPLY),
                       P.COMMANDS["ECHO"] | R: self.info.max_payload,
                       P.COMMANDS["IN_CHUNK"] | R: 4,
                       P.COMMANDS["RESET"] | R: struct.calcsize(P.RESET_REPLY),
                       P.COMMANDS["PEROP"] | R: struct.calcsize(P.PEROP_HEAD) + 4 * P.PEROP_PAGE,
                       P.COMMANDS["OUT_CHUNK"] | R: 4 + self.chunk_bytes()})
        if self.act_size:
            limits[P.COMMANDS["ACT"] | R] = struct.calcsize(P.ACT_REPLY_HEAD) + 4 * self.act_size
        return limits

    # ----------------------------------------------------------------------- commands
    def _first_wait(self, cmd: int, payload_len: int) -> float:
        rtts, late = self._rtt.get(cmd), self._late.get(cmd)
        if not rtts:
            return FIRST_ATTEMPT_S + payload_len / BYTES_PER_S
        return max(ATTEMPT_MIN_S, RTT_FACTOR * max(rtts), LATE_MARGIN * max(late) if late else 0.0)

    def command(self, name: str, payload: bytes = b"", timeout: float | None = None) -> bytes:
        """Send one request and return its reply payload, re-sending it (same sequence number)
        while the reply is lost or garbled. `timeout`: the wait for a slow command's first
        attempt (BENCH), else it follows the command's recent round trips. An error frame for
        a well-formed request raises ProtocolError; a board that restarted, BoardReset; one
        that stopped answering, BoardError, within a bounded time (see the constants)."""
        cmd = P.COMMANDS[name]
        seq = self._next_seq()
        frame = P.encode_frame(cmd, payload, seq)
        expect = self._reply_frame_bytes(cmd, payload)
        base = timeout or self._first_wait(cmd, len(payload))
        t0 = time.monotonic()
        timeouts, zeroed, timed_out = 0, False, False
        for attempt in range(RETRIES + 1):
            if attempt:
                self.stats["retries"] += 1
            extra = 0.0
            if timeouts >= 2 and not zeroed:
                # Even a retry went unanswered: the board may be assembling a frame whose length
                # a corrupted byte made long, swallowing our retries. Zeros complete it; the
                # wait includes the time the board takes to read them (else the next request
                # times out behind them, and more zeros follow).
                zeros = P.resync_bytes(self.info.max_payload if self.info else 0xFFFF)
                self._write(zeros)
                self.stats["resyncs"] += 1
                extra, zeroed = len(zeros) / BYTES_PER_S, True
            sent = time.monotonic()
            self._write(frame)
            wait = extra + (base if timeout else min(max(ATTEMPT_MAX_S, base), base * 2 ** attempt))
            reply, timed_out = self._await(name, cmd, seq, sent + wait, attempt, expect)
            timeouts = timeouts + 1 if timed_out else 0
            if reply is not None:
                if attempt == 0:
                    self._rtt.setdefault(cmd, collections.deque(maxlen=RTT_HISTORY)).append(
                        time.monotonic() - sent)
                elif self._maybe_late == (cmd, seq, None):   # its second reply came with it
                    self._learn_late(cmd, time.monotonic() - t0)
                else:      # late, or the re-send's? A second reply to `seq` will tell (_await)
                    self._maybe_late = (cmd, seq, time.monotonic() - t0)
                return reply
        # Every attempt failed: a board that restarted, or one that is gone?
        spent = time.monotonic() - t0
        try:
            self.hello(REHANDSHAKE_S)      # raises BoardReset if the board restarted
        except BoardReset:
            raise
        except BoardError:
            raise BoardError(f"the board on {self.url} stopped answering: no reply to {name} "
                             f"after {RETRIES + 1} attempts in {spent:.1f} s, and no answer to "
                             f"HELLO within {REHANDSHAKE_S:.0f} s") from None
        raise BoardError(f"the board on {self.url} answers HELLO but not {name}: no valid "
                         f"reply after {RETRIES + 1} attempts in {spent:.1f} s "
                         f"(link: {self.stats})")

    def _reply_frame_bytes(self, cmd: int, payload: bytes) -> int | None:
        """The size on the wire (frame and pad) of the reply to this request, if it is known:
        after HELLO every reply's size is (ECHO's is its request's, OUT_CHUNK's 4 + n)."""
        if self.info is None:
            return None
        if cmd == P.COMMANDS["ECHO"]:
            n = len(payload)
        elif cmd == P.COMMANDS["OUT_CHUNK"]:
            n = struct.calcsize(P.IN_CHUNK_HEAD) + struct.unpack_from(P.OUT_CHUNK_REQ, payload)[1]
        else:
            n = self.decoder.limits.get(cmd | P.REPLY_BIT)
            if n is None:
                return None
        return P.HEADER_SIZE + n + P.CRC_SIZE + P.PAD_SIZE

    def _learn_late(self, cmd: int, took: float) -> None:
        """A re-sent request was answered twice: the first attempt's reply was late (a busy
        host, a board that stalled), not lost. Its round trip is learnt, so the next waits
        cover it instead of re-sending (and, two in a row, sending the resync zeros) at every
        such stall."""
        self._maybe_late = None
        self.stats["late_replies"] += 1
        self._late.setdefault(cmd, collections.deque(maxlen=LATE_HISTORY)).append(took)

    def _await(self, name: str, cmd: int, seq: int, deadline: float,
               attempt: int, expect: int | None = None) -> tuple[bytes | None, bool]:
        """(the reply to request `seq`, False), or (None, timed out?) when it should be re-sent:
        the wait ran out, or the exchange was garbled (a frame failed here, or the board got
        our request garbled). `expect`: the reply's size on the wire, if known."""
        garbled = False
        while True:
            now = time.monotonic()
            if now >= deadline:
                self.stats["timeouts"] += 1
                # A frame half-received: its rest may be late (a stall: kept through the first
                # re-send, so that it completes and is known for late) or will not come (a lost
                # byte: the re-send's reply then completes it wrong, the CRC fails and the
                # decoder rescans into that reply; or find_inside finds the reply inside it).
                # From the second re-send on it is given up.
                if attempt > 0 and self.decoder.skip_pending():
                    self.stats["resyncs"] += 1
                    self.decoder.feed(b"")
                return None, True
            rejected = self.decoder.rejected
            frames = self._read_frames(expect)
            hidden = None
            if self.decoder.pending:
                hidden = self.decoder.find_inside(
                    lambda f: (f.cmd == cmd | P.REPLY_BIT and f.seq == seq) or self._is_boot(f))
            got = frames + ([hidden] if hidden else [])
            for k, f in enumerate(got):
                if f.cmd == cmd | P.REPLY_BIT and f.seq == seq:
                    self._absorb_decoder_counts()
                    if attempt > 0 and any((g.cmd, g.seq) == (f.cmd, f.seq) for g in got[k + 1:]):
                        self._maybe_late = (cmd, seq, None)   # answered twice: seen already
                    return f.payload, False
                if self._is_boot(f):
                    # the board announced a boot: handshake again, which raises BoardReset
                    # (if its boot id is unchanged, it did not restart: just re-send)
                    self.hello(REHANDSHAKE_S)
                    return None, False
                if f.is_error:
                    err, _, msg = f.error()
                    if err in TRANSPORT_ERRORS or (err == "BAD_PAYLOAD" and f.seq == seq
                                                   and attempt < RETRIES):
                        # (our request's size is right: BAD_PAYLOAD is a length garbled on the
                        # way, unless every attempt gets it)
                        self.stats["board_errors"] += 1
                        garbled = True
                    elif f.seq == seq:
                        raise ProtocolError(f"board answered {name} with {err}: {msg}", err)
                elif self._maybe_late and (f.cmd, f.seq) == (self._maybe_late[0] | P.REPLY_BIT,
                                                           self._maybe_late[1]):
                    # a second reply to a request that was re-sent: the one taken was late
                    late_cmd, _, took = self._maybe_late
                    self._learn_late(late_cmd, took)
                # else: a late reply to an earlier attempt or request
            garbled = garbled or self.decoder.rejected != rejected
            self._absorb_decoder_counts()
            if garbled and not self.ser.in_waiting:   # re-send once the burst is read
                return None, False
            if self._read_nothing and not self.alive():   # (a live board's bytes: no check)
                raise BoardError(f"the board stopped while waiting for {name}")

    # ---------------------------------------------------------------------- handshake
    def hello(self, total_timeout: float = HANDSHAKE_S) -> P.Hello:
        """Handshake: HELLO with a random nonce, retried until the board echoes it, from a
        clean input. On a link that had handshaken before, a changed boot id means the board
        restarted: if it still runs the same model (hash, tensor specs), BoardReset is raised."""
        self._reset_input()
        self._old_version_seq = None
        deadline = time.monotonic() + total_timeout
        attempts = 0
        while time.monotonic() < deadline:
            if attempts == 1:   # unanswered once: complete any frame a false sync started
                try:
                    self._write(P.resync_bytes())
                    self.stats["resyncs"] += 1
                except BoardError:
                    pass        # a board that reads nothing will not answer HELLO either
            attempts += 1
            if not self.alive():
                raise BoardError("the board stopped before answering HELLO")
            nonce = 0
            while nonce == P.BOOT_NONCE:
                (nonce,) = struct.unpack("<I", os.urandom(4))
            seq = self._next_seq()
            try:
                self._write(P.encode_frame(P.COMMANDS["HELLO"], struct.pack("<I", nonce), seq))
            except BoardError:
                continue        # not taking bytes yet (still booting?): until the deadline
            info = self._await_hello(seq, nonce, min(deadline, time.monotonic() + HELLO_TIMEOUT_S))
            if info is not None:
                return self._accept(info)
        self._absorb_decoder_counts()
        raise BoardError(f"no HELLO answer from {self.url} within {total_timeout:.0f} s: is the "
                         "firmware running, and is this its port?")

    def _await_hello(self, seq: int, nonce: int, deadline: float) -> P.Hello | None:
        while time.monotonic() < deadline:
            for f in self._read_frames():
                if f.cmd == P.COMMANDS["HELLO"] | P.REPLY_BIT and f.seq == seq:
                    info = P.parse_hello(f.payload)   # malformed: ProtocolError
                    if info.nonce == nonce:
                        return info
            if self._old_version_seq == seq:
                raise ProtocolError(f"the board on {self.url} answers HELLO in another protocol "
                                    f"version; this quarl-edge speaks v{P.VERSION}: rebuild and "
                                    "flash the firmware with it")
            if not self.alive():
                raise BoardError("the board stopped before answering HELLO")
        self._absorb_decoder_counts()
        return None

    def _accept(self, info: P.Hello) -> P.Hello:
        old, self.info = self.info, info
        self._absorb_decoder_counts()
        self.decoder = self._new_decoder()     # now with the exact reply sizes
        if old is None:
            return info
        # A board that handshakes again (restarted or not) still runs what it ran: another
        # model is to be flashed again, another max_payload or cost unit cannot be.
        restarted = info.boot_id != old.boot_id
        for what, a, b in (("model hash", old.model_hash.hex(), info.model_hash.hex()),
                           ("inputs", describe(old.inputs), describe(info.inputs)),
                           ("outputs", describe(old.outputs), describe(info.outputs))):
            if a != b and restarted:
                raise BoardError(f"the board on {self.url} restarted and now runs another model "
                                 f"({what} {b} instead of {a}); flash it again")
            if a != b:
                raise impossible(self.url, f"a second HELLO, without a restart, names other "
                                           f"{what}: {b} instead of {a}")
        for what, a, b in (("max_payload", old.max_payload, info.max_payload),
                           ("cost unit", old.cost_unit, info.cost_unit),
                           ("arena", old.arena_bytes, info.arena_bytes)):
            if a != b:
                raise impossible(self.url, f"its HELLO changed its {what} from {a} to {b}")
        if not restarted:
            return info
        self.stats["resets"] += 1
        raise BoardReset(f"the board on {self.url} restarted (boot id {old.boot_id:08x} -> "
                         f"{info.boot_id:08x}); it runs the same model again, but what was in "
                         "progress is lost")

    # ----------------------------------------------------------------------- requests
    def chunk_bytes(self) -> int:
        """Tensor bytes per IN_CHUNK/OUT_CHUNK frame on this board."""
        return min(STREAM_CHUNK, self.info.max_payload - struct.calcsize(P.IN_CHUNK_HEAD))

    def infer(self, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
        """Run one inference; returns (outputs, cost in the board's unit). Inputs or outputs
        larger than one frame are streamed in chunks (docs/protocol.md, "Streamed tensors");
        the cost is that of the one run, whatever the number of frames."""
        assert self.info is not None, "call hello() first"
        specs = self.info.inputs
        if len(inputs) != len(specs):
            raise BoardError(f"model has {len(specs)} inputs, got {len(inputs)}")
        payload = b"".join(np.ascontiguousarray(x, dtype=s.np_dtype).tobytes()
                           for x, s in zip(inputs, specs))
        out_bytes = sum(s.nbytes for s in self.info.outputs)
        # Zero-run coded (INFER_Z) when that saves at least an eighth of the bytes and fits one
        # frame: sparse observations (pixel tasks' 0/1 images) cross the link many times faster.
        code = P.zrun_encode(payload)
        coded = len(code) <= min(len(payload) - len(payload) // 8 - 1, self.info.max_payload)
        stream_in = not coded and P.streamed(len(payload), self.info.max_payload)
        stream_out = P.streamed(out_bytes, self.info.max_payload)
        self.stats["coded"] += coded
        for again in range(2):
            try:
                if stream_in:
                    self._stream_inputs(payload)
                t0 = time.monotonic()
                reply = (self.command("INFER_Z", code) if coded else
                         self.command("INFER", b"" if stream_in else payload))
                elapsed = time.monotonic() - t0
                pos = struct.calcsize(P.COST_FMT)
                want = pos + (0 if stream_out else out_bytes)
                if len(reply) != want:
                    raise impossible(self.url, f"its INFER reply has {len(reply)} bytes; the "
                                               f"model's outputs make {want}")
                (cost,) = struct.unpack_from(P.COST_FMT, reply)
                check_cost(self.url, "an INFER's cost", cost, self.cost_rate, elapsed)
                self.inferred = True
                data = self._stream_outputs(out_bytes) if stream_out else reply[pos:]
                break
            except ProtocolError as e:
                # NOT_READY: the board lost the streamed tensors. A restart whose announcement
                # was lost: the handshake raises BoardReset. Otherwise stream once more.
                if e.code != "NOT_READY" or again:
                    raise
                self.hello(REHANDSHAKE_S)
                self.stats["restreams"] += 1
        outs, pos = [], 0
        for s in self.info.outputs:
            outs.append(np.frombuffer(data, dtype=s.np_dtype, count=s.nbytes // np.dtype(s.np_dtype).itemsize,
                                      offset=pos).reshape(s.shape).copy())
            pos += s.nbytes
        return outs, cost

    def _stream_inputs(self, payload: bytes) -> None:
        """IN_CHUNK frames until the board has all of `payload`. Each reply says how many bytes
        the board has in order; one short of the chunk's end (it missed an earlier chunk: it
        restarted, or a stale retry rewound it) makes us resume from there, a bounded number of
        times."""
        chunk, off, resumes = self.chunk_bytes(), 0, 0
        while off < len(payload):
            n = min(chunk, len(payload) - off)
            reply = self.command("IN_CHUNK", struct.pack(P.IN_CHUNK_HEAD, off) + payload[off:off + n])
            (received,) = P.unpack_reply(P.IN_CHUNK_HEAD, reply, "IN_CHUNK")
            self.stats["chunks"] += 1
            if received == off + n:
                off = received
                continue
            if received > off + n:
                raise impossible(self.url, f"it has {received} B of the inputs after a chunk "
                                           f"[{off}, {off + n})")
            if resumes == RETRIES:
                raise ProtocolError(f"the board has {received} B of the inputs after a chunk "
                                    f"[{off}, {off + n}) ({resumes} resumed streams)")
            resumes += 1
            self.stats["restreams"] += 1
            off = received

    def _stream_outputs(self, total: int) -> bytes:
        """The output tensors' bytes, read with OUT_CHUNK; each reply must name its offset."""
        data = bytearray()
        for off, n in P.chunk_spans(total, self.chunk_bytes()):
            reply = self.command("OUT_CHUNK", struct.pack(P.OUT_CHUNK_REQ, off, n))
            self.stats["chunks"] += 1
            head = struct.calcsize(P.IN_CHUNK_HEAD)
            at = struct.unpack_from("<I", reply)[0] if len(reply) >= head else None
            if len(reply) != head + n or at != off:
                raise impossible(self.url, f"its OUT_CHUNK reply for [{off}, {off + n}) has "
                                           f"{len(reply)} bytes at offset {at}")
            data += reply[head:]
        return bytes(data)

    def reset_state(self) -> None:
        """RESET: zero the model's state (a recurrent policy's LSTM state) before an episode.
        Its reply carries the board's boot id: another one than the handshake's means the board
        restarted since (its announcement lost), which the handshake then raises as BoardReset
        (what ran since the restart ran from a zero state the caller did not ask for)."""
        assert self.info is not None, "call hello() first"
        (boot,) = P.unpack_reply(P.RESET_REPLY, self.command("RESET"), "RESET")
        if boot != self.info.boot_id:
            self.hello(REHANDSHAKE_S)          # a new boot id: raises BoardReset
            raise ProtocolError(f"RESET reply names boot id {boot:08x}, but the board's "
                                f"handshake says {self.info.boot_id:08x}")

    def act(self, obs: np.ndarray, action_size: int) -> tuple[np.ndarray, int]:
        """ACT: the board's action (float32, `action_size` of them) for the observation `obs`,
        computed by the exported library's NAME_act built into its firmware, and the cost of
        that call. A retry is answered from the board's last reply (a recurrent policy's state
        moves on once)."""
        assert self.info is not None, "call hello() first"
        if action_size != self.act_size:
            self.act_size = action_size
            self.decoder.limits = self._reply_limits()
        t0 = time.monotonic()
        reply = self.command("ACT", np.ascontiguousarray(obs, "<f4").tobytes())
        head = struct.calcsize(P.ACT_REPLY_HEAD)
        if len(reply) != head + 4 * action_size:
            raise impossible(self.url, f"its ACT reply has {len(reply)} bytes; "
                                       f"{action_size} actions make {head + 4 * action_size}")
        (cost,) = struct.unpack_from(P.ACT_REPLY_HEAD, reply)
        check_cost(self.url, "an ACT's cost", cost, self.cost_rate, time.monotonic() - t0)
        return np.frombuffer(reply, "<f4", offset=head).copy(), cost

    def bench(self, n: int) -> BenchStats:
        t0 = time.monotonic()
        reply = self.command("BENCH", struct.pack("<H", n), timeout=REPLY_TIMEOUT_S + n * 0.05)
        elapsed = time.monotonic() - t0
        cnt, lo, hi, total = P.unpack_reply(P.BENCH_REPLY, reply, "BENCH")
        check_bench(self.url, n, cnt, lo, hi, total, self.inferred)
        check_cost(self.url, f"BENCH's sum of {n} costs", total, self.cost_rate, elapsed)
        return BenchStats(cnt, lo, hi, total / max(cnt, 1))

    def perop(self, runs: int) -> tuple[int, int, list[int]]:
        """A per-op build's PEROP (docs/protocol.md, "Per-op cost"): the model run `runs` times;
        (the timer's overhead: the smallest empty start/stop, the tail's smallest cost, each
        slot's smallest cost)."""
        costs: list[int] = []
        n, overhead, tail = None, 0, 0
        while n is None or len(costs) < n:
            reply = self.command("PEROP", struct.pack(P.PEROP_REQ, len(costs), runs),
                                 timeout=REPLY_TIMEOUT_S + runs * 0.05 if not costs else None)
            head = struct.calcsize(P.PEROP_HEAD)
            slots, first, k, overhead, tail = struct.unpack(P.PEROP_HEAD, reply[:head])
            if first != len(costs) or len(reply) != head + 4 * k or (n is not None and slots != n) \
                    or (k == 0 and len(costs) < slots):
                raise ProtocolError(f"PEROP reply for slots {first}+{k} of {slots}, asked from "
                                    f"{len(costs)} ({len(reply)} bytes)")
            n = slots
            costs += struct.unpack(f"<{k}I", reply[head:])
        return overhead, tail, costs

    def mem(self) -> MemStats:
        return MemStats(*P.unpack_reply(P.MEM_REPLY, self.command("MEM"), "MEM"))

    def echo(self, data: bytes) -> bytes:
        return self.command("ECHO", data)


def latency_summary(costs: list[int], unit: str) -> dict:
    arr = np.asarray(costs, dtype=np.float64)
    if arr.size == 0:
        return {"unit": unit, "median": None, "p99": None, "n": 0}
    return {"unit": unit, "median": float(np.median(arr)), "p99": float(np.percentile(arr, 99)),
            "n": int(arr.size)}
