"""What a board says, checked before it is used: its HELLO against the model and the board file,
its MEM, BENCH and INFER costs against the board's limits and the wall clock.

A board's replies are input like any file: a damaged or foreign firmware, a wrong port or a
board that lies must end in a BoardError that says the board sent something impossible, never
in a measurement (a 4 GB stack on a board with 2 KiB of RAM, an inference that took longer
than the exchange that carried it, tensor specs that are not the model's)."""
from __future__ import annotations

import struct
from pathlib import Path

from ..converters.tensor import TensorSpec
from ..core.errors import ProtocolError
from . import protocol as P
from ..converters.tflite_model import load

# The smallest max_payload a board may announce (the board files' own minimum): below it the
# host's chunks of streamed tensors would not fit a frame.
MIN_MAX_PAYLOAD = 32
# Slack on the wall-clock bound of a cost: the host's clock and the board's may tick apart.
CLOCK_SLACK = 1.05
CLOCK_SLACK_S = 0.002
# Quantized dtypes: their scale and zero point are how the host reads the board's values.
QUANTIZED = ("int8", "int16", "uint8")


def impossible(url: str, what: str) -> ProtocolError:
    """The one error for a reply that cannot be true (a ProtocolError: a BoardError that is
    not a valid reply)."""
    return ProtocolError(f"the board on {url} sent something impossible, not a measurement: "
                      f"{what} (a damaged or foreign firmware, or another device on this port?)")


def model_specs(model_path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The model's graph inputs and outputs as a board must report them."""
    m = load(model_path)

    def spec(t) -> TensorSpec:
        if t.dtype in QUANTIZED and t.quantization is not None:
            scale = struct.unpack("<f", struct.pack("<f", t.scale))[0]   # as the wire has it
            return TensorSpec(t.dtype, tuple(t.shape), scale, t.zero_point)
        return TensorSpec(t.dtype, tuple(t.shape), 0.0, 0)
    return [spec(t) for t in m.input_tensors()], [spec(t) for t in m.output_tensors()]


def _same(board: TensorSpec, model: TensorSpec) -> bool:
    if (board.dtype, tuple(board.shape)) != (model.dtype, tuple(model.shape)):
        return False
    if model.dtype not in QUANTIZED:
        return True        # float32 and int32 values are read without scale or zero point
    return (board.scale, board.zero_point) == (model.scale, model.zero_point)


def _describe(s: TensorSpec) -> str:
    q = f" scale {s.scale:g} zero point {s.zero_point}" if s.dtype in QUANTIZED else ""
    return f"{s.dtype} {list(s.shape)}{q}"


def describe(specs: list[TensorSpec]) -> str:
    """Tensor specs as a message names them: 'float32 [1, 4], int8 [1, 2] scale 0.1 ...'."""
    return ", ".join(map(_describe, specs)) or "none"


def check_hello(url: str, info: P.Hello, board, model_path: Path) -> None:
    """The HELLO of a board that runs `model_path` (its hash already checked): the tensor specs
    equal to the model's, the cost unit the board file's, max_payload and the arena within the
    board's limits."""
    inputs, outputs = model_specs(model_path)
    for what, got, want in (("inputs", info.inputs, inputs), ("outputs", info.outputs, outputs)):
        if len(got) != len(want):
            raise impossible(url, f"HELLO names {len(got)} {what}; the model has {len(want)}")
        for k, (g, w) in enumerate(zip(got, want)):
            if not _same(g, w):
                raise impossible(url, f"HELLO's {what[:-1]} {k} is {_describe(g)}; the model's "
                                      f"is {_describe(w)}")
    if info.cost_unit != board.cost_unit:
        raise impossible(url, f"HELLO's cost unit is {info.cost_unit}; board {board.id}'s is "
                              f"{board.cost_unit}")
    if not MIN_MAX_PAYLOAD <= info.max_payload <= board.max_payload:
        raise impossible(url, f"HELLO's max_payload is {info.max_payload} B; board {board.id} "
                              f"takes {MIN_MAX_PAYLOAD}..{board.max_payload}")
    if board.ram_bytes and info.arena_bytes > board.ram_bytes:
        raise impossible(url, f"HELLO's arena is {info.arena_bytes:,} B; board {board.id} has "
                              f"{board.ram_bytes:,} B of RAM")


def check_mem(url: str, m, board, info: P.Hello) -> None:
    """MEM's figures: within the board file's flash and RAM, the stack's high-water within the
    stack, the arena the HELLO's (or 0: the board cannot tell)."""
    limits = (("flash", m.flash_bytes, board.flash_bytes, "flash"),
              ("static RAM", m.ram_bytes, board.ram_bytes, "RAM"),
              ("stack", m.stack_size, board.ram_bytes, "RAM"),
              ("arena", m.arena_bytes, board.ram_bytes, "RAM"))
    for what, value, limit, of in limits:
        if limit and value > limit:
            raise impossible(url, f"MEM reports {value:,} B of {what}; board {board.id} has "
                                  f"{limit:,} B of {of}")
    if m.stack_used > m.stack_size:
        raise impossible(url, f"MEM reports {m.stack_used:,} B of stack used in a stack of "
                              f"{m.stack_size:,} B")
    if m.arena_bytes not in (0, info.arena_bytes):
        raise impossible(url, f"MEM reports an arena of {m.arena_bytes:,} B; its HELLO said "
                              f"{info.arena_bytes:,} B")


def cost_rate(board, unit: str) -> float | None:
    """Cost units per wall-clock second a board cannot exceed, or None when its costs have no
    such bound (instructions, an emulator's cycles, a clock the board file does not give)."""
    if unit == "ns":
        return 1e9
    if unit == "cycles" and board.kind == "real" and board.clock_hz:
        return float(board.clock_hz)
    return None


def check_cost(url: str, what: str, cost: float, rate: float | None, elapsed_s: float) -> None:
    """A cost (one inference's, or BENCH's sum) measured within an exchange that took
    `elapsed_s` on the host's clock: at most what that time allows."""
    if rate is None:
        return
    bound = (elapsed_s * CLOCK_SLACK + CLOCK_SLACK_S) * rate
    if cost > bound:
        raise impossible(url, f"{what} is {cost:,.0f}, more than the {elapsed_s * 1e3:.1f} ms "
                              f"the exchange took allow ({bound:,.0f})")


def check_bench(url: str, n: int, cnt: int, lo: int, hi: int, total: int,
                inferred: bool = True) -> None:
    """BENCH's n, min, max and sum: n as asked, min <= max, and a sum between n x min and
    n x max; or, before the first INFER (`inferred` False), all zeros (the protocol's answer
    then)."""
    if not inferred and (cnt, lo, hi, total) == (0, 0, 0, 0):
        return
    if cnt != n:
        raise impossible(url, f"BENCH reports {cnt} inferences; {n} were asked for")
    if lo > hi or not n * lo <= total <= n * hi:
        raise impossible(url, f"BENCH reports min {lo:,}, max {hi:,} and a sum of {total:,} "
                              f"over {n} inferences")
