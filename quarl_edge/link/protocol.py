"""The harness protocol, host side: the single source of its constants.

docs/protocol.md describes the wire format. `firmware/core/qe_protocol.h` is generated from the
constants here (`python -m quarl_edge.link.protocol --header`), and tests/test_protocol.py fails when
the committed header drifts from them.
"""
from __future__ import annotations

import binascii
import re
import struct
import sys
from dataclasses import dataclass, field

from ..converters.tensor import TensorSpec
from ..core.errors import ProtocolError

# 2: HELLO's reply carries the board's boot id (a changed boot id means the board restarted),
#    the board announces its boot with an unsolicited HELLO reply, and a repeated request
#    (same command, sequence number and CRC) is answered with the last reply, not run again.
# 3: tensors larger than one frame are streamed: IN_CHUNK writes a chunk of the inputs straight
#    into the model's input tensors, OUT_CHUNK reads one of the outputs (docs/protocol.md,
#    "Streamed tensors"); INFER of a model whose tensors fit one frame is unchanged.
# 4: RESET zeroes the model's state (its variable tensors: a recurrent policy's LSTM state, kept
#    in the arena from one INFER to the next) at an episode's start; its reply carries the boot
#    id, so a restart whose announcement was lost (and with it the state) is noticed at the
#    next RESET (docs/protocol.md, "State"). Every other frame is unchanged.
# 5: INFER_Z is INFER with its inputs zero-run coded (`zrun_encode`: a 0x00 byte is followed by
#    the length of its run of zeros), which the host sends when that is fewer bytes: a sparse
#    observation (MinAtar's 0/1 images as float32: 1,600 B, ~150 coded) crosses a UART in a
#    tenth of the time, and one whose raw bytes need streaming may fit one frame
#    (docs/protocol.md, "Zero-run coded inputs"). Every other frame is unchanged.
VERSION = 5
SYNC = b"\xA5\x5A"
HEADER_SIZE = 7  # sync(2) version(1) cmd(1) seq(1) len(2)
CRC_SIZE = 2
# Zero bytes sent after every frame (not part of it: receivers skip them like any garbage).
# When a byte of a frame is lost, they complete it at once, so the receiver sees a CRC error
# now instead of waiting for bytes that will not come.
PAD_SIZE = 2
REPLY_BIT = 0x80

COMMANDS = {
    "HELLO": 0x01,
    "INFER": 0x02,
    "BENCH": 0x03,
    "MEM": 0x04,
    "ECHO": 0x05,
    "IN_CHUNK": 0x06,
    "OUT_CHUNK": 0x07,
    "RESET": 0x08,
    "INFER_Z": 0x09,
    "PEROP": 0x0A,      # only a per-op build (-DQE_PER_OP) answers it; others: UNKNOWN_CMD
    "ACT": 0x20,        # (a gap: 0x0A.. are left for the harness's own requests)
}
CMD_ERROR = 0xFF
# What a host may receive: the reply to each command, and error frames.
REPLY_COMMANDS = frozenset({code | REPLY_BIT for code in COMMANDS.values()} | {CMD_ERROR})
# The board's boot announcement: an unsolicited HELLO reply with this sequence number and
# nonce (hosts never send nonce 0, so no request of theirs can be answered with it).
BOOT_SEQ = 0
BOOT_NONCE = 0
# Bounds on a reply's payload before the board's HELLO is known (after it, the host knows the
# exact size of every reply): HELLO's is < 12 kB even with 255 + 255 tensor specs of 8 dims;
# an error frame's message is short (the firmware sends at most 200 characters).
HELLO_REPLY_MAX = 12 * 1024
ERROR_REPLY_MAX = 2 + 255

ERRORS = {
    1: ("BAD_CRC", "the CRC did not match"),
    2: ("TOO_LONG", "the payload length exceeds the board's max_payload"),
    3: ("UNKNOWN_CMD", "no such command"),
    4: ("BAD_VERSION", "the frame's protocol version is not the board's"),
    5: ("BAD_PAYLOAD", "the payload has the wrong size for the command"),
    6: ("NOT_READY", "streamed tensors missing: INFER before all input chunks, or OUT_CHUNK "
                     "with no outputs since the last run"),
}

# A tensor's dtype on the wire: code -> name (its layout in memory, numpy dtype and size, is the
# tensor spec's: quarl_edge/converters/tensor.py, DTYPE_LAYOUT).
DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "uint8"}
DTYPE_CODES = {name: code for code, name in DTYPES.items()}

COST_UNITS = {0: "ns", 1: "cycles", 2: "instructions"}
COST_UNIT_CODES = {name: code for code, name in COST_UNITS.items()}


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no final xor)."""
    return binascii.crc_hqx(data, 0xFFFF)


def encode_frame(cmd: int, payload: bytes = b"", seq: int = 0, version: int = VERSION) -> bytes:
    if len(payload) > 0xFFFF:
        raise ValueError(f"payload of {len(payload)} bytes does not fit a frame")
    body = struct.pack("<BBBH", version, cmd, seq & 0xFF, len(payload)) + payload
    return SYNC + body + struct.pack("<H", crc16(body)) + bytes(PAD_SIZE)


def resync_bytes(max_payload: int = 0xFFFF) -> bytes:
    """Zeros that complete any frame a false sync may have started on the board (zeros never form
    a sync); the board answers at most one BAD_CRC and is then idle."""
    return bytes(min(max_payload, 4096) + HEADER_SIZE + CRC_SIZE)


@dataclass
class Frame:
    version: int
    cmd: int
    seq: int
    payload: bytes

    @property
    def is_error(self) -> bool:
        return self.cmd == CMD_ERROR

    def error(self) -> tuple[str, int, str]:
        """(error name, failed command, message) of an error frame."""
        code = self.payload[0] if self.payload else 0
        failed = self.payload[1] if len(self.payload) > 1 else 0
        name = ERRORS.get(code, (f"ERROR_{code}", ""))[0]
        return name, failed, self.payload[2:].decode("ascii", "replace")


class FrameDecoder:
    """Incremental frame parser: feed() bytes, collect complete frames.

    Garbage before a sync is skipped. The header is checked as soon as it is in, before its
    length is trusted: another protocol version (when `version` is given), a length above
    `max_payload`, or (when `limits` is given, as on a host: {command: largest payload}) a
    command that is not in `limits` or a length above its limit. A header that fails, or a
    frame whose CRC fails, is recorded in ``errors`` as (error code, cmd, seq), and parsing
    rescans from the byte after its sync, so a real frame behind a false sync is still found.
    A host should check the header fully: a false sync that announces a long payload would
    otherwise hold back every frame behind it until that many bytes have arrived.
    """

    def __init__(self, max_payload: int = 0xFFFF, version: int | None = None,
                 limits: dict[int, int] | None = None):
        self.buf = bytearray()
        self.max_payload = max_payload
        self.version = version
        self.limits = limits
        self.errors: list[tuple[int, int, int]] = []
        self.rejected = 0     # every failed header or CRC, also those taken out of `errors`

    @property
    def bad_frames(self) -> int:
        return len(self.errors)

    @property
    def pending(self) -> bool:
        """A frame has started (sync and maybe more) but is not complete."""
        return self.buf.startswith(SYNC)

    def skip_pending(self) -> bool:
        """Give up on the frame being assembled (its rest will not come: a byte was lost) and
        rescan from the byte after its sync; True if there was one. Call feed(b"") after it."""
        if not self.pending:
            return False
        del self.buf[:2]
        return True

    def find_inside(self, want) -> Frame | None:
        """While a frame is pending, a complete valid frame that starts inside it and for
        which want(frame) holds, e.g. the reply a host waits for: a false sync whose header
        passed (a corrupted length) would hold it back until that many bytes came. If there is
        one, the pending frame was false: it and everything up to the end of the found frame
        are dropped, and the found frame is returned."""
        if not self.pending:
            return None
        probe = FrameDecoder(self.max_payload, self.version, self.limits)
        for f in probe.feed(bytes(self.buf[2:])):
            if want(f):
                self.rejected += 1
                self.buf = probe.buf
                return f
        return None

    def _header_error(self, version: int, cmd: int, length: int) -> int:
        if self.version is not None and version != self.version:
            return 4                                    # BAD_VERSION
        if self.limits is not None:
            if cmd not in self.limits:
                return 3                                # UNKNOWN_CMD
            if length > self.limits[cmd]:
                return 2                                # TOO_LONG
        return 2 if length > self.max_payload else 0

    def feed(self, data: bytes) -> list[Frame]:
        self.buf += data
        frames = []
        while True:
            start = self.buf.find(SYNC)
            if start < 0:
                # keep a trailing first sync byte, drop the rest
                del self.buf[: max(0, len(self.buf) - 1)]
                return frames
            del self.buf[:start]
            if len(self.buf) < HEADER_SIZE:
                return frames
            version, cmd, seq, length = struct.unpack_from("<BBBH", self.buf, 2)
            error = self._header_error(version, cmd, length)
            if error:
                self.errors.append((error, cmd, seq))
                self.rejected += 1
                del self.buf[:2]
                continue
            total = HEADER_SIZE + length + CRC_SIZE
            if len(self.buf) < total:
                return frames
            body = bytes(self.buf[2 : HEADER_SIZE + length])
            (crc,) = struct.unpack_from("<H", self.buf, HEADER_SIZE + length)
            if crc != crc16(body):
                self.errors.append((1, cmd, seq))
                self.rejected += 1
                del self.buf[:2]
                continue
            frames.append(Frame(version, cmd, seq, bytes(self.buf[HEADER_SIZE : HEADER_SIZE + length])))
            del self.buf[:total]


# ----------------------------------------------------------------------------------- payloads
def pack_tensor(t: TensorSpec) -> bytes:
    """A tensor spec as HELLO's reply carries it: u8 dtype code, u8 dims, u16 per dim, f32
    scale, i32 zero point."""
    return (struct.pack("<BB", DTYPE_CODES[t.dtype], len(t.shape))
            + struct.pack(f"<{len(t.shape)}H", *t.shape)
            + struct.pack("<fi", t.scale, t.zero_point))


@dataclass
class Hello:
    nonce: int
    version: int
    cost_unit: str
    clock_hz: int
    max_payload: int
    board_id: str
    model_name: str
    model_hash: bytes
    arena_bytes: int
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    boot_id: int = 0       # the nonce of the first HELLO the board answered since it booted

    @property
    def is_boot_announcement(self) -> bool:
        return self.nonce == BOOT_NONCE


class _Reader:
    """Reads a reply payload; running short, or a value the protocol does not define, is a
    ProtocolError naming what was being read."""

    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = data, 0, what

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            raise ProtocolError(f"{self.what} reply is cut short: {len(self.data)} bytes")
        vals = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return vals if len(vals) > 1 else vals[0]

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ProtocolError(f"{self.what} reply is cut short: {len(self.data)} bytes")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self) -> str:
        return self.raw(self.take("B")).decode("ascii", "replace")

    def tensor(self) -> TensorSpec:
        code, ndims = self.take("BB")
        if code not in DTYPES:
            raise ProtocolError(f"{self.what} reply names dtype {code}, which the protocol "
                                f"does not define (known: {', '.join(map(str, DTYPES))})")
        dims = tuple(self.take("H") for _ in range(ndims))
        scale, zp = self.take("fi")
        return TensorSpec(DTYPES[code], dims, scale, zp)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"{self.what} reply has {len(self.data) - self.pos} bytes "
                                "more than its fields")


def parse_hello(payload: bytes) -> Hello:
    """A HELLO reply's payload; anything malformed is a ProtocolError."""
    r = _Reader(payload, "HELLO")
    nonce, version = r.take("IB")
    if version != VERSION:   # the rest may be laid out differently: do not read it
        raise ProtocolError(f"the board speaks protocol v{version}; this quarl-edge speaks "
                            f"v{VERSION}: rebuild and flash the firmware with this version")
    boot_id, unit, clock, max_payload = r.take("IBIH")
    board, model, mhash = r.string(), r.string(), r.raw(8)
    arena = r.take("I")
    inputs = [r.tensor() for _ in range(r.take("B"))]
    outputs = [r.tensor() for _ in range(r.take("B"))]
    r.end()
    return Hello(nonce, version, COST_UNITS.get(unit, f"unit{unit}"), clock, max_payload,
                 board, model, mhash, arena, inputs, outputs, boot_id)


def unpack_reply(fmt: str, payload: bytes, what: str) -> tuple:
    """struct.unpack of a fixed-size reply; another size is a ProtocolError."""
    if len(payload) != struct.calcsize(fmt):
        raise ProtocolError(f"{what} reply has {len(payload)} bytes, expected "
                            f"{struct.calcsize(fmt)}")
    return struct.unpack(fmt, payload)


def pack_hello(h: Hello) -> bytes:
    """The board's HELLO reply (used by the Python linux agent and by tests)."""
    def s(x: str) -> bytes:
        b = x.encode("ascii")
        return struct.pack("<B", len(b)) + b
    return (struct.pack("<IBIBIH", h.nonce, h.version, h.boot_id, COST_UNIT_CODES[h.cost_unit],
                        h.clock_hz, h.max_payload)
            + s(h.board_id) + s(h.model_name) + h.model_hash[:8].ljust(8, b"\0")
            + struct.pack("<I", h.arena_bytes)
            + struct.pack("<B", len(h.inputs)) + b"".join(map(pack_tensor, h.inputs))
            + struct.pack("<B", len(h.outputs)) + b"".join(map(pack_tensor, h.outputs)))


BENCH_REPLY = "<IIIQ"   # n, min, max, sum
MEM_REPLY = "<IIIII"    # flash, ram, stack used, stack size, arena
COST_FMT = "<I"
IN_CHUNK_HEAD = "<I"    # IN_CHUNK request: u32 offset, then the chunk's bytes; reply: u32 received
OUT_CHUNK_REQ = "<IH"   # OUT_CHUNK request: u32 offset, u16 n; reply: u32 offset, then n bytes
RESET_REPLY = "<I"      # RESET request: no payload; reply: u32 the board's boot id
PEROP_REQ = "<HH"       # PEROP request: u16 first op slot, u16 runs (first 0: run that often)
PEROP_HEAD = "<HHHII"   # PEROP reply: u16 slots, u16 first, u16 count, u32 timer overhead,
                        # u32 tail (the schedule's return, after the last op's window),
PEROP_PAGE = 32         # ... then count (<= PEROP_PAGE) x u32 cost of the slots from first
ACT_REPLY_HEAD = "<I"   # ACT request: the observation's f32s; reply: u32 cost, the action's f32s


# ------------------------------------------------------------------- zero-run coded inputs
ZRUN_MAX = 255   # zero bytes one run token stands for


_ZERO_RUN = re.compile(rb"\x00{1,%d}" % ZRUN_MAX)
_RUN_TOKEN = re.compile(rb"\x00(.?)", re.S)    # a run token; its length byte, if any


def zrun_encode(data: bytes) -> bytes:
    """INFER_Z's coding of the inputs' bytes: a nonzero byte stands for itself; 0x00, k (k in
    1..255) stands for k zero bytes. Lossless, and never longer than 2 bytes per byte. (A
    regular expression finds the runs: a HIL step codes 1,600 bytes, no Python loop per byte.)"""
    return _ZERO_RUN.sub(lambda m: bytes((0, len(m.group()))), bytes(data))


def zrun_decode(code: bytes, size: int) -> bytes:
    """The `size` bytes `code` stands for; ValueError when it is malformed (a run of length 0,
    a run token cut off) or stands for another number of bytes: the board's checks. Tokens
    cannot be misread: between two run tokens every byte is a nonzero literal."""
    code = bytes(code)
    for m in _RUN_TOKEN.finditer(code):
        if m.group(1) == b"":
            raise ValueError("a zero run token without its length")
        if m.group(1) == b"\x00":
            raise ValueError("a zero run of length 0")
    out = _RUN_TOKEN.sub(lambda m: bytes(m.group(1)[0]), code)
    if len(out) != size:
        raise ValueError(f"the code stands for {len(out)} bytes, "
                         f"{'more' if len(out) > size else 'fewer'} than the inputs' {size}")
    return out


# ------------------------------------------------------------------------ streamed tensors
def streamed(nbytes: int, max_payload: int) -> bool:
    """Whether tensors of `nbytes` (all inputs, or all outputs) go in chunks: only when they do
    not fit one frame, so a small model's INFER stays one frame each way."""
    return nbytes > max_payload


def chunk_spans(total: int, chunk: int, start: int = 0) -> list[tuple[int, int]]:
    """(offset, length) of the chunks that carry bytes [start, total), `chunk` bytes each (the
    last may be shorter)."""
    if chunk < 1:
        raise ValueError(f"a chunk must hold at least one byte, not {chunk}")
    return [(off, min(chunk, total - off)) for off in range(start, total, chunk)]


class InputStream:
    """The board's side of IN_CHUNK (the firmware's harness.c and the agent do the same): the
    bytes received in order so far, written straight into `buf` (the input tensors).

    A chunk may start anywhere up to `received` (0 starts again; a re-sent chunk rewrites what
    it wrote before) and sets `received` to its end; a chunk that would leave a gap (offset >
    received) is not written. The reply is `received`, so a host whose chunk was not taken
    resumes from there. INFER needs received == len(buf)."""

    def __init__(self, buf: bytearray):
        self.buf = buf
        self.received = 0

    def write(self, offset: int, data: bytes) -> int:
        if offset + len(data) > len(self.buf):
            raise ValueError(f"a chunk of {len(data)} B at offset {offset} ends beyond the "
                             f"inputs' {len(self.buf)} B")
        if offset <= self.received:
            self.buf[offset : offset + len(data)] = data
            self.received = offset + len(data)
        return self.received

    @property
    def complete(self) -> bool:
        return self.received == len(self.buf)


# ------------------------------------------------------------------------------ C header
def c_header() -> str:
    lines = [
        "/* GENERATED by `python -m quarl_edge.link.protocol --header` from quarl_edge/link/protocol.py.",
        " * Do not edit: change the Python constants and regenerate (a test checks they agree).",
        " * The wire format is described in docs/protocol.md. */",
        "#ifndef QE_PROTOCOL_H",
        "#define QE_PROTOCOL_H",
        "",
        f"#define QE_PROTO_VERSION {VERSION}",
        f"#define QE_PROTO_SYNC0 0x{SYNC[0]:02X}",
        f"#define QE_PROTO_SYNC1 0x{SYNC[1]:02X}",
        f"#define QE_PROTO_HEADER_SIZE {HEADER_SIZE}",
        f"#define QE_PROTO_CRC_SIZE {CRC_SIZE}",
        f"#define QE_PROTO_PAD_SIZE {PAD_SIZE}",
        f"#define QE_PROTO_REPLY_BIT 0x{REPLY_BIT:02X}",
        f"#define QE_PROTO_CMD_ERROR 0x{CMD_ERROR:02X}",
        f"#define QE_PROTO_BOOT_SEQ {BOOT_SEQ}",
        f"#define QE_PROTO_BOOT_NONCE {BOOT_NONCE}u",
        "",
    ]
    lines += [f"#define QE_CMD_{name} 0x{code:02X}" for name, code in COMMANDS.items()]
    lines.append("")
    lines += [f"#define QE_ERR_{name} {code}  /* {text} */" for code, (name, text) in ERRORS.items()]
    lines.append("")
    lines += [f"#define QE_DTYPE_{name.upper()} {code}" for code, name in DTYPES.items()]
    lines.append("")
    lines += [f"#define QE_COST_{name.upper()} {code}" for code, name in COST_UNITS.items()]
    lines += ["", "#endif /* QE_PROTOCOL_H */", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--header"]:
        sys.stdout.write(c_header())
    else:
        sys.exit("usage: python -m quarl_edge.link.protocol --header")
