"""The int4 FULLY_CONNECTED kernels of the optimized variants are bit-exact with the reference
(issue 39): tests/c/fc_s4_check.c runs, per random case, the reference and the variant on
TFLite's packing (qe_fully_connected_s4) and, where the generator gives the variant's layout,
the reference and the variant on that layout (qe_fully_connected_s4_packed, its stream from
quarl_edge/converters/ops/optimized/cortex_m_dsp/fully_connected_s4.py's pack_fc_s4_weights) and,
for one-batch depths that are multiples of 4 with a stage it covers, on the s4 mm stream
(qe_fully_connected_s4_mm, pack_fc_s4_mm: its asm on mps2-an386, its right-shift, sign-fix,
left-shift blocks and both MAC loops). All outputs must be equal, so the layout's packing, its portable definition and the asm are checked
against the kernel that test_int4_golden.py checks against TF Lite Micro. Shapes: depths 1..300
(odd, not multiples of 4 or 8; over 128 the layout padded to a multiple of 8, pack_fc_s4_deep)
and deep_cases' 1,002 and 1,024 (the dsp variant's blocks), 1..70 rows (not multiples of 2, 4
or 8), 1-3 batches; offsets, biases, multipliers and shifts at their extremes, the accumulators
at the generator's bound; output stages requant_mm_t's and the left shifts' (the asm groups) and
the others.
On the host (the portable path; again under ASan/UBSan) and on mps2-an386 under QEMU (SMLAD), whose
outputs must also be the host's, byte for byte. The avr variant's int4 stream (avr_s4_stream,
qe_fully_connected_s4_avr) the same way: its blocks in every checker, its host path (and under
ASan/UBSan), and its asm on the ATmega328P under simavr (tests/c/fc_s4_avr_check.c), plus the
stream's 16-bit chunk proof and the left-shift output stage against qmath."""
from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_fc_cases import FW, INT32_MAX
from helpers_fc_checker import board_checker, host_checker, run_board
from quarl_edge.converters.ops.fully_connected_s4 import unpack_int4
from quarl_edge.converters.ops.optimized.common import PACKED_MAX_DEPTH
from quarl_edge.converters.ops.optimized.avr.fully_connected_s4 import (acc_bound_of,
                                                                        avr_output_stage_left,
                                                                        avr_s4_stream)
from quarl_edge.converters.ops.optimized.cortex_m0.fully_connected_s4 import s4_pairs_stream
from quarl_edge.converters.ops.optimized.cortex_m_dsp.fully_connected_s4 import (
    pack_fc_s4_deep, pack_fc_s4_mm, pack_fc_s4_weights, s4_mm_block, s4_mm_entry, s4_mm_mode)

CHECK_S4 = Path(__file__).parent / "c" / "fc_s4_check.c"
DSP_S4 = FW / "core" / "kernels" / "optimized" / "cortex-m-dsp" / "fully_connected_s4.c"
M0_S4 = FW / "core" / "kernels" / "optimized" / "cortex-m0" / "fully_connected_s4.c"
RV32_S4 = FW / "core" / "kernels" / "optimized" / "rv32" / "fully_connected_s4.c"
AVR_S4 = FW / "core" / "kernels" / "optimized" / "avr" / "fully_connected_s4.c"
AVR = ("-DQE_S4_AVR",)
VARIANT = ("-DQE_S4_DSP",)
PAIRS = ("-DQE_S4_PAIRS",)


@dataclass
class S4Case:
    batches: int
    depth: int
    rows: int
    io: int
    fo: int
    out_offset: int
    mult: int
    shift: int
    act_min: int
    act_max: int
    x: np.ndarray            # int8 [batches * depth]
    w: np.ndarray            # int4 values (int8) [rows * depth]
    bias: np.ndarray | None  # int32 [rows]
    misalign: int

    def stream(self):
        """The dsp variant's int4 layout as the generator gives it (deeper than the packed
        kernels' 128: padded to a multiple of 8, run in blocks), or (None, 0)."""
        pack = pack_fc_s4_deep if self.depth > PACKED_MAX_DEPTH else pack_fc_s4_weights
        try:
            return pack(self.w.reshape(self.rows, self.depth), self.bias, self.io, self.fo)
        except ValueError:          # w + filter_offset outside int4: TFLite's packing only
            return None, 0

    def pairs(self):
        try:
            return s4_pairs_stream(self.w.reshape(self.rows, self.depth), self.bias, self.io,
                                   self.fo)
        except ValueError:
            return None

    def avr(self):
        """(stream, bias', the output stage's constants) of the avr int4 stream, or None
        (computed once per case)."""
        if "_avr" not in self.__dict__:
            self.__dict__["_avr"] = self._make_avr()
        return self.__dict__["_avr"]

    def _make_avr(self):
        try:
            stream, bias_p, _ = avr_s4_stream(self.w.reshape(self.rows, self.depth), self.bias,
                                              self.io, self.fo)
        except ValueError:
            return None
        bound = acc_bound_of(self.w.reshape(self.rows, self.depth).astype(np.int64) + self.fo,
                             bias_p)
        return stream, bias_p, avr_output_stage_left(self.mult, self.shift, self.out_offset,
                                                     self.act_min, self.act_max, bound)

    def avr_block(self) -> bytes:
        a = self.avr()
        if a is None:
            return b""
        stream, bias_p, st = a
        hdr = [st["sat_low"], st["sat_high"], st["fast"], st["byte_moves"], *st["m_prime"],
               *st["round_pos"], *st["round_neg"]]
        return struct.pack("<19i", *hdr) + bias_p.astype("<i4").tobytes() + stream.tobytes()

    def mm(self):
        """(qe_fc_s4_mm_params_t's fields, the s4 mm stream) where the generator would give it
        (one batch, depth a multiple of 4 within the layout, a stage s4_mm_mode covers, the
        stream's bounds), else None."""
        if (self.batches != 1 or self.depth % 4 or self.depth > PACKED_MAX_DEPTH
                or self.stream()[0] is None):
            return None
        mode = s4_mm_mode(self.mult, self.shift, self.out_offset, self.act_min, self.act_max)
        if mode is None:
            return None
        stream = pack_fc_s4_mm(self.w.reshape(self.rows, self.depth), self.bias, self.io,
                               self.fo, self.shift if mode["mode"] == 2 else None)
        if stream is None:
            return None
        return [self.mult, mode["round"], mode["shift"], mode["mode"],
                s4_mm_entry(self.depth), self.rows, self.depth, self.out_offset,
                self.shift, *s4_mm_block(mode["mode"], mode["shift"])], stream

    def mm_block(self) -> bytes:
        m = self.mm()
        return b"" if m is None else struct.pack("<11i", *m[0]) + m[1].astype("<u4").tobytes()

    @property
    def layout(self) -> bool:
        return self.stream()[0] is not None

    @property
    def out_bytes(self) -> int:
        return self.batches * self.rows * BLOCKS

    def encode(self) -> bytes:
        stream, d_pad = self.stream()
        words = 0 if stream is None else stream.size
        pairs = self.pairs()
        h = [int(stream is not None), self.batches, self.depth, self.rows, self.io, self.fo,
             self.out_offset, self.mult, self.shift, self.act_min, self.act_max,
             int(self.bias is not None), words, d_pad, self.misalign,
             0 if pairs is None else pairs.size,
             0 if self.avr() is None else self.avr()[0].size,
             0 if self.mm() is None else self.mm()[1].size]
        n = self.w.size
        nib = (self.w.astype(np.int64) & 15).astype(np.uint8)
        if n % 2:
            nib = np.append(nib, np.uint8(0))
        packed = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
        assert np.array_equal(unpack_int4(packed, n), self.w)     # TFLite's packing
        return (struct.pack("<18i", *h) + self.x.astype(np.int8).tobytes() + packed.tobytes()
                + (b"" if self.bias is None else self.bias.astype("<i4").tobytes())
                + (b"" if stream is None else stream.astype("<u4").tobytes())
                + (b"" if pairs is None else pairs.astype("<u4").tobytes()) + self.avr_block()
                + self.mm_block())


def random_case(rng: np.random.Generator, max_depth: int = 300, mm: bool = False) -> S4Case:
    """mm: one batch, a depth that is a multiple of 4 within the layout (the s4 mm stream's)."""
    i = lambda lo, hi: int(rng.integers(lo, hi, endpoint=True))   # noqa: E731
    batches, rows = i(1, 3), i(1, 70)
    depth = i(1, max_depth) if i(0, 2) else i(1, PACKED_MAX_DEPTH)
    if mm:
        batches, depth = 1, 4 * i(1, PACKED_MAX_DEPTH // 4)
    rows = min(rows, 256 // batches)
    io = i(-127, 128) if i(0, 4) else rng.choice([-127, 128])
    fo = 0 if i(0, 3) else i(-8, 8)             # TFLite's int4 is symmetric; others off-layout
    style = i(0, 3)
    if style == 1:
        x = rng.choice(np.array([-128, -127, 0, 127]), batches * depth)
        w = rng.choice(np.array([-8, 7]), rows * depth)
    elif style == 2:
        x = np.where(rng.random(batches * depth) < 0.8, 0, rng.integers(-128, 128, batches * depth))
        w = np.where(rng.random(rows * depth) < 0.8, 0, rng.integers(-8, 8, rows * depth))
    else:
        x = rng.integers(-128, 128, batches * depth)
        w = rng.integers(-8, 8, rows * depth)
    if fo and i(0, 1):          # w + fo back inside int4: the layout with a filter offset
        w = np.clip(w, -8 - fo, 7 - fo)
    worst = depth * (8 + abs(fo)) * (128 + abs(io))
    bias = None
    if i(0, 3):
        span = [1 << 12, 1 << 20, INT32_MAX - worst][i(0, 2)]
        bias = rng.integers(-span, span, rows, endpoint=True).astype(np.int32)
    acc = ((w.reshape(rows, depth).astype(np.int64) + fo)
           @ (x.reshape(batches, depth).astype(np.int64) + io).T)
    if bias is not None:
        acc += bias[:, None]
    if i(0, 1) or (mm and i(0, 3)):     # requant_mm_t's stage: right shift 1..21, normalized, full range
        mult = [1 << 30, INT32_MAX, i(1 << 30, INT32_MAX)][i(0, 2)]
        fit = int(np.floor(np.log2(100.0 / max(int(np.abs(acc).max()), 1))))
        shift = int(np.clip(fit + i(-1, 1), -21, -1)) if i(0, 3) else i(-21, -1)
        if i(0, 2) == 0:        # a left shift (the dsp variant's S4_LEFT_ASM stage)
            shift = int(np.clip(fit + i(-1, 1), 0, 30)) if i(0, 1) else i(0, 30)
            if mm and i(0, 1):  # the s4 mm stream's blocks for L = 0..3 and its general one
                shift = i(0, 5)
        act_min, act_max = -128, 127
        out_offset = [-128, -127, 0, 127, i(-128, 127)][i(0, 4)]
    else:
        mult = [0, 1 << 30, INT32_MAX, i(1 << 30, INT32_MAX)][i(0, 3)]
        shift = i(-31, 30)
        out_offset = i(-128, 127)
        act_min = i(-128, 127)
        act_max = i(act_min, 127)
    return S4Case(batches, depth, rows, int(io), fo, out_offset, mult, shift, act_min, act_max,
                  x.astype(np.int8), w.astype(np.int8), bias, i(0, 3))


def edge_cases() -> list[S4Case]:
    """Every depth 1..20 and a few around the limits, row counts 1..9, the layout's extremes
    (all weights -8 or 7 with inputs -128 / 127 and |io| 128: the largest |a3|), biases at the
    generator's bound, both output stages."""
    rng = np.random.default_rng(39)
    out = []
    for depth in [*range(1, 21), 31, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300]:
        for rows in (1, 2, 3, 4, 5, 7, 9):
            c = random_case(rng, 1)
            x = rng.integers(-128, 128, c.batches * depth).astype(np.int8)
            w = rng.integers(-8, 8, rows * depth).astype(np.int8)
            if rows % 2:
                w = np.full(rows * depth, [-8, 7][depth % 2], np.int8)
                x = np.full(c.batches * depth, [-128, 127][rows % 4 == 1], np.int8)
            bias = None if rows == 3 else (
                rng.integers(-1000, 1000, rows).astype(np.int32) if rows != 9 else
                np.full(rows, INT32_MAX - depth * 8 * 256, np.int32) * [1, -1][depth % 2])
            io = [128, -127, 0, 5][(depth + rows) % 4]
            mm = (depth + rows) % 2 == 0
            out.append(S4Case(c.batches, depth, rows, io, 0, [-128, 3][depth % 2],
                              [1 << 30, INT32_MAX][rows % 2], [-1, -8, -21, 0, 3][rows % 5] if not mm
                              else [-1, -7, -21][depth % 3], -128, 127 if mm else 90, x, w, bias,
                              depth % 4))
    return out


def left_mm_cases() -> list[S4Case]:
    """The s4 mm stream's left shifts 0..5 (blocks for L = 0..3, the general one above), padded
    and whole last groups, one quad and the deepest layout."""
    rng = np.random.default_rng(3939)
    out = []
    for k, (depth, rows) in enumerate([(4, 5), (16, 8), (36, 3), (128, 6), (8, 4), (64, 7)] * 2):
        x = rng.integers(-128, 128, depth).astype(np.int8)
        w = rng.integers(-8, 8, rows * depth).astype(np.int8)
        bias = rng.integers(-3000, 3000, rows).astype(np.int32)
        out.append(S4Case(1, depth, rows, int(rng.integers(-127, 129)), 0,
                          [-128, 5, 127][k % 3], int(rng.integers(1 << 30, INT32_MAX)), k % 6,
                          -128, 127, x, w, bias, k % 4))
    return out


def entry_mm_cases() -> list[S4Case]:
    """The s4 mm stream at every quad count 1..32 (each entry of its two unrolled MAC loops, the
    input placed just before the frame's constants), every stage, padded and whole last groups;
    and its largest heads, whose running sums (4096 b0, + 256 b1, + 16 b2, + b3) wrap in 32 bits."""
    rng = np.random.default_rng(3940)
    out = []
    for q in range(1, 33):
        depth, rows = 4 * q, 1 + q % 9
        x = rng.integers(-128, 128, depth).astype(np.int8)
        w = rng.integers(-8, 8, rows * depth).astype(np.int8)
        bias = rng.integers(-3000, 3000, rows).astype(np.int32)
        out.append(S4Case(1, depth, rows, int(rng.integers(-127, 129)), 0, [-128, 5, 127][q % 3],
                          int(rng.integers(1 << 30, INT32_MAX)), [-1, -9, -21, 0, 3][q % 5],
                          -128, 127, x, w, bias, q % 4))
    depth = 128
    w = rng.integers(-8, 8, 4 * depth).astype(np.int8)
    bias = np.array([(1 << 19) - (1 << 17) - 1, (1 << 23) - (1 << 18) - 1,
                     (1 << 27) - (1 << 18) - 1, -(1 << 29)], np.int32)
    out.append(S4Case(1, depth, 4, 0, 0, 7, int(rng.integers(1 << 30, INT32_MAX)), -21, -128, 127,
                      rng.integers(-128, 128, depth).astype(np.int8), w, bias, 0))
    return out


def deep_cases() -> list[S4Case]:
    """FCs deeper than 128 (MinAtar's 1,024 -> 128 shape: issue 39), which the dsp variant runs
    in blocks summed in int32: on TFLite's packing blocks of 256 inputs, QE_S4_DSP_ROWS (64) rows
    a chunk; on the int4 layout (pack_fc_s4_deep) blocks of 128, QE_S4_DEEP_ROWS (128) rows a
    chunk. 1,024 deep (whole blocks) with every weight -8 and every x + io -255 or 255 (a
    256-block's 4096-scaled sum at its bound, 2^31 - 2^23; the layout's sums at their largest;
    the total's sign both ways), random ones at 1,024; 1,002 (last blocks of 234 and 106 inputs,
    ending mid-word at the array's end, two batches, an odd row count); 300 with 70 rows (two
    chunks of TFLite's packing, the second's last row pairing with itself); 136 with 130 rows
    (two chunks of the layout, the second a padded group); 301 (odd: the reference on TFLite's
    packing, the layout's last pair of quads half padding). Both output stages."""
    rng = np.random.default_rng(41)
    out = []
    for k, (batches, depth, rows) in enumerate([(1, 1024, 5), (1, 1024, 5), (1, 1024, 7),
                                                 (2, 1002, 3), (1, 300, 70), (3, 300, 9),
                                                 (1, 301, 4), (1, 136, 130)]):
        x = rng.integers(-128, 128, batches * depth).astype(np.int8)
        w = rng.integers(-8, 8, rows * depth).astype(np.int8)
        io = int(rng.integers(-127, 129))
        if k < 2:                       # the extremes: w' x' = +-2040 for every input
            w[:] = -8
            x[:] = [-128, 127][k]
            io = [-127, 128][k]
        bias = rng.integers(-1 << 20, 1 << 20, rows).astype(np.int32) if k % 3 else None
        acc = (w.reshape(rows, depth).astype(np.int64)
               @ (x.reshape(batches, depth).astype(np.int64) + io).T)
        fit = int(np.floor(np.log2(100.0 / max(int(np.abs(acc).max()), 1))))
        right = k % 2 == 0              # requant_mm_t's stage, else the general one (act range)
        out.append(S4Case(batches, depth, rows, io, 0, [-128, 5][k % 2],
                          int(rng.integers(1 << 30, INT32_MAX)), int(np.clip(fit, -31, -1)),
                          -128 if right else -100, 127 if right else 90, x, w, bias, k % 4))
    return out


BLOCKS = 10                 # fc_s4_check.c's output blocks per case
CASES = (edge_cases() + [random_case(np.random.default_rng(1000 + k)) for k in range(300)]
         + [random_case(np.random.default_rng(2000 + k), mm=True) for k in range(120)]
         + left_mm_cases() + entry_mm_cases())
DEEP = deep_cases()         # for the dsp variant's deep paths; not the avr run's (below)
CASES = CASES + DEEP


def outputs(cases, out: bytes) -> list[list[bytes]]:
    res, pos = [], 0
    for c in cases:
        n, k = c.batches * c.rows, BLOCKS
        res.append([out[pos + j * n:pos + (j + 1) * n] for j in range(k)])
        pos += c.out_bytes
    assert pos == len(out)
    return res


def assert_all_equal(cases, status, out, host=None):
    for k, (c, outs) in enumerate(zip(cases, outputs(cases, out))):
        for j, o in enumerate(outs):
            assert o == outs[0], (f"case {k} (depth {c.depth}, rows {c.rows}, batches {c.batches}, "
                                  f"io {c.io}, fo {c.fo}, shift {c.shift}): output {j} differs")
        if host is not None:
            assert outs[0] == host[k][0], f"case {k}: the board's reference differs from the host's"
    assert status == 0


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fc_s4")


@pytest.fixture(scope="module")
def host_out(tmp_module):
    exe = host_checker(tmp_module, variant_fc=DSP_S4, defines=VARIANT, check=CHECK_S4)
    status, out = run_s4_host(exe, CASES)
    assert_all_equal(CASES, status, out)
    return outputs(CASES, out)


def run_s4_host(exe, cases):
    res = subprocess.run([str(exe)], input=b"".join(c.encode() for c in cases),
                         capture_output=True, timeout=120)
    assert res.returncode in (0, 1), res.stderr.decode(errors="replace")[-3000:]
    return res.returncode, res.stdout


def test_the_cases_cover_the_layout_and_both_output_stages():
    layout = [c for c in CASES if c.layout]
    assert len(layout) > 150 and len(CASES) - len(layout) > 40
    mm = [c for c in layout if -21 <= c.shift <= -1 and c.mult >= 1 << 30
          and (c.act_min, c.act_max) == (-128, 127)]
    assert len(mm) > 60 and len(layout) - len(mm) > 60
    left = [c for c in layout if 0 <= c.shift and c.mult >= 1 << 30
            and (c.act_min, c.act_max) == (-128, 127)]
    assert len(left) > 20
    assert {c.depth % 8 for c in layout} == set(range(8))
    assert {c.rows % 8 for c in layout} == set(range(8))
    assert any(c.fo != 0 for c in layout)


def test_the_cases_cover_the_s4_mm_stream():
    """The s4 mm stream's cases: each output stage (right shift with and without the sign fix,
    left shift), padded last groups, one-quad depths; and cases its bounds turn away."""
    mm = [c for c in CASES if c.mm() is not None]
    modes = [c.mm()[0][3] for c in mm]
    assert len(mm) > 40 and min(modes.count(k) for k in (0, 1, 2)) >= 8
    assert {c.shift for c in mm if c.shift >= 0} >= {0, 1, 2, 3, 4}
    assert {c.rows % 4 for c in mm} == {0, 1, 2, 3} and any(c.depth == 4 for c in mm)
    assert {c.depth // 4 for c in mm} == set(range(1, 33))     # every MAC loop entry
    running = []
    for c in mm:                     # the heads' running sums of the padded rows' bias'
        w = np.zeros((-(-c.rows // 4) * 4, c.depth), np.int64)
        w[:c.rows] = c.w.reshape(c.rows, c.depth).astype(np.int64) + c.fo
        b = c.io * w.sum(axis=1)
        b[:c.rows] += c.bias if c.bias is not None else 0
        r = np.cumsum(b.reshape(-1, 4) * [4096, 256, 16, 1], axis=1)
        assert np.array_equal(c.mm()[1].reshape(len(r), -1)[:, :4], r & 0xFFFFFFFF)
        running.append(r)
    assert any((np.abs(r) >= 1 << 31).any() for r in running)  # a head that wraps
    assert any(c.batches == 1 and c.depth % 4 == 0 and c.layout and c.mm() is None
               and s4_mm_mode(c.mult, c.shift, c.out_offset, c.act_min, c.act_max) for c in CASES)


def nested_mask_kernel(stream: np.ndarray, x: np.ndarray, rows: int) -> np.ndarray:
    """The DSP kernel's arithmetic on the s4 mm stream, step for step in wrapping int32 (numpy's
    int64 reduced mod 2^32): per group the head into the accumulators, per word four SMLADs of
    the word and of it with its bottom one, two, three nibbles cleared (BIC), then the three SUBs
    and the four shifts; returns the doubled accumulators 2 acc (padded rows dropped)."""
    wrap = lambda v: ((v + (1 << 31)) % (1 << 32)) - (1 << 31)  # noqa: E731
    i16 = lambda v: ((v + (1 << 15)) % (1 << 16)) - (1 << 15)   # noqa: E731
    depth = len(x)
    xs = x.astype(np.int64)
    x16 = 16 * int(xs.sum())
    groups = stream.astype(np.int64).reshape(-1, 4 + depth // 2)
    out = []
    for g in groups:
        a = [wrap(int(v)) for v in g[:4]]                 # r2, r3, r12, lr
        for k, word in enumerate(g[4:]):
            q, h = divmod(k, 2)                           # lanes: x[4q + h], x[4q + h + 2]
            lo, hi = int(xs[4 * q + h]), int(xs[4 * q + h + 2])
            for acc, mask in ((3, 0xFFFFFFFF), (2, 0xFFF0FFF0), (1, 0xFF00FF00), (0, 0xF000F000)):
                m = int(word) & mask
                a[acc] = wrap(a[acc] + i16(m & 0xFFFF) * lo + i16(m >> 16) * hi)
        a[3], a[2], a[1] = wrap(a[3] - a[2]), wrap(a[2] - a[1]), wrap(a[1] - a[0])
        out += [a[0] >> 11, (a[1] >> 7) - x16, (a[2] >> 3) - x16, 2 * a[3] - x16]
    return np.array(out[:rows], np.int64)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 9), quads=st.integers(1, 32),
       io=st.integers(-127, 128), big=st.booleans())
def test_the_nested_masks_give_the_doubled_accumulators(seed, rows, quads, io, big):
    """The s4 mm stream's representation (running-sum heads, nested masks, three SUBs, four
    shifts: fully_connected_s4.h, the DSP kernel's S4P_HALF) gives exactly 2 (bias' + sum w' x)
    for any shape and any int8 input, heads up to the generator's bounds (big: the largest it
    admits, whose running sums wrap) included; every intermediate a wrapping int32, as the
    M4's. The asm itself is checked on the boards above (entry_mm_cases and the random ones)."""
    rng = np.random.default_rng(seed)
    depth = 4 * quads
    w = rng.integers(-8, 8, (rows, depth))
    x = rng.choice(np.array([-128, 127]), depth) if big else rng.integers(-128, 128, depth)
    if big:                               # each row's bias' just inside its bound
        lim = np.array([1 << 19, (1 << 23) - 1024 * depth, (1 << 27) - 1024 * depth, 1 << 30])
        room = lim[np.arange(rows) % 4] - 1 - 128 * np.abs(w).sum(axis=1) - abs(io) * 8 * depth
        bias = (room * rng.choice([-1, 1], rows)).astype(np.int64)
    else:
        bias = rng.integers(-5000, 5000, rows)
    stream = pack_fc_s4_mm(w, bias, io, 0, None)
    assert stream is not None
    expect = 2 * (bias + io * w.sum(axis=1) + w @ x)
    assert np.array_equal(nested_mask_kernel(stream, x, rows), expect)


def deep_block_kernel(stream: np.ndarray, x: np.ndarray, rows: int) -> np.ndarray:
    """The DSP kernel's arithmetic on the deep layout (qe_fully_connected_s4_deep), step for step
    in wrapping int32: per group and block of <= 128 inputs the accumulators from 0, the nested
    masks' four SMLADs a word, the three SUBs and ASR #12, #8, #4, added into the group's
    accumulators; after the last block + bias' and, rows 1..3, - 8 X. Returns acc (padded rows
    dropped)."""
    wrap = lambda v: ((v + (1 << 31)) % (1 << 32)) - (1 << 31)  # noqa: E731
    i16 = lambda v: ((v + (1 << 15)) % (1 << 16)) - (1 << 15)   # noqa: E731
    xs = np.pad(x.astype(np.int64), (0, -len(x) % 8))         # the widened input's zero padding
    groups = stream.astype(np.int64).reshape(-1, len(xs) // 2 + 4)
    out = []
    for g in groups:
        acc = [0, 0, 0, 0]
        for d0 in range(0, len(xs), PACKED_MAX_DEPTH):
            a = [0, 0, 0, 0]                                  # r2, r3, r12, lr
            for k in range(d0 // 2, min(len(xs), d0 + PACKED_MAX_DEPTH) // 2):
                q, h = divmod(k, 2)
                lo, hi = int(xs[4 * q + h]), int(xs[4 * q + h + 2])
                for r, mask in ((3, 0xFFFFFFFF), (2, 0xFFF0FFF0), (1, 0xFF00FF00),
                                (0, 0xF000F000)):
                    m = int(g[k]) & mask
                    a[r] = wrap(a[r] + i16(m & 0xFFFF) * lo + i16(m >> 16) * hi)
            a[3], a[2], a[1] = wrap(a[3] - a[2]), wrap(a[2] - a[1]), wrap(a[1] - a[0])
            for r, sh in enumerate((12, 8, 4, 0)):
                acc[r] = wrap(acc[r] + (a[r] >> sh))
        x8 = 8 * int(xs.sum())
        out += [wrap(acc[r] + wrap(int(g[-4 + r])) - (x8 if r else 0)) for r in range(4)]
    return np.array(out[:rows], np.int64)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 6), depth=st.integers(129, 700),
       io=st.integers(-127, 128), big=st.booleans())
def test_the_deep_layout_blocks_give_the_accumulators(seed, rows, depth, io, big):
    """The deep layout (pack_fc_s4_deep: depth padded to 8) through the DSP kernel's blocks of 128
    gives exactly bias' + sum w' x for any depth and int8 input, the extremes (every w' -8 or 7,
    every x -128 or 127) included: no generation-time bound is needed. The asm itself is
    checked on the boards (deep_cases and the random cases over 128)."""
    rng = np.random.default_rng(seed)
    w = rng.choice(np.array([-8, 7]), (rows, depth)) if big else rng.integers(-8, 8, (rows, depth))
    x = rng.choice(np.array([-128, 127]), depth) if big else rng.integers(-128, 128, depth)
    bias = rng.integers(-5000, 5000, rows)
    stream, d_pad = pack_fc_s4_deep(w, bias, io, 0)
    assert d_pad % 8 == 0 and d_pad - depth < 8
    expect = bias + io * w.sum(axis=1) + w @ x
    assert np.array_equal(deep_block_kernel(stream, x, rows), expect)


def test_the_s4_mm_stream_heads_and_bounds():
    """fully_connected_s4.h's head: the running sums 4096 b0, + 256 b1, + 16 b2, + b3 (mod 2^32)
    in front of the int4 layout's words; row 0's bound 2^19 and a left shift's turn the
    stream away."""
    w = np.array([[-8, 1, 2, 3], [7, 0, 0, 0], [-1, 0, 0, 0], [0, 0, 0, -8]])
    words, _ = pack_fc_s4_weights(w, np.array([10, 20, 30, 40]), 2, 0)
    s = pack_fc_s4_mm(w, np.array([10, 20, 30, 40]), 2, 0, None)
    b = [10 + 2 * -2, 20 + 14, 30 - 2, 40 - 16]
    assert list(s[:4].view(np.int32)) == [4096 * b[0], 4096 * b[0] + 256 * b[1],
                                          4096 * b[0] + 256 * b[1] + 16 * b[2],
                                          4096 * b[0] + 256 * b[1] + 16 * b[2] + b[3]]
    assert np.array_equal(s[4:], words[:-4])
    assert pack_fc_s4_mm(w, np.array([1 << 19, 0, 0, 0]), 0, 0, None) is None
    assert pack_fc_s4_mm(w, np.array([0, 1 << 22, 0, 0]), 0, 0, None) is not None
    assert pack_fc_s4_mm(w, np.array([0, 1 << 22, 0, 0]), 0, 0, 7) is not None
    assert pack_fc_s4_mm(w, np.array([0, 1 << 22, 0, 0]), 0, 0, 8) is None     # 2^31


def test_the_layout_packs_rows_and_bias():
    """fully_connected_s4.h's word, spelled out: row 0 two's complement in bits 12..15, rows
    1..3 + 8 below it; per quad half 0 (d = 0, 2) then half 1 (d = 1, 3); the group's bias' after
    its words (bias + io * sum w)."""
    w = np.array([[-8, 1, 2, 3, 4], [7, 0, 0, 0, 0], [-1, 0, 0, 0, 0], [0, 0, 0, 0, -8]])
    stream, d_pad = pack_fc_s4_weights(w, np.array([10, 20, 30, 40]), 2, 0)
    assert d_pad == 8 and stream.size == 2 * 2 + 4
    lane = lambda a, b, c, d: ((a & 15) << 12) | ((b + 8) << 8) | ((c + 8) << 4) | (d + 8)  # noqa
    assert stream[0] == lane(-8, 7, -1, 0) | (lane(2, 0, 0, 0) << 16)
    assert stream[1] == lane(1, 0, 0, 0) | (lane(3, 0, 0, 0) << 16)
    assert stream[2] == lane(4, 0, 0, -8) | (lane(0, 0, 0, 0) << 16)
    assert list(stream[4:].view(np.int32)) == [10 + 2 * 2, 20 + 14, 30 - 2, 40 - 16]
    with pytest.raises(ValueError):
        pack_fc_s4_weights(w, None, 0, 1)       # 7 + 1 is no int4


def test_variant_equals_reference_on_the_host(host_out):
    assert len(host_out) == len(CASES)


def test_the_checker_sees_a_difference(tmp_module):
    """A corrupted layout (one nibble of one row) makes the checker report a difference."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, 8).astype(np.int8)
    w = rng.integers(-8, 8, 32).astype(np.int8)
    c = S4Case(1, 8, 4, 3, 0, 0, 1 << 30, -1, -128, 127, x, w, None, 0)   # outputs acc / 4
    stream, _ = c.stream()
    enc = bytearray(c.encode())
    assert run_s4_host(host_checker(tmp_module, variant_fc=DSP_S4, defines=VARIANT,
                                    check=CHECK_S4), [c])[0] == 0
    enc[-4 * stream.size - 4 * c.pairs().size - len(c.avr_block()) - len(c.mm_block()) + 1] ^= 0x10   # dsp stream's first word: row 0's
    # weight of d = 0, +- 1
    exe = host_checker(tmp_module, variant_fc=DSP_S4, defines=VARIANT, check=CHECK_S4)
    res = subprocess.run([str(exe)], input=bytes(enc), capture_output=True, timeout=60)
    assert res.returncode == 1


def test_the_checker_sees_a_difference_in_the_s4_mm_stream(tmp_module):
    """A corrupted s4 mm stream (a weight nibble, or a head word) makes the checker report it."""
    rng = np.random.default_rng(6)
    c = S4Case(1, 8, 4, 3, 0, 0, 1 << 30, -1, -128, 127, rng.integers(-128, 128, 8).astype(np.int8),
               rng.integers(-8, 8, 32).astype(np.int8), None, 0)
    assert c.mm() is not None
    exe = host_checker(tmp_module, variant_fc=DSP_S4, defines=VARIANT, check=CHECK_S4)
    assert run_s4_host(exe, [c])[0] == 0
    for at in (44 + 16 + 1, 44 + 4 + 2):     # the first weight word's row 0, d = 0; head word 1
        enc = bytearray(c.encode())
        enc[-len(c.mm_block()) + at] ^= 0x10
        res = subprocess.run([str(exe)], input=bytes(enc), capture_output=True, timeout=60)
        assert res.returncode == 1, at


def test_under_sanitizers(tmp_module):
    exe = host_checker(tmp_module, sanitize=True, variant_fc=DSP_S4, defines=VARIANT,
                       check=CHECK_S4)
    status, out = run_s4_host(exe, CASES[::3])
    assert_all_equal(CASES[::3], status, out)


def test_the_dsp_path_is_compiled_for_cortex_m4(tmp_module):
    elf = board_checker("mps2-an386", tmp_module, DSP_S4, VARIANT, check=CHECK_S4)
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True,
                         text=True).stdout
    for fn in ("s4_groups_fix", "s4_groups_nofix", "s4_groups_left", "s4_packed_other",
               "qe_fully_connected_s4_mm"):
        body = dis.split(f"<{fn}>:", 1)[1].split("\n\n", 1)[0]
        assert "smlad" in body, fn


def test_variant_equals_reference_on_cortex_m4(tmp_module, host_out):
    elf = board_checker("mps2-an386", tmp_module, DSP_S4, VARIANT, check=CHECK_S4)
    status, out = run_board("mps2-an386", elf, CASES, files=("s4_cases.bin", "s4_out.bin"))
    assert_all_equal(CASES, status, out, host=host_out)


@pytest.mark.parametrize("board_id", ["mps2-an500", "mps2-an505", "netduinoplus2"])
def test_the_s4_mm_stream_on_the_other_dsp_boards(tmp_module, host_out, board_id):
    """The s4 mm stream's asm (and the variant's other int4 paths, every tenth case) on the
    Cortex-M7, the Cortex-M33 and the STM32F405's M4, equal to the host's outputs."""
    idx = [k for k, c in enumerate(CASES) if c.mm() is not None or k % 10 == 0]
    cases = [CASES[k] for k in idx]
    assert len([c for c in cases if c.mm() is not None]) > 40
    elf = board_checker(board_id, tmp_module, DSP_S4, VARIANT, check=CHECK_S4)
    status, out = run_board(board_id, elf, cases, files=("s4_cases.bin", "s4_out.bin"))
    assert_all_equal(cases, status, out, host=[host_out[k] for k in idx])


# ------------------------------------------------------------- cortex-m0 / rv32: the row pairs
def test_the_pairs_layout_packs_rows_and_bias():
    """fully_connected_s4.h's row-pair bytes spelled out: per input (w1 << 4 | w0), (w3 << 4 |
    w2), padded to a word, then the group's bias' (bias + io * sum w)."""
    w = np.array([[-8, 1, 2], [7, 0, 0], [-1, 0, 3], [0, 0, -8], [1, 1, 1]])
    stream = s4_pairs_stream(w, np.array([10, 20, 30, 40, 50]), 2, 0)
    assert stream.size == 2 * (2 + 4)                    # 6 bytes -> 2 words, then 4 bias'
    by = stream[:2].astype("<u4").tobytes()
    assert list(by) == [0x78, 0x0F, 0x01, 0x00, 0x02, 0x83, 0, 0]
    assert list(stream[2:6].view(np.int32)) == [10 - 10, 20 + 14, 30 + 4, 40 - 16]
    assert list(stream[6:8].astype("<u4").tobytes()) == [0x01, 0x00, 0x01, 0x00, 0x01, 0x00, 0, 0]
    assert list(stream[8:12].view(np.int32)) == [50 + 6, 0, 0, 0]
    with pytest.raises(ValueError):
        s4_pairs_stream(w, None, 0, -1)                # -8 - 1 is no int4


def small_case(c: S4Case) -> bool:
    """The cases that fit fc_s4_check.c's QE_CHECK_SMALL_RAM buffers (the micro:bit)."""
    p, (s, _) = c.pairs(), c.stream()
    return (c.batches * c.depth <= 512 and (c.rows * c.depth + 1) // 2 <= 1536
            and c.batches * c.rows <= 128 and (p is None or p.size <= 1024)
            and (s is None or s.size <= 512)
            and (c.avr() is None or c.avr()[0].size <= 2048)
            and (c.mm() is None or c.mm()[1].size <= 256))


def test_the_pairs_cases_cover_chunks_and_stages():
    pairs = [c for c in CASES if c.pairs() is not None]
    assert len(pairs) > 250
    assert any(c.depth > 2 * 31 for c in pairs) and any(c.depth % 31 == 0 for c in pairs)
    right = [c for c in pairs if c.shift <= -1 and c.mult >= 0]
    assert len(right) > 100 and len(pairs) - len(right) > 40
    assert len([c for c in CASES if small_case(c)]) > 200


@pytest.mark.parametrize("variant", [M0_S4, RV32_S4], ids=["cortex-m0", "rv32"])
def test_the_pairs_variant_equals_reference_on_the_host(tmp_module, host_out, variant):
    exe = host_checker(tmp_module, variant_fc=variant, defines=PAIRS, check=CHECK_S4)
    status, out = run_s4_host(exe, CASES)
    assert_all_equal(CASES, status, out, host=host_out)


def test_the_pairs_variant_under_sanitizers(tmp_module):
    exe = host_checker(tmp_module, sanitize=True, variant_fc=M0_S4, defines=PAIRS, check=CHECK_S4)
    status, out = run_s4_host(exe, CASES[1::3])
    assert_all_equal(CASES[1::3], status, out)


def test_the_pairs_variant_equals_reference_on_cortex_m0(tmp_module, host_out):
    elf = board_checker("microbit", tmp_module, M0_S4, PAIRS + ("-DQE_CHECK_SMALL_RAM",),
                        check=CHECK_S4)
    idx = [k for k, c in enumerate(CASES) if small_case(c)]
    cases = [CASES[k] for k in idx]
    status, out = run_board("microbit", elf, cases, files=("s4_cases.bin", "s4_out.bin"))
    assert_all_equal(cases, status, out, host=[host_out[k] for k in idx])


def test_the_pairs_variant_compiles_for_rv32(tmp_module):
    """The rv32 variant's file (cortex-m0's C) builds with the RISC-V toolchain, warnings as
    errors, and its inner loop is one MUL per two rows' products."""
    import shutil
    if shutil.which("riscv64-unknown-elf-gcc") is None:
        pytest.skip("riscv64-unknown-elf-gcc is not installed")
    obj = tmp_module / "s4_rv32.o"
    res = subprocess.run(["riscv64-unknown-elf-gcc", "-march=rv32imac", "-mabi=ilp32", "-O2",
                          "--specs=picolibc.specs",
                          "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{FW / 'core'}", "-c",
                          str(RV32_S4), "-o", str(obj)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    dis = subprocess.run(["riscv64-unknown-elf-objdump", "-d", str(obj)], capture_output=True,
                         text=True).stdout
    body = re.split(r"\n\n[0-9a-f]+ <qe_", dis.split("<qe_fully_connected_s4_pairs>:", 1)[1])[0]
    assert body.count("\tmul\t") >= 4


# ---------------------------------------------------------------- avr: the int4 stream (MULSU)
def test_the_avr_stream_packs_rows_and_bias():
    """fully_connected_s4.h's avr stream spelled out: per chunk its length, then per input
    (u1 << 4 | u0), (u3 << 4 | u2) with u = w' + 8, a 0 byte ending the group; padding rows'
    nibbles 0; bias' per padded row (bias + io * sum w')."""
    w = np.array([[-8, 1, 2], [7, 0, 0], [-1, 0, 3], [0, 0, -8], [1, 1, 1]])
    stream, bias_p, chunks = avr_s4_stream(w, np.array([10, 20, 30, 40, 50]), 2, 0)
    assert chunks == [3, 3]
    assert list(stream) == [3, 0xF0, 0x87, 0x89, 0x88, 0x8A, 0x0B, 0,
                            3, 0x09, 0x00, 0x09, 0x00, 0x09, 0x00, 0]
    assert list(bias_p) == [10 - 10, 20 + 14, 30 + 4, 40 - 16, 50 + 6, 0, 0, 0]
    with pytest.raises(ValueError):
        avr_s4_stream(w, None, 0, -1)                  # -8 - 1 is no int4


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 9), depth=st.integers(1, 700),
       fo=st.sampled_from([0, 0, 3, -5]))
def test_the_avr_stream_chunks_sum_exactly_in_16_bits(seed, rows, depth, fo):
    """The generator's proof, checked from the stream: every chunk's sum of u x lies in int16 for
    every int8 x (u >= 0: its extremes 127 U and -128 U, U = sum u <= 256), each chunk is as long
    as it can be (one more input breaks that, or it has 255), the nibbles are w' + 8."""
    rng = np.random.default_rng(seed)
    w = np.clip(rng.integers(-8, 8, (rows, depth)), -8 - fo, 7 - fo)
    stream, _, chunks = avr_s4_stream(w, None, 0, fo)
    u = np.zeros((-(-rows // 4) * 4, depth), np.int64)
    u[:rows] = w + fo + 8
    s, pos = stream.astype(np.int64), 0
    for g in range(len(u) // 4):
        d = 0
        while (n := int(s[pos])) != 0:
            by = s[pos + 1:pos + 1 + 2 * n].reshape(n, 2)
            got = np.stack([by[:, 0] & 15, by[:, 0] >> 4, by[:, 1] & 15, by[:, 1] >> 4])
            assert np.array_equal(got, u[g * 4:g * 4 + 4, d:d + n])
            assert got.sum(axis=1).max() <= 256
            if d + n < depth and n < 255:
                assert u[g * 4:g * 4 + 4, d:d + n + 1].sum(axis=1).max() > 256
            pos, d = pos + 1 + 2 * n, d + n
        assert d == depth
        pos += 1
    assert pos == s.size and sum(chunks) == depth * (len(u) // 4)


@settings(max_examples=200, deadline=None)
@given(mult=st.integers(1 << 30, INT32_MAX), shift=st.integers(0, 8),
       offset=st.integers(-128, 127), bound=st.integers(1, 1 << 22), act=st.integers(0, 3),
       probe=st.lists(st.integers(-(1 << 22), 1 << 22), min_size=1, max_size=20))
def test_the_avr_left_shift_stage_is_requantize_output(mult, shift, offset, bound, act, probe):
    """avr_output_stage_left's constants, run as the avr asm runs them (avr_output_stage_value),
    give qmath.requantize_output (TFLM's) for every reachable accumulator: around both
    saturation bounds and at random ones."""
    from quarl_edge.converters import qmath
    from quarl_edge.converters.ops.optimized.avr.fully_connected import avr_output_stage_value
    lo, hi = [(-128, 127), (-128, 127), (0, 127), (-100, 90)][act]
    st_ = avr_output_stage_left(mult, shift, offset, lo, hi, bound)
    if shift > 7 or bound << shift > INT32_MAX:
        assert st_["fast"] == 0
        return
    assert st_["fast"] == 1
    xs = {-bound, bound, 0, 1, -1} | {p for p in probe if abs(p) <= bound}
    for b in (st_["sat_low"], st_["sat_high"]):
        xs |= {v for v in range(b - 3, b + 4) if abs(v) <= bound}
    for x in xs:
        want = qmath.requantize_output(x, mult, shift, offset, lo, hi)
        assert avr_output_stage_value(st_, x, offset, lo, hi) == want, x


def test_the_avr_cases_cover_the_stream_and_both_fast_stages():
    avr = [c for c in CASES if c.avr() is not None]
    assert len(avr) > 250
    fast = [c for c in avr if c.avr()[2]["fast"]]
    assert len([c for c in fast if c.shift >= 0]) > 20 and len([c for c in fast if c.shift < 0]) > 40
    assert len(avr) - len(fast) > 40
    assert any(c.depth > 64 for c in avr) and any(c.fo != 0 for c in avr)


def test_the_avr_variant_equals_reference_on_the_host(tmp_module, host_out):
    """The avr file's host path (its C walk of the stream with the same wrapping 16- and 24-bit
    sums, and the fast output stage as the asm computes it) against the reference."""
    exe = host_checker(tmp_module, variant_fc=AVR_S4, defines=AVR, check=CHECK_S4)
    status, out = run_s4_host(exe, CASES)
    assert_all_equal(CASES, status, out, host=host_out)


def test_the_avr_variant_under_sanitizers(tmp_module):
    exe = host_checker(tmp_module, sanitize=True, variant_fc=AVR_S4, defines=AVR, check=CHECK_S4)
    status, out = run_s4_host(exe, CASES[2::3])
    assert_all_equal(CASES[2::3], status, out)


def test_the_avr_checker_sees_a_difference(tmp_module):
    """One nibble of the avr stream changed (row 0's weight of d = 0, +- 1): the avr build
    reports a difference."""
    rng = np.random.default_rng(6)
    c = S4Case(1, 8, 4, 3, 0, 0, 1 << 30, -1, -128, 127, rng.integers(-128, 128, 8).astype(np.int8),
               rng.integers(-8, 8, 32).astype(np.int8), None, 0)
    exe = host_checker(tmp_module, variant_fc=AVR_S4, defines=AVR, check=CHECK_S4)
    assert run_s4_host(exe, [c])[0] == 0
    enc = bytearray(c.encode())
    enc[-c.avr()[0].size + 1] ^= 0x01
    res = subprocess.run([str(exe)], input=bytes(enc), capture_output=True, timeout=60)
    assert res.returncode == 1


# On the ATmega328P under simavr: the cases in the checker's flash (tests/c/fc_s4_avr_check.c)
CHECK_S4_AVR = Path(__file__).parent / "c" / "fc_s4_avr_check.c"
AVR_FLASH_FOR_CASES = 16000


def _avr_fits(c: S4Case) -> bool:
    """In the ATmega328P's flash; not DEEP (the avr variant did not change with them: its
    random cases of depth up to 300 cover it, and DEEP's big ones would take simavr ~30 s)."""
    return (c.batches * c.depth <= 768 and c.batches * c.rows <= 384 and c.avr() is not None
            and not any(c is d for d in DEEP))


def _avr_case_bytes(c: S4Case) -> int:
    return (c.x.size + (c.w.size + 1) // 2 + c.avr()[0].size + 4 * c.rows
            + 4 * c.avr()[1].size + 96)


def _c_list(vals) -> str:
    lit = lambda v: "(-2147483647 - 1)" if int(v) == -(1 << 31) else str(int(v))  # noqa: E731
    return "{" + ", ".join(lit(v) for v in vals) + "}"


def avr_s4_cases_header(cases: list[S4Case]) -> str:
    from quarl_edge.converters.ops.optimized.avr.fully_connected import avr_output_stage_c
    out, rows = [], []
    for k, c in enumerate(cases):
        stream, bias_p, st_ = c.avr()
        nib = (c.w.astype(np.int64) & 15).astype(np.uint8)
        if nib.size % 2:
            nib = np.append(nib, np.uint8(0))
        packed = nib[0::2] | (nib[1::2] << 4)
        out.append(f"static const QE_FLASH int8_t c{k}_x[] = {_c_list(c.x)};")
        out.append(f"static const QE_FLASH uint8_t c{k}_w[] = {_c_list(packed)};")
        if c.bias is not None:
            out.append(f"static const QE_FLASH int32_t c{k}_b[] = {_c_list(c.bias)};")
        out.append(f"static const QE_FLASH uint8_t c{k}_s[] = {_c_list(stream)};")
        out.append(f"static const QE_FLASH int32_t c{k}_bp[] = {_c_list(bias_p)};")
        q = f"{c.out_offset}, {c.mult}, {c.shift}, {c.act_min}, {c.act_max}"
        dims = f"{c.batches}u, {c.depth}u, {c.rows}u"
        qa = (f".output_offset = {c.out_offset}, .output_multiplier = {c.mult}, "
              f".output_shift = {c.shift}, .activation_min = {c.act_min}, "
              f".activation_max = {c.act_max},\n"
              + avr_output_stage_c(st_).replace("/*", "//").replace("*/", "")
              + f".batches = {c.batches}u, .accum_depth = {c.depth}u, .output_depth = {c.rows}u")
        rows.append(f"    {{{{{c.io}, {c.fo}, {q}, {dims}}},\n{{{qa}}},\n c{k}_x, c{k}_w, "
                    f"{f'c{k}_b' if c.bias is not None else 'QE_FLASH_NULL'}, c{k}_s, c{k}_bp}},")
    return "\n".join(out + ["static const QE_FLASH fc_s4_avr_case_t cases[] = {", *rows, "};", ""])


def test_the_avr_variant_equals_reference_on_atmega328p(tmp_path, host_out):
    """The cases that fit the ATmega328P (in flash, a checker per 16 KB of them) under simavr:
    the asm (LPM/SWAP/MULSU dot product, the batch routine's output stage, the left-shift
    constants) equals the board's reference on TFLite's packing and the host's outputs."""
    from helpers_fc_checker import run_simavr
    idx = [k for k, c in enumerate(CASES) if _avr_fits(c)]
    assert len(idx) > 150
    assert len([k for k in idx if CASES[k].avr()[2]["fast"] and CASES[k].shift >= 0]) > 10
    groups, cur, size = [], [], 0
    for k in idx:
        b = _avr_case_bytes(CASES[k])
        if cur and size + b > AVR_FLASH_FOR_CASES:
            groups.append(cur)
            cur, size = [], 0
        cur.append(k)
        size += b
    groups += [cur] if cur else []
    for j, g in enumerate(groups):
        cases = [CASES[k] for k in g]
        outs = run_simavr(CHECK_S4_AVR, AVR_S4, avr_s4_cases_header(cases), len(cases), tmp_path,
                          f"s4avr{j}")
        for k, o in zip(g, outs):
            assert o == host_out[k][0], f"case {k}: the board's avr kernel differs from the host's"
    dis = subprocess.run(["avr-objdump", "-d", str(tmp_path / "s4avr0" / "fc_s4_avr_check.elf")],
                         capture_output=True, text=True).stdout
    for fn in ("qe_avr_fc_s4_dot4", "qe_avr_fc_s4_batch"):
        body = dis.split(f"<{fn}>:", 1)[1].split("\n\n", 1)[0]
        assert "mulsu" in body and "lpm" in body and "swap" in body, fn
