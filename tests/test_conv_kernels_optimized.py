"""The cortex-m-dsp CONV_2D and DEPTHWISE_CONV_2D int8 kernels are bit-exact with the reference.

Both variants and both references in one checker (tests/c/conv_kernels_check.c), over random
geometry (strides, dilations, any padding, windows partly or wholly outside the image, depth
multipliers, channel counts around the 4-wide loop and the 2-row pairs), misaligned buffers,
offsets at the ends of their range, biases up to the generator's int32 bound and random
requantization constants:
  - on the host with gcc: the variants' portable C paths (and once under ASan/UBSan);
  - cross-compiled for mps2-an386 (Cortex-M4) and run under qemu-system-arm (SXTAB16 / SMLAD /
    SMLABB), where the outputs must also equal the host reference's, byte for byte.
End to end: an int8 CNN policy with a 1x1 convolution (lowered to FULLY_CONNECTED on the board)
built with the variant for mps2-an386 is bit-exact with TF Lite Micro (quarl_edge.validate);
the generator keeps qe_conv_s8 for the 1x1 convolution on boards with the reference kernels."""
from __future__ import annotations

import dataclasses
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_fc_checker import SAN_ENV, run_board
from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import COMMON_CFLAGS, board_defines, expand_flag, family_dirs

ROOT = Path(__file__).resolve().parents[1]
FW = ROOT / "firmware"
CHECK = ROOT / "tests" / "c" / "conv_kernels_check.c"
VDIR = FW / "core" / "kernels" / "optimized" / "cortex-m-dsp"
SOURCES = [VDIR / "conv.c", VDIR / "depthwise_conv.c", VDIR / "max_pool.c", FW / "core" / "requant.c"]
FILES = ("conv_cases.bin", "conv_out.bin")
INT32_MAX = 2**31 - 1
# PACKED: CONV_2D on the generator's packed filter (conv.h); DW_PACKED: DEPTHWISE_CONV_2D on its
# pre-widened one (depthwise_conv.h)
# WIDE: CONV_2D on the widened image (conv.h, qe_conv_s8_wide)
CONV, DW, PACKED, MAXPOOL, DW_PACKED, WIDE = 0, 1, 2, 3, 4, 5


@dataclasses.dataclass
class ConvCase:
    header: list[int]          # the checker's 24 ints
    x: np.ndarray
    f: np.ndarray
    bias: np.ndarray | None
    mults: np.ndarray
    shifts: np.ndarray
    extra: bytes = b""         # kind PACKED: the generator's layout (pack_extra)

    @property
    def out_bytes(self) -> int:
        h = self.header
        return h[1] * h[5] * h[6] * h[7]

    def encode(self) -> bytes:
        if self.header[0] == MAXPOOL:
            return struct.pack("<24i", *self.header) + self.x.astype(np.int8).tobytes()
        out = struct.pack("<24i", *self.header) + self.x.astype(np.int8).tobytes() + self.f.astype(np.int8).tobytes()
        if self.bias is not None:
            out += self.bias.astype("<i4").tobytes()
        return (out + self.mults.astype("<i4").tobytes() + self.shifts.astype(np.int8).tobytes()
                + self.extra)


def pack_dw_extra(c: ConvCase) -> ConvCase:
    """Turn a DEPTHWISE_CONV_2D case (depth multiplier 1) into a DW_PACKED one: the generator's
    own packing (quarl_edge/converters/ops/optimized/cortex_m_dsp/conv.py: pack_dw_filter, dw_wide_shape, mm_table)."""
    from quarl_edge.converters.ops.optimized.cortex_m_dsp.conv import dw_wide_shape, mm_table, pack_dw_filter
    h = c.header
    assert h[16] == 1
    keys = ("batches", "in_h", "in_w", "in_c", "out_h", "out_w", "out_c", "k_h", "k_w",
            "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_left")
    g = dict(zip(keys, h[1:16]))
    wide_h, wide_w, cp = dw_wide_shape(g)
    words, bias_p = pack_dw_filter(c.f.reshape(1, h[8], h[9], h[7]), c.bias)
    mm = mm_table(list(c.mults), list(c.shifts), h[18], h[19], h[20], cp)
    extra = (struct.pack("<4i", cp, wide_h, wide_w, int(mm is not None))
             + words.astype("<i4").tobytes() + bias_p.astype("<i4").tobytes()
             + (b"" if mm is None else mm.astype("<i4").tobytes()))
    return dataclasses.replace(c, header=[DW_PACKED, *h[1:]], extra=extra)


def wide_extra(c: ConvCase) -> ConvCase:
    """Turn a CONV_2D case (dil_w 1) into a WIDE one: the generator's own layout
    (quarl_edge/converters/ops/optimized/cortex_m_dsp/conv.py: pack_wide_filter, wide_shape, mm_table)."""
    from quarl_edge.converters.ops.optimized.cortex_m_dsp.conv import mm_table, pack_wide_filter, wide_shape
    h = c.header
    assert h[13] == 1
    keys = ("batches", "in_h", "in_w", "in_c", "out_h", "out_w", "out_c", "k_h", "k_w",
            "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_left")
    wide_h, wide_w, icp = wide_shape(dict(zip(keys, h[1:16])))
    words, bias_p = pack_wide_filter(c.f.reshape(h[7], h[8], h[9], h[4]), c.bias)
    mm = mm_table(list(c.mults), list(c.shifts), h[18], h[19], h[20], bias_p.size)
    extra = (struct.pack("<4i", icp, wide_h, wide_w, int(mm is not None))
             + words.astype("<i4").tobytes() + bias_p.astype("<i4").tobytes()
             + (b"" if mm is None else mm.astype("<i4").tobytes()))
    return dataclasses.replace(c, header=[WIDE, *h[1:]], extra=extra)


def pack_extra(c: ConvCase) -> ConvCase:
    """Turn a CONV_2D case into a PACKED one: the generator's own packing (quarl_edge/converters/ops/optimized/cortex_m_dsp/conv.py:
    pack_conv_filter, mm_table) of its filter, bias and requantization."""
    from quarl_edge.converters.ops.optimized.cortex_m_dsp.conv import mm_table, pack_conv_filter
    h = c.header
    f = c.f.reshape(h[7], h[8], h[9], h[4])
    words, bias_p, d_pad = pack_conv_filter(f, c.bias, h[17])
    mm = mm_table(list(c.mults), list(c.shifts), h[18], h[19], h[20], bias_p.size)
    extra = (struct.pack("<2i", d_pad, int(mm is not None)) + words.astype("<i4").tobytes()
             + bias_p.astype("<i4").tobytes() + (b"" if mm is None else mm.astype("<i4").tobytes()))
    return dataclasses.replace(c, header=[PACKED, *h[1:]], extra=extra)


def _out_size(i: int, k: int, s: int, d: int, pad_total: int) -> int:
    return (i + pad_total - ((k - 1) * d + 1)) // s + 1


@st.composite
def conv_case(draw, kind=None) -> ConvCase:
    i = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
    kind = draw(st.sampled_from([CONV, DW, PACKED, DW_PACKED, WIDE])) if kind is None else kind
    packed, dw_packed, wide = kind == PACKED, kind == DW_PACKED, kind == WIDE
    kind = CONV if packed or wide else DW if dw_packed else kind
    k_h, k_w = i(1, 5), i(1, 5)
    s_h, s_w = i(1, 3), i(1, 3)
    d_h, d_w = draw(st.sampled_from([1, 1, 1, 2, 3])), draw(st.sampled_from([1, 1, 1, 2]))
    d_w = 1 if wide else d_w
    in_h, in_w = i(1, 12), i(1, 12)
    eff_h, eff_w = (k_h - 1) * d_h + 1, (k_w - 1) * d_w + 1
    # any padding up to a whole window on each side: windows wholly outside the image too
    pt, pb, pl, pr = i(0, eff_h - 1), i(0, eff_h - 1), i(0, eff_w - 1), i(0, eff_w - 1)
    if in_h + pt + pb < eff_h:
        pb = eff_h - in_h - pt
    if in_w + pl + pr < eff_w:
        pr = eff_w - in_w - pl
    out_h, out_w = _out_size(in_h, k_h, s_h, d_h, pt + pb), _out_size(in_w, k_w, s_w, d_w, pl + pr)
    if kind == CONV:
        in_c, dm = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 9, 16])), 1
        out_c = i(1, 9)
        if k_h * k_w * in_c > 1024 and i(0, 1):     # mostly within the column buffer
            in_c = max(1, 1024 // (k_h * k_w))
        if packed:                                    # the generator packs depths <= 128
            in_c = max(1, min(in_c, 128 // (k_h * k_w)))
            out_c = i(1, 13)
        if wide:                                      # window rows <= 64 words
            in_c = max(1, min(in_c, 128 // k_w - 1))
            out_c = i(1, 13)
    else:
        in_c, dm = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 12, 16])), draw(st.sampled_from([1, 1, 1, 2, 3]))
        dm = 1 if dw_packed else dm
        out_c = in_c * dm
    batches = i(1, 2)
    io, oo = i(-127, 128), i(-128, 127)
    rng = np.random.default_rng(i(0, 2**32 - 1))
    style = i(0, 2)
    n_x = batches * in_h * in_w * in_c
    n_f = out_c * k_h * k_w * (in_c if kind == CONV else 1)
    if style == 1:
        x = rng.choice(np.array([-128, 127], np.int8), n_x)
        f = rng.choice(np.array([-127, 127], np.int8), n_f)
    else:
        x = rng.integers(-128, 128, n_x).astype(np.int8)
        f = rng.integers(-127, 128, n_f).astype(np.int8)
    taps = k_h * k_w * (in_c if kind == CONV else 1)
    worst = taps * 128 * (128 + abs(-io))          # the generator's bound (filter zero point 0)
    bias = None
    if i(0, 3):
        span = {0: 1 << 12, 1: 1 << 20, 2: INT32_MAX - worst}[i(0, 2)]
        bias = rng.integers(-span, span, out_c, endpoint=True).astype(np.int32)
    mults = rng.integers(1 << 30, INT32_MAX, out_c, endpoint=True)
    # mostly a shift that spreads the outputs over the int8 range, as in a real model
    scale = max(taps * 64 * 64, 1)
    shifts = np.clip(np.round(np.log2(100.0 / scale)) + rng.integers(-1, 2, out_c), -31, 30)
    if not i(0, 3):
        shifts = rng.integers(-31, 31, out_c)
    lo = i(-128, 127)
    hi = i(lo, 127)
    if (packed or wide or kind == DW) and i(0, 2):   # mostly the 5-instruction output stage's conditions
        lo, hi = -128, 127
        shifts = np.clip(shifts, -21, -1)
        if i(0, 1):
            oo = -128
    header = [kind, batches, in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, d_h, d_w,
              pt, pl, dm, io, oo, lo, hi, int(bias is not None), i(0, 3), i(0, 3)]
    case = ConvCase(header, x, f, bias, mults.astype(np.int64), shifts.astype(np.int8))
    if wide:
        return wide_extra(case)
    return pack_extra(case) if packed else pack_dw_extra(case) if dw_packed else case


@st.composite
def pool_case(draw) -> ConvCase:
    """MAX_POOL_2D: any window, stride and padding (windows partly outside the image, none
    wholly: the generator refuses those), channel counts around the 4-wide loop, any clamp."""
    i = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
    k_h, k_w = draw(st.sampled_from([1, 2, 2, 2, 3, 4])), draw(st.sampled_from([1, 2, 2, 2, 3, 4]))
    s_h, s_w = i(1, 3), i(1, 3)
    in_h, in_w = i(k_h, 12), i(k_w, 12)
    pt, pl = i(0, k_h - 1), i(0, k_w - 1)
    pb, pr = i(0, k_h - 1), i(0, k_w - 1)
    if i(0, 1):                  # VALID (the variant's 2x2 path when the window is 2x2)
        pt = pl = pb = pr = 0
    out_h, out_w = _out_size(in_h, k_h, s_h, 1, pt + pb), _out_size(in_w, k_w, s_w, 1, pl + pr)
    in_c, batches = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 12, 13, 16])), i(1, 2)
    lo = draw(st.sampled_from([-128, -128, i(-128, 127)]))
    hi = draw(st.sampled_from([127, 127, i(lo, 127)]))
    rng = np.random.default_rng(i(0, 2**32 - 1))
    x = rng.integers(-128, 128, batches * in_h * in_w * in_c).astype(np.int8)
    if i(0, 2) == 0:
        x = rng.choice(np.array([-128, 127, 0, -1], np.int8), x.size)
    header = [MAXPOOL, batches, in_h, in_w, in_c, out_h, out_w, in_c, k_h, k_w, s_h, s_w, 1, 1,
              pt, pl, 1, 0, 0, lo, hi, 0, i(0, 3), 0]
    empty = np.zeros(0, np.int8)
    return ConvCase(header, x, empty, None, empty.astype(np.int64), empty)


def cnn_layers() -> list[ConvCase]:
    """The layers of the benchmark CNN (benchmarks/speed.py) and their neighbours, fixed."""
    rng = np.random.default_rng(3)
    out = []
    for kind, (in_h, in_c, k, s, pad, out_c, dm) in [
            (CONV, (16, 2, 3, 2, 0, 8, 1)), (DW, (8, 8, 3, 1, 1, 8, 1)), (CONV, (8, 8, 1, 1, 0, 12, 1)),
            (CONV, (9, 3, 3, 1, 1, 7, 1)), (DW, (7, 6, 3, 2, 1, 12, 2)), (DW, (5, 13, 5, 1, 2, 13, 1))]:
        out_h = _out_size(in_h, k, s, 1, 2 * pad if s == 1 else (k - 1))
        n_x, n_f = in_h * in_h * in_c, out_c * k * k * (in_c if kind == CONV else 1)
        out.append(ConvCase([kind, 1, in_h, in_h, in_c, out_h, out_h, out_c, k, k, s, s, 1, 1,
                             pad if s == 1 else 0, pad if s == 1 else 0, dm, 5, -3, -128, 127, 1,
                             len(out) % 4, (len(out) + 1) % 4],
                            rng.integers(-128, 128, n_x).astype(np.int8),
                            rng.integers(-127, 128, n_f).astype(np.int8),
                            rng.integers(-5000, 5000, out_c).astype(np.int32),
                            rng.integers(1 << 30, INT32_MAX, out_c), np.full(out_c, -9, np.int8)))
    # the convolutions again on the packed filter, the mm output stage with and without the
    # sign fix, and without it (a RELU6 range)
    for c in [c for c in out if c.header[0] == CONV]:
        for oo, lo, hi in ((-3, -128, 127), (-128, -128, 127), (-128, -128, 100)):
            h = list(c.header)
            h[18:21] = [oo, lo, hi]
            out.append(pack_extra(dataclasses.replace(c, header=h)))
            out.append(wide_extra(dataclasses.replace(c, header=h)))
    # the depthwise ones (depth multiplier 1) on the pre-widened filter, likewise
    for c in [c for c in out if c.header[0] == DW and c.header[16] == 1]:
        for oo, lo, hi in ((-3, -128, 127), (-128, -128, 127), (-128, -128, 100)):
            h = list(c.header)
            h[18:21] = [oo, lo, hi]
            out.append(pack_dw_extra(dataclasses.replace(c, header=h)))
    # the benchmark's max pool (2x2 of 8x8x12) and one with a clamp and a ragged channel count
    for in_h, in_c, lo, hi in ((8, 12, -128, 127), (7, 13, -20, 90)):
        out.append(ConvCase([MAXPOOL, 1, in_h, in_h, in_c, in_h // 2, in_h // 2, in_c, 2, 2, 2, 2,
                             1, 1, 0, 0, 1, 0, 0, lo, hi, 0, 1, 0],
                            rng.integers(-128, 128, in_h * in_h * in_c).astype(np.int8),
                            np.zeros(0, np.int8), None, np.zeros(0, np.int64), np.zeros(0, np.int8)))
    return out


# ------------------------------------------------------------------------------ checkers
def host_checker(tmp: Path, sanitize: bool = False) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp / ("conv_check_san" if sanitize else "conv_check")
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"] if sanitize else []
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", *san, f"-I{FW / 'core'}", str(CHECK),
                          *map(str, SOURCES), "-o", str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return exe


def board_checker(board_id: str, tmp: Path, sources: list[Path] | None = None,
                  name: str = "conv_check") -> Path:
    board = get_board(board_id)
    if shutil.which(board.cc) is None or shutil.which("qemu-system-arm") is None:
        pytest.skip(f"{board.cc} or qemu-system-arm is not installed")
    elf = tmp / f"{name}_{board_id}.elf"
    srcs = [CHECK, *(sources or SOURCES), *(c for d in family_dirs(board) for c in sorted(d.glob("*.c")))]
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           *board_defines(board), f"-I{FW / 'core'}", f"-I{VDIR}", *(f"-I{d}" for d in family_dirs(board)),
           *map(str, srcs), "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return elf


def run_host(exe: Path, cases: list[ConvCase]) -> tuple[int, bytes]:
    import os
    res = subprocess.run([str(exe)], input=b"".join(c.encode() for c in cases), capture_output=True,
                         timeout=120, env={**os.environ, **SAN_ENV})
    assert res.returncode in (0, 1), (res.returncode, res.stderr.decode(errors="replace")[-3000:])
    assert len(res.stdout) == 2 * sum(c.out_bytes for c in cases), res.stderr.decode(errors="replace")[-3000:]
    return res.returncode, res.stdout


def split(cases, out: bytes) -> list[tuple[bytes, bytes]]:
    pairs, pos = [], 0
    for c in cases:
        n = c.out_bytes
        pairs.append((out[pos:pos + n], out[pos + n:pos + 2 * n]))
        pos += 2 * n
    assert pos == len(out)
    return pairs


def assert_same(cases, status, out, host_ref: list[bytes] | None = None):
    for k, (c, (ref, opt)) in enumerate(zip(cases, split(cases, out))):
        assert ref == opt, f"case {k}: header {c.header}: optimized != reference"
        if host_ref is not None:
            assert ref == host_ref[k], f"case {k}: the board's reference differs from the host's"
    assert status == 0


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("conv_variant")


@pytest.fixture(scope="module")
def host_exe(tmp_module) -> Path:
    return host_checker(tmp_module)


@pytest.fixture(scope="module")
def m4_elf(tmp_module) -> Path:
    return board_checker("mps2-an386", tmp_module)


HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


# ------------------------------------------------------------------------------ host
def test_cnn_layers_on_the_host(host_exe):
    cases = cnn_layers()
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out)


@settings(max_examples=40, deadline=None, suppress_health_check=HC)
@given(cases=st.lists(st.one_of(conv_case(), pool_case()), min_size=1, max_size=8))
def test_random_cases_on_the_host(host_exe, cases):
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out)


@settings(max_examples=10, deadline=None, suppress_health_check=HC)
@given(cases=st.lists(st.one_of(conv_case(), pool_case()), min_size=1, max_size=8))
def test_random_cases_under_sanitizers(tmp_module, cases):
    exe = tmp_module / "conv_check_san"
    if not exe.is_file():
        host_checker(tmp_module, sanitize=True)
    status, out = run_host(exe, cases)
    assert_same(cases, status, out)


def test_the_checker_sees_a_difference(tmp_module):
    """A variant one off in one output channel must fail the checker."""
    bad = tmp_module / "bad_conv.c"
    src = (VDIR / "conv.c").read_text()
    assert "out[oc + 1] = requant_s8(&rq, acc[1]);" in src
    bad.write_text(src.replace('#include "../../conv.h"', f'#include "{FW}/core/kernels/conv.h"')
                   .replace('#include "../../conv.c"', f'#include "{FW}/core/kernels/conv.c"')
                   .replace("out[oc + 1] = requant_s8(&rq, acc[1]);",
                            "out[oc + 1] = (int8_t)(requant_s8(&rq, acc[1]) ^ 1);"))
    exe = tmp_module / "conv_check_bad"
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", f"-I{FW / 'core'}", f"-I{VDIR}", str(CHECK),
                          str(bad), str(VDIR / "depthwise_conv.c"), str(VDIR / "max_pool.c"),
                          str(FW / "core" / "requant.c"),
                          "-o", str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cases = [c for c in cnn_layers() if c.header[0] == CONV]
    status, out = run_host(exe, cases)
    assert status == 1 and any(r != o for r, o in split(cases, out))


# ------------------------------------------------------------------------------ Cortex-M4 (DSP)
def test_the_dsp_path_is_compiled_for_cortex_m4(m4_elf):
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(m4_elf)], capture_output=True,
                         text=True).stdout
    conv = dis.split("<qe_conv_s8>:", 1)[1].split("\n\n", 1)[0]
    dw = dis.split("<qe_depthwise_conv_s8>:", 1)[1].split("\n\n", 1)[0]
    assert "smlad" in conv and "sxtab16" in conv and "memcpy" not in conv and "memset" not in conv
    assert "smlabb" in dw and "smlatt" in dw and "sxtab16" in dw


def test_cnn_layers_on_cortex_m4(m4_elf, host_exe):
    cases = cnn_layers()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases, FILES)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


# One output of each hand-allocated asm function (and the 2x2 max pool) swapped with its
# neighbour: the checker must see every one on the board.
ASM_MUTATIONS = [
    ("conv.c", "#define CG_GROUPS", 'CG_OUT(OUT, "r2") CG_OUT(OUT, "r3")', 'CG_OUT(OUT, "r3") CG_OUT(OUT, "r2")'),
    ("conv.c", "#define CW_GROUPS", 'CG_OUT(OUT, "r2") CG_OUT(OUT, "r3")', 'CG_OUT(OUT, "r3") CG_OUT(OUT, "r2")'),
    ("conv.c", "#define CG_GROUPS", '"ldr r4, [r7, #52]', '"ldr r4, [r7, #36]'),   # mm not reset per pixel
    ("depthwise_conv.c", "#define DW_ROW3", 'DW_OUT_ASM(OUT, "r2") DW_OUT_ASM(OUT, "r3")',
     'DW_OUT_ASM(OUT, "r3") DW_OUT_ASM(OUT, "r2")'),
    ("max_pool.c", "memcpy(&v11", "x + row_step + in_c + c", "x + row_step + c"),
]


@pytest.mark.parametrize("mutation", ASM_MUTATIONS, ids=[f"{m[0]}:{m[1]}:{m[2][:12]}" for m in ASM_MUTATIONS])
def test_the_board_checker_sees_asm_mutations(tmp_module, host_exe, mutation):
    fname, anchor, old, new = mutation
    src = (VDIR / fname).read_text()
    at = src.index(anchor)
    end = at + src[at:].index(old) + len(old)
    assert old in src[at:end]
    bad = tmp_module / f"bad_{fname}"
    stem = fname.removesuffix(".c")
    bad.write_text((src[:at] + src[at:end].replace(old, new) + src[end:])
                   .replace(f'#include "../../{stem}.h"', f'#include "{FW}/core/kernels/{stem}.h"')
                   .replace('#include "../../pooling.h"', f'#include "{FW}/core/kernels/pooling.h"')
                   .replace(f'#include "../../{stem}.c"', f'#include "{FW}/core/kernels/{stem}.c"'))
    sources = [bad if s.name == fname else s for s in SOURCES]
    elf = board_checker("mps2-an386", tmp_module, sources, name=f"bad_{stem}_{ASM_MUTATIONS.index(mutation)}")
    cases = cnn_layers()
    status, out = run_board("mps2-an386", elf, cases, FILES)
    assert status == 1 and any(r != o for r, o in split(cases, out))


@settings(max_examples=5, deadline=None, suppress_health_check=HC)
@given(cases=st.lists(st.one_of(conv_case(), pool_case()), min_size=10, max_size=25))
def test_random_cases_on_cortex_m4(m4_elf, host_exe, cases):
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases, FILES)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


# ------------------------------------------------------------------------------ the generator
@pytest.fixture(scope="module")
def cnn_1x1(tmp_module) -> Path:
    from helpers_models import convert, random_cnn
    path = tmp_module / "cnn_1x1_int8.tflite"
    calib = np.random.default_rng(0).standard_normal((32, 8, 8, 2)).astype(np.float32)
    path.write_bytes(convert(random_cnn(2, (8, 8, 2), pool="max", n_actions=3, head=None,
                                        filters=8, pointwise=12, hidden=0), "int8", calib))
    return path


def test_conv_is_packed_only_with_the_variant(cnn_1x1, tmp_path):
    """cortex-m-dsp: the 3x3 convolution on the widened image, the 1x1 one on the packed filter,
    the depthwise one on its pre-widened filter (with scratch); with the reference
    weight layout (the build's fallback when the packed firmware does not fit) the 1x1 one is the
    per-channel FULLY_CONNECTED; reference boards keep qe_conv_s8 for both."""
    from quarl_edge.converters import cgen
    ref = cgen.generate(cnn_1x1, tmp_path / "ref")
    opt = cgen.generate(cnn_1x1, tmp_path / "opt", kernels="cortex-m-dsp")
    unp = cgen.generate(cnn_1x1, tmp_path / "unp", kernels="cortex-m-dsp", pack_weights=False)
    schedule = lambda gm: gm.c_path.read_text().split("void qe_model_invoke(void)", 1)[1]  # noqa: E731
    assert schedule(ref).count("qe_conv_s8(") == 2 and "qe_conv_s8_packed(" not in schedule(ref)
    assert schedule(opt).count("qe_conv_s8_packed(") == 1 and "qe_conv_s8(" not in schedule(opt)
    assert schedule(opt).count("qe_conv_s8_wide(") == 1
    assert schedule(opt).count("qe_depthwise_conv_s8_packed(") == 1
    assert "qe_depthwise_conv_s8(" in schedule(unp) and "_packed(" not in schedule(unp)
    assert schedule(unp).count("qe_conv_s8(") == 1 and schedule(unp).count("qe_fully_connected_s8_pc(") == 1
    assert ".batches = 16u," in unp.c_path.read_text()   # 4x4 pixels after the stride-2 conv
    assert ref.layout_extra_bytes == 0 == unp.layout_extra_bytes
    # the packed filters' flash: words, bias' and the mm table beyond the reference layout
    assert opt.layout_extra_bytes > 0
    assert opt.weight_bytes - opt.layout_extra_bytes == ref.weight_bytes


def test_1x1_conv_as_fully_connected_is_bit_exact_with_tflm_on_the_host(cnn_1x1, tmp_path):
    """The routed model's C (with the reference kernels, on the host) against the interpreter."""
    from helpers_models import compile_driver, run_driver, tflm_run
    from quarl_edge.converters import cgen
    gm = cgen.generate(cnn_1x1, tmp_path / "gen", kernels="cortex-m-dsp")
    exe = compile_driver(tmp_path / "gen")
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((200, 8, 8, 2)) * rng.choice([0.3, 1.0, 4.0], (200, 1, 1, 1))).astype(np.float32)
    raw = run_driver(exe, x.tobytes())
    got = np.frombuffer(raw, np.float32).reshape(200, -1)
    ref = np.stack(tflm_run(cnn_1x1.read_bytes(), list(x[:, None]))).reshape(200, -1)
    assert gm.outputs[0].dtype == "float32"
    assert np.array_equal(got.view("<u4"), ref.view("<u4"))


def test_cnn_with_the_variant_is_bit_exact_on_mps2_an386(cnn_1x1, tmp_path):
    from quarl_edge.measure.validate import validate
    board = get_board("mps2-an386")
    assert board.kernels == "cortex-m-dsp"
    res = validate(cnn_1x1, board, tmp_path / "fw", random_n=40)
    cmd = (tmp_path / "fw" / "build.cmd").read_text()
    for f in ("conv.c", "depthwise_conv.c", "fully_connected.c"):
        assert f"optimized/cortex-m-dsp/{f}" in cmd
    model_c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    for fn in ("qe_conv_s8_packed(&", "qe_conv_s8_wide(&", "qe_depthwise_conv_s8_packed(&"):
        assert model_c.count(fn) == 1, fn
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 40
