"""The int8 FULLY_CONNECTED cases of the optimized-kernel checkers (tests/c/fc_kernels_check.c,
tests/c/fc_avr_check.c): the Case record and its encoding, the hypothesis strategy, the
deterministic edge cases, and the Python twins the kernels' outputs must equal
(tests/test_kernels_optimized*.py, issue 25 split them out of one file)."""
from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from quarl_edge.converters import qmath
from quarl_edge.converters.ops.optimized.avr.fully_connected import avr_fc_stream, avr_output_stage
from quarl_edge.converters.ops.optimized.common import PACKED_MAX_DEPTH
from quarl_edge.converters.ops.optimized.cortex_m0.fully_connected import (bytes_fc_words,
                                                                           pairs_fc_stream, step_table,
                                                                           saturation_bounds)
from quarl_edge.converters.ops.optimized.cortex_m_dsp.fully_connected import (dsp_mm_stage, mm_params,
                                                                               pack_fc_mm, pack_fc_weights)

ROOT = Path(__file__).resolve().parents[1]
FW = ROOT / "firmware"
CHECK = ROOT / "tests" / "c" / "fc_kernels_check.c"
VARIANT = "cortex-m-dsp"
VARIANT_FC = FW / "core" / "kernels" / "optimized" / VARIANT / "fully_connected.c"
# the ARMv6-M variant: only the packed kernel (its other FC functions are the reference's own)
M0_VARIANT = "cortex-m0"
M0_FC = FW / "core" / "kernels" / "optimized" / M0_VARIANT / "fully_connected.c"
M0_DEFINES = ("-DQE_CHECK_UNRENAMED_REFERENCE", "-DQE_CHECK_SMALL_RAM", "-DQE_CHECK_PAIRS_LAYOUT")
M0_HOST_DEFINES = ("-DQE_CHECK_UNRENAMED_REFERENCE", "-DQE_CHECK_PAIRS_LAYOUT")   # host buffers
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
# the emulated boards whose cores have the DSP extension (Cortex-M4/M7/M33)
DSP_BOARDS = ("mps2-an386", "mps2-an500", "mps2-an505", "netduinoplus2")

S8, PC, ACC, PACKED = 0, 1, 2, 3   # PACKED: kind S8 through the generator's packed layout
AVR = 4                           # kind S8 through the avr variant's stream (avr_fc_stream)
PAIRS = 5                         # kind S8 through the cortex-m0 variant's row pairs (pairs_fc_stream)
MM = 6                            # kind S8, one batch, through the cortex-m-dsp mm stream (pack_fc_mm)
BYTES = 7                         # kind S8, any depth, through the cortex-m0 variant's byte lanes (bytes_fc_words)
# the 8-bit AVR variant: only qe_fully_connected_s8_avr (its other FC functions are the reference's)
AVR_VARIANT = "avr"
AVR_FC = FW / "core" / "kernels" / "optimized" / AVR_VARIANT / "fully_connected.c"
AVR_DEFINES = ("-DQE_CHECK_UNRENAMED_REFERENCE", "-DQE_CHECK_AVR_LAYOUT")


# ------------------------------------------------------------------------------ cases
@dataclasses.dataclass
class Case:
    kind: int
    batches: int
    depth: int
    rows: int
    input_offset: int
    filter_offset: int
    output_offset: int
    multiplier: int
    shift: int
    act_min: int
    act_max: int
    channel_stride: int
    in_misalign: int
    w_misalign: int
    x: np.ndarray            # int8 [batches * depth]
    w: np.ndarray            # int8 [rows * depth]
    bias: np.ndarray | None  # int32 [rows]
    mults: np.ndarray        # int32 [rows] (per channel)
    shifts: np.ndarray       # int8 [rows]
    scales: np.ndarray       # float32 [rows] (accumulator readout)

    def encode(self) -> bytes:
        packed = None
        if self.kind == PACKED:     # the generator's own packing function
            packed = pack_fc_weights(self.w.reshape(self.rows, self.depth), self.bias,
                                     self.input_offset, self.filter_offset)
        if self.kind == AVR:
            stream, bias_p, _ = self.avr_stream()
            packed = (stream, bias_p, stream.size)
        if self.kind == PAIRS:
            stream, bias_p, _ = pairs_fc_stream(self.w.reshape(self.rows, self.depth), self.bias,
                                                self.input_offset, self.filter_offset)
            packed = (stream, bias_p, stream.size)
        if self.kind == BYTES:
            laid = bytes_fc_words(self.w.reshape(self.rows, self.depth), self.bias,
                                  self.input_offset, self.filter_offset)
            assert laid is not None, "not a bytes case (see as_bytes)"
            packed = (laid[0], laid[1], laid[0].size)
        if self.kind == MM:
            stream = pack_fc_mm(self.w.reshape(self.rows, self.depth), self.bias,
                                self.input_offset, self.filter_offset)
            assert stream is not None, "not an mm case (see as_mm)"
            f = mm_params(self.multiplier, self.shift, self.output_offset, self.depth, self.rows)
            words = [f[k] for k in ("multiplier", "round", "shift", "fix", "entry",
                                    "output_depth", "accum_depth", "output_offset")]
            packed = (stream, None, stream.size)
        h = [self.kind, self.batches, self.depth, self.rows, self.input_offset, self.filter_offset,
             self.output_offset, self.multiplier, self.shift, self.act_min, self.act_max,
             int(self.bias is not None), self.channel_stride, self.in_misalign, self.w_misalign,
             packed[2] if packed else 0]
        out = struct.pack("<16i", *h) + self.x.astype(np.int8).tobytes() + self.w.astype(np.int8).tobytes()
        if self.bias is not None:
            out += self.bias.astype("<i4").tobytes()
        if self.kind == PC:
            out += self.mults.astype("<i4").tobytes() + self.shifts.astype(np.int8).tobytes()
        if self.kind == ACC:
            out += self.scales.astype("<f4").tobytes()
        if packed and self.kind in (PAIRS, BYTES):
            sat = saturation_bounds(self.multiplier, self.shift, self.output_offset, self.act_min,
                                    self.act_max)
            # the output stage's step table where the generator would give one (step_table)
            table = step_table(self.multiplier, self.shift, self.output_offset, self.act_min,
                               self.act_max, *sat)
            steps = (struct.pack("<4i", 0, 0, 0, 0) if table is None else
                     struct.pack("<4I", 1, table[0] & 0xFFFFFFFF, *table[1:3])
                     + table[3].astype("<u4").tobytes())
            out += (packed[0].astype("<i4" if self.kind == PAIRS else "<u4").tobytes()
                    + packed[1].astype("<i4").tobytes() + struct.pack("<2i", *sat) + steps)
        elif packed and self.kind == AVR:
            st = self.avr_stage()
            out += (packed[0].astype(np.int8).tobytes() + packed[1].astype("<i4").tobytes()
                    + struct.pack("<2i", st["sat_low"], st["sat_high"])
                    + bytes([st["fast"], *st["m_prime"], *st["round_pos"], *st["round_neg"],
                             st["byte_moves"], 0, 0, 0]))
        elif packed and self.kind == MM:
            out += struct.pack("<8i", *words) + packed[0].astype("<i4").tobytes()
        elif packed:
            out += packed[0].astype("<i4").tobytes() + packed[1].astype("<i4").tobytes()
        return out

    def avr_stage(self) -> dict:
        return avr_output_stage(self.multiplier, self.shift, self.output_offset, self.act_min,
                                self.act_max)

    def avr_stream(self):
        r = avr_fc_stream(self.w.reshape(self.rows, self.depth), self.bias, self.input_offset,
                          self.filter_offset)
        assert r is not None, "not an avr case (see as_avr)"
        return r

    @property
    def out_bytes(self) -> int:
        return self.batches * self.rows * (4 if self.kind == ACC else 1)


def multiplier_and_shift(draw_int) -> tuple[int, int]:
    """A QuantizeMultiplier result: 0, or in [2^30, 2^31) (extremes included), shift in [-31, 30]."""
    m = draw_int(0, 5)
    mult = {0: 0, 1: 1 << 30, 2: INT32_MAX}.get(m) or draw_int(1 << 30, INT32_MAX)
    return mult, draw_int(-31, 30)


@st.composite
def fc_case(draw, kind=None, max_depth=300, max_rows=70) -> Case:
    i = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
    kind = i(0, 3) if kind is None else kind
    batches, depth, rows = i(1, 3), i(1, max_depth), i(1, max_rows)
    # zero points are int8: offsets -zp in [-127, 128]; per-channel and head weights symmetric
    io = i(-127, 128)
    if kind in (PACKED, PAIRS):
        depth = min(depth, PACKED_MAX_DEPTH)
    fo = i(-127, 128) if kind in (S8, PACKED, AVR, PAIRS, BYTES) and i(0, 2) else 0
    rng = np.random.default_rng(i(0, 2**32 - 1))
    style = i(0, 3)     # uniform, extremes only, mostly zeros, narrow
    def int8s(n):
        if style == 1:
            return rng.choice(np.array([-128, -127, 0, 127], np.int8), n)
        if style == 2:
            return np.where(rng.random(n) < 0.8, 0, rng.integers(-128, 128, n)).astype(np.int8)
        if style == 3:
            return rng.integers(-3, 4, n).astype(np.int8)
        return rng.integers(-128, 128, n).astype(np.int8)
    x, w = int8s(batches * depth), int8s(rows * depth)
    # the generator's bound: the worst-case sum of |terms| (and |bias|) fits int32
    worst = depth * (128 + abs(fo)) * (128 + abs(io))
    bias = None
    if i(0, 3):
        lim = INT32_MAX - worst
        bias_style = i(0, 2)
        span = {0: 1 << 12, 1: 1 << 20, 2: lim}[bias_style]
        bias = rng.integers(-span, span, rows, endpoint=True).astype(np.int32)
    mult, shift = multiplier_and_shift(i)
    mults = np.where(rng.random(rows) < 0.2, rng.choice([0, 1 << 30, INT32_MAX], rows),
                     rng.integers(1 << 30, INT32_MAX, rows, endpoint=True))
    shifts = rng.integers(-31, 31, rows)
    if i(0, 3):
        # mostly, as in a real model: the shift that brings the largest accumulator to ~100,
        # so that the outputs spread over the int8 range instead of saturating
        acc = ((w.reshape(rows, depth).astype(np.int64) + fo)
               @ (x.reshape(batches, depth).astype(np.int64) + io).T)
        if bias is not None:
            acc += bias[:, None]
        fit = np.floor(np.log2(100.0 / np.maximum(np.abs(acc).max(axis=1), 1))).astype(np.int64)
        shifts = np.clip(fit + rng.integers(-1, 2, rows), -31, 30)
        shift = int(np.clip(fit.min() + i(-1, 1), -31, 30))
    shifts = shifts.astype(np.int8)
    lo = i(-128, 127)
    hi = i(lo, 127)
    scales = (rng.standard_normal(rows) * 10.0 ** rng.integers(-8, 2, rows)).astype(np.float32)
    c = Case(kind, batches, depth, rows, io, fo, i(-128, 127), mult, shift, lo, hi,
             i(0, 1) if kind not in (S8, PACKED, AVR, PAIRS, BYTES) else 0, i(0, 3), i(0, 3), x, w, bias, mults,
             shifts, scales)
    return as_avr(c) if kind == AVR else as_bytes(c) if kind == BYTES else c


def as_bytes(c: Case) -> Case:
    """A case for the byte lanes (kind BYTES): every w' = w + filter_offset an int8, so the
    filter offset is clamped into the range the weights allow (0 always is: w is an int8)."""
    fo = int(np.clip(c.filter_offset, -128 - int(c.w.min()), 127 - int(c.w.max())))
    return dataclasses.replace(c, kind=BYTES, filter_offset=fo)


def as_avr(c: Case) -> Case:
    """c as a case of the avr layout: kind AVR, the weights clipped so that w + filter_offset is
    an int8 (the generator's condition for the layout; the bounds stay the generator's)."""
    w = np.clip(c.w.astype(np.int64), -128 - c.filter_offset, 127 - c.filter_offset)
    w = np.clip(w, -128, 127).astype(np.int8)
    return dataclasses.replace(c, kind=AVR, w=w, channel_stride=0)


def edge_cases() -> list[Case]:
    """Every depth remainder mod 4 around the 4-wide loop, one and two rows (the pair loop and
    its odd tail), every misalignment, offsets at their ends, the largest accumulators."""
    rng = np.random.default_rng(7)
    out = []
    for depth in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 300):
        for rows in (1, 2, 3):
            for kind in (S8, PC, ACC):
                mis = len(out) % 4
                for io, fo, fill in ((128, 128 if kind == S8 else 0, -128), (-127, -127 if kind == S8 else 0, 127),
                                     (5, -3 if kind == S8 else 0, None)):
                    n_x, n_w = 2 * depth, rows * depth
                    x = np.full(n_x, fill, np.int8) if fill is not None else rng.integers(-128, 128, n_x).astype(np.int8)
                    w = np.full(n_w, fill, np.int8) if fill is not None else rng.integers(-128, 128, n_w).astype(np.int8)
                    worst = depth * (128 + abs(fo)) * (128 + abs(io))
                    bias = np.array([INT32_MAX - worst, -(INT32_MAX - worst), 0][:rows], np.int32)
                    out.append(Case(kind, 2, depth, rows, io, fo, -1, (1 << 30) + 12345, -31 + len(out) % 62,
                                    -128, 127, 1, mis, (mis + 1) % 4, x, w, bias,
                                    np.array([INT32_MAX, 1 << 30, 0][:rows], np.int64),
                                    np.array([30, -31, 0][:rows], np.int8),
                                    np.array([1.0, -3.5e-6, 7.25e3][:rows], np.float32)))
    return out


def packed_edge_cases(max_depth: int = PACKED_MAX_DEPTH) -> list[Case]:
    """The packed layout's edges: every depth remainder mod 4 and mod 8 (the two-quad loop and
    its one-quad tail, the zero-padded last quad), 1..9 rows (full and padded row groups), the
    offsets at their ends with extreme weights, the largest biases, every misalignment, every
    shift, and the variants' output-stage paths (full range, RELU, other bounds)."""
    rng = np.random.default_rng(13)
    out = []
    for depth in sorted({1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 63, 64, 65, max_depth}):
        for rows in (1, 3, 4, 5, 8, 9):
            for io, fo, fill in ((128, 128, -128), (-127, -127, 127), (5, -3, None), (-1, 0, None)):
                n_x, n_w = 2 * depth, rows * depth
                x = np.full(n_x, fill, np.int8) if fill is not None else rng.integers(-128, 128, n_x).astype(np.int8)
                w = np.full(n_w, fill, np.int8) if fill is not None else rng.integers(-128, 128, n_w).astype(np.int8)
                worst = depth * (128 + abs(fo)) * (128 + abs(io))
                bias = np.resize(np.array([INT32_MAX - worst, -(INT32_MAX - worst), 0, 17], np.int64),
                                 rows).astype(np.int32)
                k = len(out)
                # output offsets -128 and 127 too: the cortex-m-dsp mm output stage with and
                # without its sign fix (dsp.h, requant_mm_t)
                mis, oo = k % 4, {0: -128, 3: 127}.get(k % 6, -1 + k % 3)
                # the output stages: full int8 range, RELU [offset, 127], other bounds
                lo, hi = ((-128, 127), (oo, 127), (-128 + k % 7, 127 - k % 5))[k % 3]
                out.append(Case(PACKED, 2, depth, rows, io, fo, oo, (1 << 30) + 12345 + 977 * k,
                                -31 + k % 62, lo, hi, 0, mis, (mis + 1) % 4,
                                x, w, bias if len(out) % 5 else None, np.zeros(rows, np.int64),
                                np.zeros(rows, np.int8), np.ones(rows, np.float32)))
    return out


def mm_stage_cases() -> list[Case]:
    """The cortex-m-dsp variant's four-instruction output stage (dsp.h, requant_mm_t: right shift
    e in [1, 21], multiplier >= 2^30, the full int8 range; the sign fix unless the output offset
    is -128) and its edges: e = 1, 2, 3 (rounding ties on both signs are frequent), 21 and 22 (the
    last with it and the first without), multipliers 2^30 - 1 (not normalized: the other stage),
    2^30 and 2^31 - 1, offsets -128 (no sign fix), -127, -1, 0, 5, 127, accumulators around 0 and
    at +-2^30 (where QADD(x, x) saturates) and the largest the generator admits; whole and padded
    row groups, one and several quads."""
    rng = np.random.default_rng(4)
    out = []
    big = [0, 1, -1, (1 << 30) - 1, 1 << 30, -(1 << 30), -(1 << 30) - 1, (1 << 30) + 1,
           INT32_MAX - 33 * 128 * 128, -(INT32_MAX - 33 * 128 * 128), 12345, -12345]
    for shift in (-1, -2, -3, -7, -21, -22):
        for mult in ((1 << 30) - 1, 1 << 30, (1 << 30) + 977 * (shift % 7), INT32_MAX):
            for oo in (-128, -127, -1, 0, 5, 127):
                for depth, rows in ((4, 8), (8, 5), (33, 4)):
                    k = len(out)
                    x = rng.integers(-128, 128, 2 * depth).astype(np.int8)
                    w = rng.integers(-128, 128, rows * depth).astype(np.int8)
                    # accumulators within a few units of 0 (ties for small e) from small weights
                    if k % 2:
                        w = rng.integers(-2, 3, rows * depth).astype(np.int8)
                    bias = rng.integers(-40 << (-shift), 40 << (-shift), rows).astype(np.int64)
                    if k % 3 == 0:       # the extremes, with x = 0 (the accumulator is bias')
                        x = np.zeros(2 * depth, np.int8)
                        bias = np.resize(np.roll(np.array(big, np.int64), k), rows)
                    out.append(Case(PACKED, 2, depth, rows, 0, 0, oo, mult, shift, -128, 127, 0,
                                    k % 4, (k + 1) % 4, x, w, bias.astype(np.int32),
                                    np.zeros(rows, np.int64), np.zeros(rows, np.int8),
                                    np.ones(rows, np.float32)))
    return out


def as_mm(c: Case) -> Case | None:
    """c (a per-tensor int8 case) as an mm-stream case (kind MM: its first batch, the input
    aligned), or None where the generator would not give the mm stream: a depth not a multiple of
    4 or over 128, an output stage other than dsp_mm_stage's, or the doubled bound failing."""
    if (c.kind not in (S8, PACKED, MM) or c.depth % 4 or c.depth > PACKED_MAX_DEPTH
            or not dsp_mm_stage(c.multiplier, c.shift, c.act_min, c.act_max)
            or pack_fc_mm(c.w.reshape(c.rows, c.depth), c.bias, c.input_offset,
                          c.filter_offset) is None):
        return None
    return dataclasses.replace(c, kind=MM, batches=1, x=c.x[:c.depth].copy(), in_misalign=0)


def mm_cases() -> list[Case]:
    """The mm stream's cases: the packed edge cases and mm_stage_cases where they qualify (as_mm),
    and every depth 4..128 step 4 with 1..9 rows (every MAC loop entry, whole and padded last
    groups, one to three groups), offsets -128 (no sign fix) and others, the largest accumulators
    the doubled bound admits."""
    out = [m for m in map(as_mm, packed_edge_cases() + mm_stage_cases()) if m is not None]
    rng = np.random.default_rng(41)
    for depth in range(4, PACKED_MAX_DEPTH + 1, 4):
        for rows in (1 + depth // 4 % 9, 4 + depth // 8 % 6):
            k = len(out)
            x = rng.integers(-128, 128, depth).astype(np.int8)
            w = rng.integers(-128, 128, rows * depth).astype(np.int8)
            io, fo = (int(rng.integers(-127, 129)), 0) if k % 2 else (128, 0)
            oo = (-128, 127, -1, 5)[k % 4]
            wp = w.reshape(rows, depth).astype(np.int64)
            room = (1 << 30) - 1 - 128 * np.abs(wp).sum(axis=1) - np.abs(io * wp.sum(axis=1))
            bias = np.where(np.arange(rows) % 2, room, -room).astype(np.int64) \
                if k % 3 == 0 else rng.integers(-5000, 5000, rows)
            case = Case(MM, 1, depth, rows, io, fo, oo, (1 << 30) + 7919 * k, -1 - k % 21,
                        -128, 127, 1, 0, k % 4, x, w, bias.astype(np.int32),
                        np.zeros(rows, np.int64), np.zeros(rows, np.int8),
                        np.ones(rows, np.float32))
            assert as_mm(case) is not None
            out.append(case)
    return out


def shrunk_case() -> Case:
    """The case hypothesis shrank test_random_cases_under_sanitizers to when UBSan reported
    `acc += p->output_offset` (fully_connected.c:32) overflowing: (92 + 0) * (32 + 3) = 3220,
    3220 * 2^29 wraps to INT32_MIN in int32, SaturatingRoundingDoublingHighMul with 2^31 - 1
    gives INT32_MIN + 1, and + (-2) overflowed."""
    return Case(S8, 1, 1, 1, 3, 0, -2, INT32_MAX, 29, -128, 127, 0, 0, 0,
                np.array([32], np.int8), np.array([92], np.int8), None,
                np.array([0], np.int64), np.array([0], np.int8), np.array([1.0], np.float32))


def saturating_accumulators(shift: int) -> list[int]:
    """Accumulators that a multiplier near 2^31 at `shift` takes to within 2^shift of INT32_MIN
    or INT32_MAX (acc * 2^shift wraps in int32, as TFLM's and our arithmetic do)."""
    if shift <= 0:
        return [INT32_MAX, -INT32_MAX, INT32_MAX - 100, -INT32_MAX + 100, 0]
    k = 1 << (31 - shift)
    return [k,                  # wraps to INT32_MIN
            -k,                 # exactly INT32_MIN
            k - 1,              # INT32_MAX - (2^shift - 1)
            -k + 1,             # INT32_MIN + 2^shift
            k + 2 * k,          # wraps to INT32_MIN again, a larger accumulator
            3 * k // 2 if k > 1 else 3,
            0]


def output_stage_cases() -> list[Case]:
    """The requantization extremes, deterministic: multipliers up to 2^31 - 1, shifts up to 30,
    output offsets -128, 127 and -2, input offsets -127, 128 and 3, accumulators whose
    requantized value saturates at INT32_MIN / INT32_MAX (so that TFLM's `+ output_offset`
    overflows int32), every kind, one and several rows (the optimized pair loop and its tail),
    inside the generator's bounds (the worst-case sum of |terms| and |bias| fits int32)."""
    rng = np.random.default_rng(2024)
    out = [shrunk_case()]
    mult_shifts = [(INT32_MAX, 30), (INT32_MAX, 29), (INT32_MAX, 28), (INT32_MAX - 1, 30),
                   ((1 << 31) - 256, 29), (1 << 30, 30), ((1 << 30) + 12345, 27), (INT32_MAX, 6),
                   (INT32_MAX, 1), (INT32_MAX, 0), (INT32_MAX, -1), (0, 30)]
    bounds = [(-128, 127), (-128, -128), (127, 127), (-5, 5)]
    n = 0
    for kind in (S8, PC, ACC, PACKED):
        for io in (-127, 128, 3):
            for oo in (-128, 127, -2):
                for mult, shift in mult_shifts:
                    n += 1
                    fo = (0, 128, -127)[n % 3] if kind in (S8, PACKED) else 0
                    lo, hi = bounds[n % len(bounds)]
                    if n % 5 == 0:                     # RELU: from the zero point up
                        lo, hi = max(-128, oo), 127
                    depth = (1, 2, 5)[n % 3]
                    accs = saturating_accumulators(shift)
                    if kind == PC:                     # per-channel: each row its own shift
                        shifts = [(30, 29, 28, 0, 1)[(n + r) % 5] for r in range(len(accs))]
                        accs = [saturating_accumulators(sh)[r % 7 if sh > 0 else r % 5]
                                for r, sh in enumerate(shifts)]
                    else:
                        shifts = [shift] * len(accs)
                    rows = len(accs)
                    batches = 1 + n % 2
                    # inputs and weights at their ends, so that the dot product can reach
                    # +-worst and the accumulators +-INT32_MAX
                    x = rng.choice(np.array([-128, 127], np.int8), batches * depth)
                    worst = depth * (128 + abs(fo)) * (128 + abs(io))
                    lim = INT32_MAX - worst
                    xin = x[:depth].astype(np.int64) + io
                    w = np.empty((rows, depth), np.int8)
                    bias = np.empty(rows, np.int64)
                    for r, target in enumerate(accs):
                        # each weight at the end that pushes the first batch's sum toward target
                        want = np.sign(target) * np.sign(xin)
                        w[r] = np.where(want > 0, 127, -128)
                        dot = int(((w[r].astype(np.int64) + fo) * xin).sum())
                        bias[r] = int(np.clip(target - dot, -lim, lim))
                    mults = np.array([mult if r % 4 else INT32_MAX for r in range(rows)], np.int64)
                    if kind != PC:
                        mults[:] = mult
                    out.append(Case(kind, batches, depth, rows, io, fo, oo, mult, shift, lo, hi,
                                    1 if kind not in (S8, PACKED) else 0, n % 4, (n + 1) % 4, x, w.reshape(-1),
                                    bias.astype(np.int32), mults, np.array(shifts, np.int8),
                                    np.array([1.0, -3.5e-6, 7.25e3, 2.0**-20, -1.0, 0.5, 3.0][:rows],
                                             np.float32)))
    return out


def twin_outputs(c: Case) -> bytes:
    """What the kernels must write, from the Python twins: the int32 sums (exact: the
    generator's bounds keep every partial sum in int32), then qmath.requantize_output per
    value (int8 kinds) or (float)acc * scale in float32 (the accumulator readout)."""
    x = c.x.astype(np.int64).reshape(c.batches, c.depth)
    w = c.w.astype(np.int64).reshape(c.rows, c.depth)
    acc = (x + c.input_offset) @ (w + c.filter_offset).T           # [batches][rows]
    if c.bias is not None:
        acc = acc + c.bias.astype(np.int64)
    assert np.abs(acc).max() <= INT32_MAX
    ch = [r * c.channel_stride for r in range(c.rows)]
    if c.kind == ACC:
        scales = c.scales[ch].astype(np.float32)
        return (acc.astype(np.int32).astype(np.float32) * scales).astype("<f4").tobytes()
    if c.kind == PC:
        ms = [(int(c.mults[k]), int(c.shifts[k])) for k in ch]
    else:
        ms = [(c.multiplier, c.shift)] * c.rows
    vals = [qmath.requantize_output(int(acc[b, r]), *ms[r], c.output_offset, c.act_min, c.act_max)
            for b in range(c.batches) for r in range(c.rows)]
    return np.array(vals, np.int8).tobytes()


def int32_add_overflows(c: Case) -> bool:
    """Whether TFLM's int32 `requant(acc) + output_offset` overflows for some output of c."""
    if c.kind == ACC:
        return False
    x = c.x.astype(np.int64).reshape(c.batches, c.depth)
    w = c.w.astype(np.int64).reshape(c.rows, c.depth)
    acc = (x + c.input_offset) @ (w + c.filter_offset).T + (0 if c.bias is None else c.bias)
    for b in range(c.batches):
        for r in range(c.rows):
            k = r * c.channel_stride
            m, sh = (int(c.mults[k]), int(c.shifts[k])) if c.kind == PC else (c.multiplier, c.shift)
            v = qmath.multiply_by_quantized_multiplier(int(acc[b, r]), m, sh) + c.output_offset
            if not INT32_MIN <= v <= INT32_MAX:
                return True
    return False


def avr_output_stage_cases() -> list[Case]:
    """The avr output stage's paths, each reached on purpose: accumulators (as the bias, the
    input 0) at and around sat_low and sat_high, and strictly between them of 16 and of 24 bits
    (the two- and three-row products), both signs, for right shifts 1..31 (byte_moves 0..3, and
    the shifts where fast is 0), multipliers at their ends, RELU and narrow bounds, every offset."""
    rng = np.random.default_rng(31)
    out = []
    for n, shift in enumerate(list(range(-31, 1)) * 2):
        mult = [1 << 30, INT32_MAX, int(rng.integers(1 << 30, INT32_MAX))][n % 3]
        oo = [-128, 127, -3, 40][n % 4]
        lo, hi = [(-128, 127), (max(-128, oo), 127), (-100, -90), (5, 6), (0, 0)][n % 5]
        st = avr_output_stage(mult, shift, oo, lo, hi)
        lim = INT32_MAX - 128 * 128
        targets = [st["sat_low"] + d for d in (-1, 0, 1)] + [st["sat_high"] + d for d in (-1, 0, 1)]
        a, b = max(st["sat_low"], -lim), min(st["sat_high"], lim)
        if a + 1 < b:
            targets += [int(v) for v in rng.integers(a + 1, b, 8)]
            targets += [v for v in (-32769, -32768, -32767, -1, 0, 1, 32767, 32768, (1 << 23) - 1,
                                    -(1 << 23)) if a < v < b]
        targets = [int(np.clip(t, -lim, lim)) for t in targets]
        rows = len(targets)
        out.append(Case(AVR, 1, 1, rows, 0, 0, oo, mult, shift, lo, hi, 0, 0, 0,
                        np.zeros(1, np.int8), rng.integers(-128, 128, rows).astype(np.int8),
                        np.array(targets, np.int32), np.zeros(rows, np.int64),
                        np.zeros(rows, np.int8), np.ones(rows, np.float32)))
    return out


