"""Optimized kernel variants (firmware/core/kernels/optimized/) are bit-exact with the reference.

The int8 FULLY_CONNECTED of the cortex-m-dsp variant against the reference, both compiled into
one checker (tests/c/fc_kernels_check.c) over random shapes (accum_depth 1..300, odd and
unaligned too; output_depth 1..70; batches 1..3), weights, offsets, biases, requantization
constants, per tensor, per channel and the int8-acc head:
  - on the host with gcc: the variant's portable C path (and once more under ASan/UBSan);
  - cross-compiled for each emulated Cortex-M board with the DSP extension and run under
    qemu-system-arm (the SXTAB16/SMLAD path), its files read and written through semihosting;
    those outputs must also equal the host reference's, byte for byte.
End to end: the shipped CartPole int8 policy and random int8 MLPs built with the variant for
mps2-an386 are bit-exact with TF Lite Micro (quarl_edge.measure.validate). Board files: `[build] kernels`
is validated, and the build compiles the variant's files in place of the reference's."""
from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from quarl_edge.converters import qmath
from quarl_edge.converters.ops.optimized.avr.fully_connected import (AVR_ROWS, avr_fc_stream,
                                                                     avr_output_stage,
                                                                     avr_output_stage_c)
from quarl_edge.converters.ops.optimized.common import PACKED_MAX_DEPTH
from quarl_edge.converters.ops.optimized.cortex_m0.fully_connected import (PAIRS_ROWS,
                                                                           pairs_fc_stream,
                                                                           saturation_bounds)
from quarl_edge.converters.ops.optimized.cortex_m_dsp.fully_connected import pack_fc_weights
from quarl_edge.targets.boards import all_boards, get_board, load_board_file
from quarl_edge.targets.build import (COMMON_CFLAGS, board_defines, expand_flag, firmware_sources,
                                      kernel_sources, port_dirs)
from quarl_edge.errors import BoardError, QuarlError

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
    scales: np.ndarray       # float32 [rows] (accumulator head)

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
        if packed and self.kind == PAIRS:
            out += (packed[0].astype("<i4").tobytes() + packed[1].astype("<i4").tobytes()
                    + struct.pack("<2i", *saturation_bounds(self.multiplier, self.shift,
                                                            self.output_offset, self.act_min,
                                                            self.act_max)))
        elif packed and self.kind == AVR:
            st = self.avr_stage()
            out += (packed[0].astype(np.int8).tobytes() + packed[1].astype("<i4").tobytes()
                    + struct.pack("<2i", st["sat_low"], st["sat_high"])
                    + bytes([st["fast"], *st["m_prime"], *st["round_pos"], *st["round_neg"],
                             st["byte_moves"], 0, 0, 0]))
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
    fo = i(-127, 128) if kind in (S8, PACKED, AVR, PAIRS) and i(0, 2) else 0
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
             i(0, 1) if kind not in (S8, PACKED, AVR, PAIRS) else 0, i(0, 3), i(0, 3), x, w, bias, mults,
             shifts, scales)
    return as_avr(c) if kind == AVR else c


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
    value (int8 kinds) or (float)acc * scale in float32 (the accumulator head)."""
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


# ------------------------------------------------------------------------------ checkers
def host_checker(tmp: Path, sanitize: bool = False, variant_fc: Path = VARIANT_FC,
                 defines: tuple = ()) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp / (("fc_check_san" if sanitize else "fc_check")
                 + (f"_{variant_fc.parent.name}" if defines else "")
                 + ("_small" if "-DQE_CHECK_SMALL_RAM" in defines else ""))
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"] if sanitize else []
    cmd = ["gcc", *COMMON_CFLAGS, "-O2", *san, *defines, f"-I{FW / 'core'}", str(CHECK),
           str(variant_fc), str(FW / "core" / "requant.c"), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return exe


def board_checker(board_id: str, tmp: Path, variant_fc: Path = VARIANT_FC,
                  defines: tuple = ()) -> Path:
    """The checker as bare-metal firmware for an emulated board: its start-up code, linker
    script and flags (boards/<id>.toml), the variant and the reference in one ELF."""
    board = get_board(board_id)
    if shutil.which(board.cc) is None or shutil.which("qemu-system-arm") is None:
        pytest.skip(f"{board.cc} or qemu-system-arm is not installed")
    elf = tmp / f"fc_check_{board_id}.elf"
    srcs = [CHECK, variant_fc, FW / "core" / "requant.c",
            *(c for d in port_dirs(board) for c in sorted(d.glob("*.c")))]
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           *board_defines(board), *defines, f"-I{FW / 'core'}",
           *(f"-I{d}" for d in port_dirs(board)),
           *map(str, srcs), "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return elf


# A sanitizer report exits with its own code, not the checker's 1 ("outputs differ"), so that
# it cannot pass for a mismatch and its report reaches the assertion message.
SANITIZER_EXIT = 97
SAN_ENV = {"ASAN_OPTIONS": f"exitcode={SANITIZER_EXIT}",
           "UBSAN_OPTIONS": f"exitcode={SANITIZER_EXIT}:print_stacktrace=1"}


def run_host(exe: Path, cases: list[Case]) -> tuple[int, bytes]:
    res = subprocess.run([str(exe)], input=b"".join(c.encode() for c in cases), capture_output=True,
                         timeout=120, env={**os.environ, **SAN_ENV})
    assert res.returncode in (0, 1), (res.returncode, res.stderr.decode(errors="replace")[-3000:])
    assert len(res.stdout) == 2 * sum(c.out_bytes for c in cases), (
        f"{len(res.stdout)} output bytes for {len(cases)} case(s), exit {res.returncode}; stderr: "
        + res.stderr.decode(errors="replace")[-3000:])
    return res.returncode, res.stdout


def run_board(board_id: str, elf: Path, cases: list, files=("fc_cases.bin", "fc_out.bin")
              ) -> tuple[int, bytes]:
    """Run a checker ELF under QEMU: the cases in files[0], its output from files[1]."""
    board = get_board(board_id)
    with tempfile.TemporaryDirectory(prefix="qe-fc-") as d:
        (Path(d) / files[0]).write_bytes(b"".join(c.encode() for c in cases))
        cmd = ["qemu-system-arm", "-machine", board.connect["machine"], "-kernel", str(elf),
               "-display", "none", "-monitor", "none", "-serial", "null", "-nodefaults",
               "-nic", "none", "-semihosting-config", "enable=on,target=native"]
        res = subprocess.run(cmd, cwd=d, capture_output=True, timeout=120)
        assert res.returncode in (0, 1), (res.returncode, res.stdout, res.stderr)
        return res.returncode, (Path(d) / files[1]).read_bytes()


def split(cases: list[Case], out: bytes) -> list[tuple[bytes, bytes]]:
    pairs, pos = [], 0
    for c in cases:
        n = c.out_bytes
        pairs.append((out[pos:pos + n], out[pos + n:pos + 2 * n]))
        pos += 2 * n
    assert pos == len(out), f"{len(out)} output bytes, expected {pos}"
    return pairs


def assert_same(cases, status, out, host_ref: list[bytes] | None = None, twin: bool = False):
    """optimized == reference for every case (and == the host's reference, for a board; and,
    with twin, == the Python twins' outputs)."""
    for k, (c, (ref, opt)) in enumerate(zip(cases, split(cases, out))):
        assert ref == opt, (f"case {k}: kind {c.kind} batches {c.batches} depth {c.depth} rows {c.rows} "
                            f"offsets {c.input_offset}/{c.filter_offset}: optimized != reference")
        if host_ref is not None:
            assert ref == host_ref[k], f"case {k}: the board's reference differs from the host's"
        if twin:
            assert ref == twin_outputs(c), (f"case {k}: kind {c.kind} multiplier {c.multiplier} "
                                            f"shift {c.shift} offset {c.output_offset}: the kernels "
                                            f"differ from the Python twin")
    assert status == 0


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fc_variant")


@pytest.fixture(scope="module")
def host_exe(tmp_module) -> Path:
    return host_checker(tmp_module)


@pytest.fixture(scope="module")
def m4_elf(tmp_module) -> Path:
    return board_checker("mps2-an386", tmp_module)


# ------------------------------------------------------------------------------ host
def test_edge_cases_on_the_host(host_exe):
    cases = edge_cases()
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_packed_edge_cases_on_the_host(host_exe):
    cases = packed_edge_cases()
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_packed_edge_cases_under_sanitizers(sanitized_exe):
    cases = packed_edge_cases()
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_pack_fc_weights_layout():
    """The word order of fully_connected.h, spelled out for one small case: two rows (padded to
    four), depth 5 (padded to 8), filter offset 1, input offset 2."""
    w = np.arange(10, dtype=np.int8).reshape(2, 5)          # w' = w + 1: 1..5, 6..10
    words, bias_p, d_pad = pack_fc_weights(w, np.array([100, -100], np.int32), 2, 1)
    assert d_pad == 8 and words.size == 4 * 8 // 2 and list(bias_p) == [100 + 2 * 15, -100 + 2 * 40, 0, 0]
    lo = lambda v: (int(v) & 0xFFFF) - (0x10000 if int(v) & 0x8000 else 0)  # noqa: E731
    pair = lambda v: int(v) >> 16                                           # noqa: E731
    neg, _, _ = pack_fc_weights(np.array([[-1, 0, -2, 0]], np.int8), None, 0, 0)
    assert [(lo(v), pair(v)) for v in neg[:1]] == [(-1, -2)] and int(neg[0]) == -65537  # 0xFFFE:FFFF
    # quad 0, half 0: rows 0..3 hold (w'[r][0], w'[r][2]); half 1: (w'[r][1], w'[r][3])
    assert [(lo(v), pair(v)) for v in words[0:4]] == [(1, 3), (6, 8), (0, 0), (0, 0)]
    assert [(lo(v), pair(v)) for v in words[4:8]] == [(2, 4), (7, 9), (0, 0), (0, 0)]
    # quad 1: d = 4 is real, 5..7 padding
    assert [(lo(v), pair(v)) for v in words[8:12]] == [(5, 0), (10, 0), (0, 0), (0, 0)]
    assert all(v == 0 for v in words[12:16])


def test_output_stage_cases_reach_the_int32_overflow():
    """The deterministic family really holds the inputs where TFLM's int32 `+ output_offset`
    overflows (the shrunk case among them), per tensor and per channel, at both ends."""
    cases = output_stage_cases()
    assert int32_add_overflows(shrunk_case())
    assert sum(int32_add_overflows(c) for c in cases if c.kind == S8) >= 20
    assert sum(int32_add_overflows(c) for c in cases if c.kind == PC) >= 20
    assert {c.output_offset for c in cases} >= {-128, 127}
    assert {c.input_offset for c in cases} >= {-127, 128}
    assert max(c.multiplier for c in cases) == INT32_MAX and max(c.shift for c in cases) == 30


def test_output_stage_cases_on_the_host(host_exe):
    cases = output_stage_cases()
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_checker_sees_a_difference(tmp_module):
    """A deliberately wrong variant (one off in one output) must fail the checker: the test can
    tell the two kernels apart at all."""
    bad = tmp_module / "bad_fc.c"
    bad.write_text(VARIANT_FC.read_text().replace('#include "../../fully_connected.h"',
                                                  f'#include "{FW}/core/kernels/fully_connected.h"')
                   .replace('#include "../../fully_connected.c"',
                            f'#include "{FW}/core/kernels/fully_connected.c"')
                   .replace("out[o] = requant_s8(&rq, acc);", "out[o] = (int8_t)(requant_s8(&rq, acc) ^ 1);"))
    exe = tmp_module / "fc_check_bad"
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", f"-I{FW / 'core'}", f"-I{VARIANT_FC.parent}",
                          str(CHECK), str(bad),
                          str(FW / "core" / "requant.c"), "-o", str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cases = [c for c in edge_cases() if c.kind == S8 and c.rows == 3]
    status, out = run_host(exe, cases)
    assert status == 1 and any(r != o for r, o in split(cases, out))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=1, max_size=8))
@example(cases=[shrunk_case()])
def test_random_cases_on_the_host(host_exe, cases):
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


@pytest.fixture(scope="module")
def sanitized_exe(tmp_module) -> Path:
    return host_checker(tmp_module, sanitize=True)


def test_edge_cases_under_sanitizers(sanitized_exe):
    """ASan + UBSan: no out-of-bounds access, no signed overflow (within the generator's
    bounds: the edge cases reach them)."""
    cases = edge_cases()
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_output_stage_cases_under_sanitizers(sanitized_exe):
    """The requantization extremes under ASan + UBSan (-fno-sanitize-recover: a report exits
    SANITIZER_EXIT and fails run_host): no signed overflow anywhere, reference == optimized ==
    the Python twin, which is the exact clamp of requant(acc) + offset."""
    cases = output_stage_cases()
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=1, max_size=8))
@example(cases=[shrunk_case()])
def test_random_cases_under_sanitizers(sanitized_exe, cases):
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


# ------------------------------------------------------------------------------ boards (DSP)
def test_the_dsp_path_is_compiled_for_cortex_m4(m4_elf):
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(m4_elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_fully_connected_s8>:", 1)[1].split("\n\n", 1)[0]
    assert "smlad" in body and "sxtab16" in body
    # the packed kernel: its mm output stage's asm groups and the other stages' C path
    for fn in ("mm_groups_fix", "mm_groups_nofix", "packed_other"):
        body = dis.split(f"<{fn}>:", 1)[1].split("\n\n", 1)[0]
        assert "smlad" in body and "ldmia" in body, fn
    assert "smmlar" in dis.split("<mm_groups_nofix>:", 1)[1].split("\n\n", 1)[0]


def test_edge_cases_on_cortex_m4(m4_elf, host_exe):
    cases = edge_cases()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


def test_packed_edge_cases_on_cortex_m4(m4_elf, host_exe):
    """The LDM/SMLAD loop of qe_fully_connected_s8_packed on the generator's layout, and its
    output stages (mm_stage_cases: the four-instruction one)."""
    cases = packed_edge_cases() + mm_stage_cases()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


def test_output_stage_cases_on_cortex_m4(m4_elf, host_exe):
    """The same extremes through the SXTAB16/SMLAD path and its requant_scale: == the host's
    reference and the twin."""
    cases = output_stage_cases()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=10, max_size=30))
def test_random_cases_on_cortex_m4(m4_elf, host_exe, cases):
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


@pytest.mark.parametrize("board_id", [b for b in DSP_BOARDS if b != "mps2-an386"])
def test_edge_cases_on_the_other_dsp_boards(tmp_module, host_exe, board_id):
    elf = board_checker(board_id, tmp_module)
    cases = edge_cases() + packed_edge_cases()[::3]
    _, host_out = run_host(host_exe, cases)
    status, out = run_board(board_id, elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=20, max_size=60), board_id=st.sampled_from(DSP_BOARDS))
def test_long_fuzz_on_the_dsp_boards(tmp_module, host_exe, cases, board_id):
    elf = tmp_module / f"fc_check_{board_id}.elf"
    if not elf.is_file():
        board_checker(board_id, tmp_module)
    _, host_out = run_host(host_exe, cases)
    status, out = run_board(board_id, elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


# ------------------------------------------------------------------------------ boards (ARMv6-M)
def m0_cases(cases: list[Case]) -> list[Case]:
    """The cases that fit the checker's small buffers (16 KiB of RAM on the micro:bit)."""
    return [c for c in cases if c.batches * c.depth <= 1024 and c.rows * c.depth <= 2048
            and c.rows <= 64 and ((c.rows + 3) // 4 * 4) * ((c.depth + 3) // 4 * 4) // 2 <= 1024]


@pytest.fixture(scope="module")
def m0_elf(tmp_module) -> Path:
    return board_checker("microbit", tmp_module, M0_FC, M0_DEFINES)


def test_the_m0_variant_on_the_host_under_sanitizers(tmp_module):
    """The cortex-m0 file compiles for the host (its portable path) and checks clean."""
    exe = host_checker(tmp_module, sanitize=True, variant_fc=M0_FC, defines=M0_DEFINES)
    cases = packed_edge_cases()
    status, out = run_host(exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_armv6m_path_is_compiled_for_cortex_m0(m0_elf):
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(m0_elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_fully_connected_s8_packed>:", 1)[1].split("\n\n", 1)[0]
    assert "muls" in body and "ldmia" in body and "sxth" in body


def test_packed_edge_cases_on_cortex_m0(m0_elf, host_exe):
    cases = m0_cases(packed_edge_cases())
    assert len(cases) > 300
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


def test_output_stage_cases_on_cortex_m0(m0_elf, host_exe):
    cases = [c for c in output_stage_cases() if c.kind == PACKED]
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PACKED, max_depth=96, max_rows=20), min_size=10, max_size=30))
def test_random_packed_cases_on_cortex_m0(m0_elf, host_exe, cases):
    cases = m0_cases(cases)
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


# ------------------------------------------------------------------------------ board files, build
def _board_file(tmp_path: Path, kernels) -> Path:
    src = (ROOT / "boards" / "mps2-an386.toml").read_text()
    lines = [ln for ln in src.splitlines() if not ln.startswith("kernels")]
    at = lines.index("[build]") + 1
    if kernels is not None:
        lines.insert(at, f"kernels = {kernels!r}".replace("'", '"'))
    path = tmp_path / "mps2-an386.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_board_kernels_key(tmp_path):
    assert load_board_file(_board_file(tmp_path, None)).kernels == "reference"
    assert load_board_file(_board_file(tmp_path, VARIANT)).kernels == VARIANT
    with pytest.raises(BoardError, match="'kernels' is 'cmsis'; expected one of reference, avr, cortex-m-dsp, cortex-m0"):
        load_board_file(_board_file(tmp_path, "cmsis"))


def test_only_cortex_m_boards_with_dsp_opt_in():
    """The variants are opt-in: avr only on the emulated ATmega328P (where it is validated);
    cortex-m-dsp only on cores with the DSP extension, cortex-m0 only on the nRF51 boards
    (microbit, emulated, where it is validated, and microbit-v1, the same chip, whose firmware
    also runs on QEMU's microbit)."""
    boards = all_boards()
    for b in boards.values():
        if b.kernels == AVR_VARIANT:
            assert b.id == "atmega328p" and b.cc == "avr-gcc", b.id
        elif b.kernels == M0_VARIANT:
            assert b.id in ("microbit", "microbit-v1") and "-mcpu=cortex-m0" in b.cflags, b.id
        elif b.kernels != "reference":
            assert b.kernels == VARIANT and b.cc == "arm-none-eabi-gcc", b.id
            assert any(f"-mcpu={c}" in b.cflags for c in ("cortex-m4", "cortex-m7", "cortex-m33")), b.id
    assert {b for b in DSP_BOARDS if boards[b].kernels == VARIANT} == set(DSP_BOARDS)
    assert boards["atmega328p"].kernels == AVR_VARIANT and boards["host"].kernels == "reference"


def test_the_build_swaps_only_the_variants_files():
    ref, opt = kernel_sources("reference"), kernel_sources(VARIANT)
    assert len(ref) == len(opt) and VARIANT_FC in opt and VARIANT_FC not in ref
    assert [a for a, b in zip(ref, opt) if a != b] == [
        FW / "core" / "kernels" / f for f in ("conv.c", "depthwise_conv.c", "fully_connected.c", "max_pool.c",
                                                "quantize.c")]
    board = get_board("mps2-an386")
    assert VARIANT_FC in firmware_sources(dataclasses.replace(board, kernels=VARIANT))
    assert VARIANT_FC not in firmware_sources(dataclasses.replace(board, kernels="reference"))
    with pytest.raises(QuarlError, match="no optimized kernel variant 'nope'"):
        kernel_sources("nope")


# ------------------------------------------------------------------------------ end to end (QEMU)
def _validate(model: Path, tmp: Path, n: int = 60) -> dict:
    from quarl_edge.measure.validate import validate
    board = dataclasses.replace(get_board("mps2-an386"), kernels=VARIANT)
    res = validate(model, board, tmp / "fw", random_n=n)
    assert VARIANT_FC.name in (tmp / "fw" / "build.cmd").read_text()
    assert f"optimized/{VARIANT}/fully_connected.c" in (tmp / "fw" / "build.cmd").read_text()
    return res


def test_cartpole_int8_with_the_variant_is_bit_exact_on_mps2_an386(tmp_path):
    res = _validate(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite", tmp_path, 100)
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 100


def test_cartpole_int8_with_the_m0_variant_is_bit_exact_on_microbit(tmp_path):
    from quarl_edge.measure.validate import validate
    board = get_board("microbit")
    assert board.kernels == M0_VARIANT
    res = validate(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite", board,
                   tmp_path / "fw", random_n=60)
    assert f"optimized/{M0_VARIANT}/fully_connected.c" in (tmp_path / "fw" / "build.cmd").read_text()
    assert "qe_fully_connected_s8_pairs(" in (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 60


def test_a_random_int8_mlp_with_the_m0_variant_is_bit_exact_on_microbit(tmp_path):
    """Padded row groups (37 rows), a padded quad (depth 7), RELU: TF Lite Micro's outputs."""
    from helpers_models import convert, random_mlp
    from quarl_edge.measure.validate import validate
    rng = np.random.default_rng(1)
    model = tmp_path / "mlp.tflite"
    model.write_bytes(convert(random_mlp(1, 7, [37, 19, 3], ["relu", "relu", "none"], 2.0), "int8",
                              rng.standard_normal((64, 7)).astype(np.float32)))
    res = validate(model, get_board("microbit"), tmp_path / "fw", random_n=40)
    assert "qe_fully_connected_s8_pairs(" in (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert res["bit_exact"] and res["mismatches"] == 0


def test_cartpole_int8_acc_head_with_the_variant_is_bit_exact_on_mps2_an386(tmp_path):
    from quarl_edge.quant import remedies
    path = tmp_path / "int8-acc.tflite"
    path.write_bytes(remedies.tag_head((ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite").read_bytes()))
    res = _validate(path, tmp_path)
    assert res["bit_exact"] and res["mismatches"] == 0


@pytest.mark.parametrize("seed,input_dim,widths", [(1, 7, [37, 19, 3]), (2, 5, [64, 64, 2]),
                                                   (3, 13, [1, 9])])
def test_random_int8_mlps_with_the_variant_are_bit_exact_on_mps2_an386(tmp_path, seed, input_dim,
                                                                       widths):
    from helpers_models import convert, random_mlp
    acts = ["relu"] * (len(widths) - 1) + ["none"]
    model = tmp_path / "mlp.tflite"
    rng = np.random.default_rng(seed)
    model.write_bytes(convert(random_mlp(seed, input_dim, widths, acts, 2.0), "int8",
                              rng.standard_normal((64, input_dim)).astype(np.float32)))
    res = _validate(model, tmp_path)
    assert res["bit_exact"] and res["mismatches"] == 0


@pytest.mark.parametrize("per_channel", [False, True])
def test_hand_built_fc_models_with_the_variant_are_bit_exact_on_mps2_an386(tmp_path, per_channel):
    """int8 in and out, batches of 3, odd depth: per channel, and per tensor with a weights zero
    point (the filter offset the generator folds into the packed weights and bias')."""
    from helpers_models import fc_model
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (11, 23)).astype(np.int8)
    ws = list(rng.uniform(0.002, 0.02, 11)) if per_channel else 0.01
    model = tmp_path / "fc.tflite"
    model.write_bytes(fc_model(w, (0.05, 7), ws, (0.3, -4), bias=rng.integers(-3000, 3000, 11),
                               activation="RELU", input_shape=[1, 3, 23],
                               weight_zp=0 if per_channel else 3))
    res = _validate(model, tmp_path)
    assert res["bit_exact"] and res["mismatches"] == 0
    c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert ".batches = 3u" in c
    if per_channel:
        assert "qe_fully_connected_s8_pc(" in c
    else:
        assert "qe_fully_connected_s8_packed(" in c and "zero point 3: packed" in c


# ------------------------------------------------------------------------------ QUANTIZE (cortex-m0)
Q_CHECK = ROOT / "tests" / "c" / "quantize_check.c"
M0_QUANTIZE = FW / "core" / "kernels" / "optimized" / M0_VARIANT / "quantize.c"


def quantize_cases(seed: int = 3) -> bytes:
    """Floats and scales where the rounding and the saturation decide: exact halves (v = k + 1/2
    for the scale, both signs), their float neighbours, 0, -0, denormals, 0.5 and its
    neighbours, values near +-2^17 and +-128, inf, NaN, huge, random; zero points at the ends."""
    rng = np.random.default_rng(seed)
    out = b""
    for scale in (1.0, 0.5, 0.0117, 0.25, 3.0e-5, 1.7, 1e-30, 0.003921569):
        s = np.float32(scale)
        halves = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * s
        special = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-39, 0.5, -0.5, 0.49999997, 0.50000006,
                            131071.5, 131072.0, -131072.0, 131073.0, 127.5, -128.5, 1e38, -1e38,
                            262143.5, 524287.5, -524287.5, 524288.0, -524288.5, 1048575.5,
                            1048576.0, -1048577.0, 2147483520.0, -2147483648.0, 4294967296.0,
                            np.inf, -np.inf, np.nan], np.float32) * s
        xs = np.concatenate([halves, np.nextafter(halves, np.float32(np.inf)),
                             np.nextafter(halves, np.float32(-np.inf)), special,
                             (rng.standard_normal(300) * 10.0 ** rng.integers(-3, 4, 300)).astype(np.float32) * s,
                             rng.integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32).view(np.float32)])
        for zp in (-128, -1, 0, 5, 127):
            for i in range(0, len(xs), 1000):
                chunk = xs[i:i + 1000].astype("<f4")
                out += struct.pack("<iiIi", len(chunk), zp, int(np.array([s], "<f4").view("<u4")[0]), 0)
                out += chunk.tobytes()
    return out


def _quantize_split(data: bytes, out: bytes) -> list[tuple[bytes, bytes]]:
    pairs, pos, at = [], 0, 0
    while at < len(data):
        n = struct.unpack_from("<i", data, at)[0]
        at += 16 + 4 * n
        pairs.append((out[pos:pos + n], out[pos + n:pos + 2 * n]))
        pos += 2 * n
    assert pos == len(out)
    return pairs


def test_the_m0_quantize_is_the_reference_on_the_host_under_sanitizers(tmp_module):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp_module / "q_check_san"
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", "-fsanitize=address,undefined",
                          "-fno-sanitize-recover=all", "-g", f"-I{FW / 'core'}", str(Q_CHECK),
                          str(M0_QUANTIZE), str(FW / "core" / "requant.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    data = quantize_cases()
    run = subprocess.run([str(exe)], input=data, capture_output=True, timeout=120,
                         env={**os.environ, **SAN_ENV})
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    assert all(r == o for r, o in _quantize_split(data, run.stdout))


DSP_QUANTIZE = FW / "core" / "kernels" / "optimized" / "cortex-m-dsp" / "quantize.c"


def test_the_dsp_quantize_is_the_reference_on_the_host_under_sanitizers(tmp_module):
    """(its portable path: the reference's own definition)"""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp_module / "q_check_dsp_san"
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", "-fsanitize=address,undefined",
                          "-fno-sanitize-recover=all", "-g", f"-I{FW / 'core'}", str(Q_CHECK),
                          str(DSP_QUANTIZE), str(FW / "core" / "requant.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    data = quantize_cases()
    run = subprocess.run([str(exe)], input=data, capture_output=True, timeout=120,
                         env={**os.environ, **SAN_ENV})
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    assert all(r == o for r, o in _quantize_split(data, run.stdout))


@pytest.mark.parametrize("board_id", DSP_BOARDS)
def test_the_dsp_quantize_is_the_reference_on_the_dsp_boards(tmp_module, board_id):
    """The FPU path (VDIV, VCVT with one fraction bit, SSAT) against the reference compiled
    into the same binary, on QEMU: every board of the variant (all have a single-precision FPU:
    Cortex-M4F, M7, M33)."""
    _quantize_on_board(board_id, DSP_QUANTIZE, tmp_module)


def test_the_m0_quantize_is_the_reference_on_cortex_m0(tmp_module):
    _quantize_on_board("microbit", M0_QUANTIZE, tmp_module)


def _quantize_on_board(board_id: str, qfile: Path, tmp_module: Path) -> None:
    board = get_board(board_id)
    if shutil.which(board.cc) is None or shutil.which("qemu-system-arm") is None:
        pytest.skip(f"{board.cc} or qemu-system-arm is not installed")
    elf = tmp_module / f"q_check_{board_id}.elf"
    srcs = [Q_CHECK, qfile, FW / "core" / "requant.c", *(c for d in port_dirs(board) for c in sorted(d.glob("*.c")))]
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           *board_defines(board), f"-I{FW / 'core'}", *(f"-I{d}" for d in port_dirs(board)),
           *map(str, srcs), "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    data = quantize_cases(5)
    with tempfile.TemporaryDirectory(prefix="qe-q-") as d:
        (Path(d) / "q_cases.bin").write_bytes(data)
        run = subprocess.run(["qemu-system-arm", "-machine", board.connect["machine"], "-kernel",
                              str(elf), "-display", "none", "-monitor", "none", "-serial", "null",
                              "-nodefaults", "-nic", "none", "-semihosting-config",
                              "enable=on,target=native"], cwd=d, capture_output=True, timeout=300)
        assert run.returncode == 0, (run.returncode, run.stderr)
        out = (Path(d) / "q_out.bin").read_bytes()
    pairs = _quantize_split(data, out)
    assert len(pairs) > 40 and all(r == o for r, o in pairs)


def test_the_build_falls_back_to_the_int8_layout_when_packed_weights_do_not_fit(tmp_path):
    """The variant's layout (cortex-m0: chunked row pairs, ~4x the int8 weights) costs flash; on a
    board where that does not fit, the build keeps the reference layout (the variant's files run
    it too)."""
    from quarl_edge.targets.build import build
    model = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"
    board = get_board("microbit")
    packed = build(model, board, tmp_path / "packed")
    assert packed.memory.layout_extra_bytes > 4000
    small = dataclasses.replace(board, flash_bytes=packed.memory.flash_bytes - 1)
    fw = build(model, small, tmp_path / "small")
    c = (tmp_path / "small" / "gen" / "model.c").read_text()
    assert "qe_fully_connected_s8_pairs(" not in c and "qe_fully_connected_s8(" in c
    assert fw.memory.layout_extra_bytes == 0 and fw.memory.flash_bytes < small.flash_bytes


# ------------------------------------------------------------------------------ avr (8-bit AVR)
def avr_edge_cases(max_depth: int = 300) -> list[Case]:
    """The packed layout's edge cases and the output-stage extremes as avr cases: depths 1..300
    (chunks of every length, the 255 cap), 1..9 rows (full and padded row groups), offsets at
    their ends, the largest biases, every shift (both requantization paths)."""
    return [as_avr(c) for c in packed_edge_cases(max_depth) + output_stage_cases()
            if c.kind in (S8, PACKED)] + avr_output_stage_cases()


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


def _chunks_of(stream: np.ndarray, rows: int, depth: int) -> list[np.ndarray]:
    """The chunks of each row group of an avr stream: per group a list of [len][AVR_ROWS]."""
    s, pos, groups = stream.astype(np.int64), 0, []
    for _ in range(-(-rows // AVR_ROWS)):
        chunks = []
        while (n := int(s[pos]) & 0xFF) != 0:
            chunks.append(s[pos + 1:pos + 1 + n * AVR_ROWS].reshape(n, AVR_ROWS))
            pos += 1 + n * AVR_ROWS
        pos += 1
        assert sum(len(c) for c in chunks) == depth
        groups.append(chunks)
    assert pos == s.size
    return groups


@settings(max_examples=40, deadline=None)
@given(case=fc_case(kind=AVR))
def test_avr_stream_chunks_sum_exactly_in_16_bits(case):
    """The generator's proof, checked from the stream: every chunk's sum of w' x lies in int16
    for every int8 x (its extremes 127 P + 128 N and -128 P - 127 N), each chunk is as long as it
    can be (one more input would break that, or it has 255), and the stream's weights are w'."""
    stream, bias_p, chunks = case.avr_stream()
    wp = case.w.reshape(case.rows, case.depth).astype(np.int64) + case.filter_offset
    full = np.zeros((-(-case.rows // AVR_ROWS) * AVR_ROWS, case.depth), np.int64)
    full[:case.rows] = wp
    fits = lambda c: np.all((127 * np.maximum(c, 0).sum(0) + 128 * np.maximum(-c, 0).sum(0) <= 32767)
                            & (128 * np.maximum(c, 0).sum(0) + 127 * np.maximum(-c, 0).sum(0) <= 32768))  # noqa: E731
    for g, group in enumerate(_chunks_of(stream, case.rows, case.depth)):
        d = 0
        for c in group:
            assert fits(c)
            assert np.array_equal(c.T, full[g * AVR_ROWS:(g + 1) * AVR_ROWS, d:d + len(c)])
            d += len(c)
            if d < case.depth and len(c) < 255:
                assert not fits(full[g * AVR_ROWS:(g + 1) * AVR_ROWS, d - len(c):d + 1].T)
    expect = (0 if case.bias is None else case.bias.astype(np.int64)) + case.input_offset * wp.sum(1)
    assert np.array_equal(bias_p[:case.rows], expect)


def test_avr_stream_only_for_int8_w_prime():
    """w + filter_offset outside int8 keeps the reference layout (None); at the edges it is used."""
    w = np.array([[127, -128, 0]], np.int8)
    assert avr_fc_stream(w, None, 0, 1) is None and avr_fc_stream(w, None, 0, -1) is None
    stream, _, chunks = avr_fc_stream(w, None, 3, 0)
    assert chunks == [3] and list(stream[:5]) == [3, 127, 0, 0, 0]   # 127 * 127 + 128 * 128 fits
    stream, _, chunks = avr_fc_stream(np.array([[-128, -128, 5]], np.int8), None, 3, 0)
    # (-128) * (-128) twice is 32768: the first two inputs are two chunks
    assert chunks == [1, 2] and list(stream[:6]) == [1, -128, 0, 0, 0, 2]


def test_the_avr_variant_on_the_host_under_sanitizers(tmp_module):
    """The avr file compiles for the host (its C walk of the stream with the same wrapping 16- and
    24-bit sums) and checks clean against the reference and the Python twin."""
    exe = host_checker(tmp_module, sanitize=True, variant_fc=AVR_FC, defines=AVR_DEFINES)
    cases = avr_edge_cases()
    assert len(cases) > 500
    status, out = run_host(exe, cases)
    assert_same(cases, status, out, twin=True)


@pytest.fixture(scope="module")
def avr_host_exe(tmp_module) -> Path:
    return host_checker(tmp_module, variant_fc=AVR_FC, defines=AVR_DEFINES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=AVR), min_size=1, max_size=8))
def test_random_avr_cases_on_the_host(avr_host_exe, cases):
    status, out = run_host(avr_host_exe, cases)
    assert_same(cases, status, out, twin=True)


# On the ATmega328P under simavr: the cases compiled into the checker's flash (tests/c/fc_avr_check.c)
AVR_CHECK = ROOT / "tests" / "c" / "fc_avr_check.c"
AVR_FLASH_FOR_CASES = 20000      # of 32 KiB: the checker, both kernels and the requantizer fit
AVR_MAX_IN, AVR_MAX_OUT = 768, 384


def _avr_fits(c: Case) -> bool:
    return c.batches * c.depth <= AVR_MAX_IN and c.batches * c.rows <= AVR_MAX_OUT


def _avr_case_bytes(c: Case) -> int:
    return (c.x.size + c.w.size + c.avr_stream()[0].size
            + 4 * (c.rows if c.bias is not None else 0) + 4 * (-(-c.rows // AVR_ROWS) * AVR_ROWS) + 64)


def _c_list(vals) -> str:
    lit = lambda v: "(-2147483647 - 1)" if int(v) == INT32_MIN else str(int(v))  # noqa: E731
    return "{" + ", ".join(lit(v) for v in vals) + "}"


def avr_cases_header(cases: list[Case]) -> str:
    out, rows = [], []
    for k, c in enumerate(cases):
        stream, bias_p, _ = c.avr_stream()
        out.append(f"static const QE_FLASH int8_t c{k}_x[] = {_c_list(c.x)};")
        out.append(f"static const QE_FLASH int8_t c{k}_w[] = {_c_list(c.w)};")
        if c.bias is not None:
            out.append(f"static const QE_FLASH int32_t c{k}_b[] = {_c_list(c.bias)};")
        out.append(f"static const QE_FLASH int8_t c{k}_s[] = {_c_list(stream)};")
        out.append(f"static const QE_FLASH int32_t c{k}_bp[] = {_c_list(bias_p)};")
        q = (f"{c.output_offset}, {c.multiplier}, {c.shift}, {c.act_min}, {c.act_max}")
        dims = f"{c.batches}u, {c.depth}u, {c.rows}u"
        qa = (f".output_offset = {c.output_offset}, .output_multiplier = {c.multiplier}, "
              f".output_shift = {c.shift}, .activation_min = {c.act_min}, "
              f".activation_max = {c.act_max},\n"
              + avr_output_stage_c(c.avr_stage()).replace("/*", "//").replace("*/", "")
              + f".batches = {c.batches}u, .accum_depth = {c.depth}u, .output_depth = {c.rows}u")
        rows.append(f"    {{{{{c.input_offset}, {c.filter_offset}, {q}, {dims}}},\n{{{qa}}},\n c{k}_x, c{k}_w, "
                    f"{f'c{k}_b' if c.bias is not None else 'QE_FLASH_NULL'}, c{k}_s, c{k}_bp}},")
    return "\n".join(out + ["static const QE_FLASH fc_avr_case_t cases[] = {", *rows, "};", ""])


def avr_batches(cases: list[Case]) -> list[list[Case]]:
    """The cases in groups that fit one checker's flash."""
    groups, cur, size = [], [], 0
    for c in cases:
        b = _avr_case_bytes(c)
        if cur and size + b > AVR_FLASH_FOR_CASES:
            groups.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += b
    return groups + ([cur] if cur else [])


def run_simavr_checker(cases: list[Case], tmp: Path, name: str) -> list[bytes]:
    """Build the checker with `cases` in flash for the atmega328p (its board flags), run it under
    simavr, and return the variant's outputs per case; every case must match the board's
    reference (status 0)."""
    board = get_board("atmega328p")
    if shutil.which(board.cc) is None or shutil.which("simavr") is None:
        pytest.skip("avr-gcc or simavr is not installed")
    d = tmp / name
    d.mkdir()
    (d / "fc_avr_cases.h").write_text(avr_cases_header(cases))
    elf = d / "fc_avr_check.elf"
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           f"-I{FW / 'core'}", f"-I{d}", str(AVR_CHECK), str(AVR_FC), str(FW / "core" / "requant.c"),
           "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run(["simavr", "-m", "atmega328p", "-f", "16000000", str(elf)],
                         capture_output=True, timeout=300)
    import re
    # simavr prints what the firmware sends on USART0 to stderr, a line at a time (in colour)
    text = re.sub(r"\x1b\[[0-9;]*m", "", (res.stdout + res.stderr).decode(errors="replace"))
    lines = [ln.strip().rstrip(".") for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and (ln[0] in "CE" or all(ch in "0123456789abcdef" for ch in ln))]
    assert lines and lines[-1] == "END 0", (lines[-5:], res.stderr[-2000:])
    outs, cur = [], None
    for ln in lines[:-1]:
        if ln.startswith("C "):
            _, k, bad = ln.split()
            assert bad == "0", f"case {k}: the avr variant differs from the reference on the board"
            cur = bytearray()
            outs.append(cur)
        else:
            cur += bytes.fromhex(ln)
    assert len(outs) == len(cases)
    return [bytes(o) for o in outs]


def assert_avr_board(cases: list[Case], tmp: Path, name: str) -> None:
    for j, group in enumerate(avr_batches(cases)):
        outs = run_simavr_checker(group, tmp, f"{name}{j}")
        for k, (c, o) in enumerate(zip(group, outs)):
            assert o == twin_outputs(c), (f"{name}{j} case {k}: batches {c.batches} depth {c.depth} "
                                          f"rows {c.rows} shift {c.shift}: the board's avr "
                                          f"kernel differs from the Python twin")


def test_the_avr_path_is_compiled_for_atmega328p(tmp_path):
    """The checker's ELF has the variant's asm: LPM/MULS in the dot product (both entry points),
    MUL in the batch routine's output stage."""
    cases = [c for c in avr_edge_cases(16) if _avr_fits(c)][:4]
    run_simavr_checker(cases, tmp_path, "asm")
    dis = subprocess.run(["avr-objdump", "-d", str(tmp_path / "asm" / "fc_avr_check.elf")],
                         capture_output=True, text=True).stdout
    dot = dis.split("<qe_avr_fc_dot4>:", 1)[1].split("\n\n", 1)[0]
    batch = dis.split("<qe_avr_fc_batch>:", 1)[1].split("\n\n", 1)[0]
    assert "muls" in dot and "lpm" in dot and "muls" in batch and "mul\t" in batch


def test_avr_edge_cases_on_atmega328p(tmp_path):
    """The edge cases of depth <= 65 and the output-stage extremes, on simavr: the variant equals
    the board's reference and the Python twin."""
    cases = [c for c in avr_edge_cases(65) if _avr_fits(c)]
    assert len(cases) > 300
    assert_avr_board(cases, tmp_path, "edge")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=AVR, max_depth=96, max_rows=24), min_size=8, max_size=20))
def test_random_avr_cases_on_atmega328p(tmp_path_factory, cases):
    cases = [c for c in cases if _avr_fits(c)]
    assert_avr_board(cases, tmp_path_factory.mktemp("avr_random"), "random")


def test_cartpole_int8_with_the_avr_variant_is_bit_exact_on_atmega328p(tmp_path):
    from quarl_edge.measure.validate import validate
    board = get_board("atmega328p")
    assert board.kernels == AVR_VARIANT
    res = validate(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite", board,
                   tmp_path / "fw", random_n=60)
    assert f"optimized/{AVR_VARIANT}/fully_connected.c" in (tmp_path / "fw" / "build.cmd").read_text()
    assert (tmp_path / "fw" / "gen" / "model.c").read_text().count("qe_fully_connected_s8_avr(") == 3
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 60


def test_a_random_int8_mlp_with_the_avr_variant_is_bit_exact_on_atmega328p(tmp_path):
    """Padded row groups (37, 19, 3 rows), depth 7, RELU: TF Lite Micro's outputs."""
    from helpers_models import convert, random_mlp
    from quarl_edge.measure.validate import validate
    rng = np.random.default_rng(1)
    model = tmp_path / "mlp.tflite"
    model.write_bytes(convert(random_mlp(1, 7, [37, 19, 3], ["relu", "relu", "none"], 2.0), "int8",
                              rng.standard_normal((64, 7)).astype(np.float32)))
    res = validate(model, get_board("atmega328p"), tmp_path / "fw", random_n=40)
    assert "qe_fully_connected_s8_avr(" in (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert res["bit_exact"] and res["mismatches"] == 0


# ------------------------------------------------------------------------------ cortex-m0: row pairs
def pairs_cases(cases: list[Case]) -> list[Case]:
    """Per-tensor int8 cases (of depth <= 128) as cases of the chunked row-pair layout."""
    return [dataclasses.replace(c, kind=PAIRS) for c in cases
            if c.kind in (S8, PACKED) and c.depth <= PACKED_MAX_DEPTH]


def pairs_edge_cases() -> list[Case]:
    """The packed layout's edge cases (depths 1..128: chunks of one input, odd and even chunks,
    weights and offsets at their ends, so w' = 255 and -255 words), the output-stage extremes,
    and the accumulators around the saturation bounds (avr_output_stage_cases), as row-pair
    cases."""
    return pairs_cases(packed_edge_cases() + output_stage_cases()) + [
        dataclasses.replace(c, kind=PAIRS) for c in avr_output_stage_cases()]


def pairs_m0_cases(cases: list[Case]) -> list[Case]:
    """The cases that fit the micro:bit checker's buffers (MAX_PAIRS: 896 words of stream)."""
    out = []
    for c in m0_cases(cases):
        stream, _, _ = pairs_fc_stream(c.w.reshape(c.rows, c.depth), c.bias, c.input_offset,
                                       c.filter_offset)
        if stream.size <= 896:
            out.append(c)
    return out


@settings(max_examples=40, deadline=None)
@given(case=fc_case(kind=PAIRS))
def test_pairs_stream_words_are_two_rows_and_chunks_sum_in_16_bits(case):
    """The words' values are 65536 w'[hi row] + w'[lo row], each chunk's sums lie in int16 for
    every int8 input (so the 32-bit packed sums split exactly), the chunks cover the depth."""
    stream, bias_p, chunks = pairs_fc_stream(case.w.reshape(case.rows, case.depth), case.bias,
                                             case.input_offset, case.filter_offset)
    wp = case.w.reshape(case.rows, case.depth).astype(np.int64) + case.filter_offset
    full = np.zeros((-(-case.rows // PAIRS_ROWS) * PAIRS_ROWS, case.depth), np.int64)
    full[:case.rows] = wp
    s, pos = stream.astype(np.int64), 0
    for g in range(full.shape[0] // PAIRS_ROWS):
        gw, d = full[g * PAIRS_ROWS:(g + 1) * PAIRS_ROWS], 0
        while (n := int(s[pos])) != 0:
            words = s[pos + 1:pos + 1 + 2 * n].reshape(n, 2)
            c = gw[:, d:d + n]
            assert np.array_equal(words[:, 0], 65536 * c[1] + c[0])
            assert np.array_equal(words[:, 1], 65536 * c[3] + c[2])
            hi = 127 * np.maximum(c, 0).sum(1) + 128 * np.maximum(-c, 0).sum(1)
            lo = 128 * np.maximum(c, 0).sum(1) + 127 * np.maximum(-c, 0).sum(1)
            assert np.all(hi <= 32767) and np.all(lo <= 32768)
            pos, d = pos + 1 + 2 * n, d + n
        assert d == case.depth
        pos += 1
    assert pos == s.size


def test_the_pairs_layout_on_the_host_under_sanitizers(tmp_module):
    exe = host_checker(tmp_module, sanitize=True, variant_fc=M0_FC, defines=M0_HOST_DEFINES)
    cases = pairs_edge_cases()
    assert len(cases) > 400
    status, out = run_host(exe, cases)
    assert_same(cases, status, out, twin=True)


@pytest.fixture(scope="module")
def m0_host_exe(tmp_module) -> Path:
    return host_checker(tmp_module, variant_fc=M0_FC, defines=M0_HOST_DEFINES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PAIRS), min_size=1, max_size=8))
def test_random_pairs_cases_on_the_host(m0_host_exe, cases):
    status, out = run_host(m0_host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_armv6m_pairs_path_is_compiled_for_cortex_m0(m0_elf):
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(m0_elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_fully_connected_s8_pairs>:", 1)[1].split("\n\n", 1)[0]
    assert "muls" in body and "ldmia" in body and "sxth" in body


def test_pairs_edge_cases_on_cortex_m0(m0_elf):
    cases = pairs_m0_cases(pairs_edge_cases())
    assert len(cases) > 300
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, twin=True)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PAIRS, max_depth=96, max_rows=20), min_size=10, max_size=30))
def test_random_pairs_cases_on_cortex_m0(m0_elf, cases):
    cases = pairs_m0_cases(cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, twin=True)
