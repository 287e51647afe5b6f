"""The CONV_2D int8 kernel of the variants without SIMD (cortex-m0, rv32: conv.h's
qe_conv_s8_rows on the generator's rows filter, converters/ops/optimized/cortex_m0/conv.py) is
bit-exact with the reference.

One checker (tests/c/conv_rows_check.c) runs the reference qe_conv_s8 on the TFLite filter, the
variant's qe_conv_s8_rows and its portable definition on the generator's layout, over Hypothesis'
random geometry (strides, dilations, any padding, windows wholly outside the image, channel
counts around the 4-row groups, odd depths), offsets at their ends, biases up to the
generator's int32 bound and random requantization (right shifts mostly: the precomputed output
stage; left shifts: requant.h's): on the host (portable C, and under ASan/UBSan), on microbit
(Cortex-M0, the ARMv6-M asm walk) and hifive1 (rv32) under QEMU, where the outputs must also
equal the host reference's. End to end: a MinAtar-shaped DQN CNN (its 1,024 -> 128 FC on the
variants' byte lanes, fully_connected.h) and the benchmark CNN built for
microbit and hifive1 are bit-exact with TF Lite Micro (quarl_edge.validate), and only the boards
with those variants get the layout."""
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

from helpers_fc_checker import run_board
from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import COMMON_CFLAGS, board_defines, expand_flag, family_dirs
from test_conv_kernels_optimized import (CONV, HC, PACKED, ConvCase, assert_same, cnn_layers,
                                         conv_case, run_host, split)

ROOT = Path(__file__).resolve().parents[1]
FW = ROOT / "firmware"
CHECK = ROOT / "tests" / "c" / "conv_rows_check.c"
KDIR = FW / "core" / "kernels" / "optimized"
VARIANT = {"microbit": KDIR / "cortex-m0" / "conv.c", "hifive1": KDIR / "rv32" / "conv.c"}
FILES = ("conv_cases.bin", "conv_out.bin")


def rows_extra(c: ConvCase, with_steps: bool = True) -> ConvCase:
    """A CONV_2D case (depth <= 128) with the generator's rows layout (rows_conv_filter, rq_table)."""
    from quarl_edge.converters.ops.optimized.cortex_m0.conv import (rows_conv_filter, rows_wide_shape,
                                                                    rq_table, steps_table)
    h = c.header
    keys = ("batches", "in_h", "in_w", "in_c", "out_h", "out_w", "out_c", "k_h", "k_w",
            "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_left")
    wide_h, wide_w = rows_wide_shape(dict(zip(keys, h[1:16])))
    words, bias_p, d_pad = rows_conv_filter(c.f.reshape(h[7], h[8], h[9], h[4]), c.bias, h[17])
    rq = rq_table(list(c.mults), list(c.shifts), h[18], h[19], h[20], bias_p.size)
    steps = None if rq is None or not with_steps else steps_table(
        list(c.mults), list(c.shifts), h[18], h[19], h[20], bias_p.size)
    n_steps = 0 if steps is None else steps.size
    extra = (struct.pack("<5i", d_pad, int(rq is not None), wide_h, wide_w, n_steps) + words.astype("<i4").tobytes()
             + bias_p.astype("<i4").tobytes() + (b"" if rq is None else rq.astype("<i4").tobytes())
             + (b"" if steps is None else steps.astype("<i4").tobytes()))
    return dataclasses.replace(c, header=[CONV, *h[1:]], extra=extra)


@st.composite
def rows_case(draw) -> ConvCase:
    # conv_case's packed cases: depth <= 128, mostly right shifts; the packed extra replaced
    return rows_extra(draw(conv_case(PACKED)), with_steps=draw(st.booleans()))


# the checker's buffers on microbit and hifive1 (conv_rows_check.c): out, words, scratch, steps
BOARD_MAX = {"steps": (512, 512, 512, 1040), "layers": (1024, 1024, 800, 0)}


def fits_board(c: ConvCase, build: str = "steps") -> bool:
    """Whether a case fits the checker's buffers on microbit and hifive1 (conv_rows_check.c)."""
    h = c.header
    d_pad, _, wide_h, wide_w, n_steps = struct.unpack("<5i", c.extra[:20])
    oc_pad = -(-h[7] // 4) * 4
    m_out, m_words, m_scratch, m_steps = BOARD_MAX[build]
    return (h[1] * h[2] * h[3] * h[4] <= 1024 and c.f.size <= 1024 and c.out_bytes <= m_out
            and oc_pad <= 16 and oc_pad * d_pad <= m_words
            and wide_h * wide_w * h[4] + d_pad + oc_pad <= m_scratch and n_steps <= m_steps)


def fixed_cases() -> list[ConvCase]:
    """The benchmark CNN's convolutions (and neighbours) with three output stages each, and the
    MinAtar DQN's 3x3 / 16-filter layer on 10x10xC for C = 4..7 (VALID, ReLU)."""
    out = []
    for c in [c for c in cnn_layers() if c.header[0] == CONV and not c.extra]:
        for oo, lo, hi in ((-3, -128, 127), (-128, -128, 127), (-128, -128, 100)):
            h = list(c.header)
            h[18:21] = [oo, lo, hi]
            out.append(rows_extra(dataclasses.replace(c, header=h)))
            out.append(rows_extra(dataclasses.replace(c, header=h), with_steps=False))
    rng = np.random.default_rng(7)
    for in_c in (4, 5, 6, 7):
        case = ConvCase(
            [CONV, 1, 10, 10, in_c, 8, 8, 16, 3, 3, 1, 1, 1, 1, 0, 0, 1, 128, -128, -128, 127, 1,
             in_c % 4, 0],
            rng.choice(np.array([-128, 127], np.int8), 100 * in_c),
            rng.integers(-127, 128, 16 * 9 * in_c).astype(np.int8),
            rng.integers(-20000, 20000, 16).astype(np.int32),
            rng.integers(1 << 30, 2**31 - 1, 16), rng.integers(-12, -6, 16).astype(np.int8))
        out += [rows_extra(case), rows_extra(case, with_steps=False)]
    return out


def _host(tmp: Path, sanitize: bool = False) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp / ("rows_check_san" if sanitize else "rows_check")
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"] if sanitize else []
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", *san, f"-I{FW / 'core'}", str(CHECK),
                          str(VARIANT["microbit"]), str(FW / "core" / "requant.c"), "-o", str(exe)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return exe


def _board(board_id: str, tmp: Path, build: str = "steps") -> Path:
    board = get_board(board_id)
    if shutil.which(board.cc) is None or shutil.which(board.connect.get("qemu", "qemu-system-arm")) is None:
        pytest.skip(f"{board.cc} or QEMU is not installed")
    elf = tmp / f"rows_check_{board_id}_{build}.elf"
    srcs = [CHECK, VARIANT[board_id], FW / "core" / "requant.c",
            *(c for d in family_dirs(board) for c in sorted(d.glob("*.c")))]
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           *board_defines(board), *(["-DQE_ROWS_CHECK_LAYERS"] if build == "layers" else []),
           f"-I{FW / 'core'}", *(f"-I{d}" for d in family_dirs(board)),
           *map(str, srcs), "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return elf


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("conv_rows")


@pytest.fixture(scope="module")
def host_exe(tmp_module) -> Path:
    return _host(tmp_module)


@pytest.fixture(scope="module", params=["microbit", "hifive1"])
def board_elf(request, tmp_module) -> tuple[str, Path]:
    return request.param, _board(request.param, tmp_module)


def test_fixed_cases_on_the_host(host_exe):
    cases = fixed_cases()
    heads = [struct.unpack("<5i", c.extra[:20]) for c in cases]
    assert all(h[1] == 1 for h in heads)                       # all with rq
    assert sum(h[4] > 0 for h in heads) >= len(cases) // 2     # most with step tables too
    assert_same(cases, *run_host(host_exe, cases))


@settings(max_examples=150, deadline=None, suppress_health_check=HC)
@given(st.lists(rows_case(), min_size=1, max_size=8))
def test_random_cases_on_the_host(host_exe, cases):
    assert_same(cases, *run_host(host_exe, cases))


@settings(max_examples=20, deadline=None, suppress_health_check=HC)
@given(st.lists(rows_case(), min_size=4, max_size=8))
def test_random_cases_under_sanitizers(tmp_module, cases):
    exe = tmp_module / "rows_check_san"
    if not exe.exists():
        _host(tmp_module, sanitize=True)
    assert_same(cases, *run_host(exe, cases))


def test_the_checker_sees_a_difference(host_exe):
    """A wrong layout (one weight changed) must fail: the test can fail."""
    c = fixed_cases()[-1]
    words_at = 24 * 4 + c.x.size + c.f.size + 4 * c.bias.size + 4 * c.mults.size + c.shifts.size + 20
    enc = bytearray(c.encode())
    enc[words_at] ^= 0x01
    res = subprocess.run([str(host_exe)], input=bytes(enc), capture_output=True, timeout=60)
    assert res.returncode == 1


def test_the_asm_walk_is_compiled_for_microbit(tmp_module):
    elf = _board("microbit", tmp_module)
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_conv_s8_rows>:", 1)[1].split("\n\n", 1)[0]
    assert "ldmia\tr1!, {r4, r5, r6, r7}" in body       # the four weights of a column value
    assert body.count("add\tr8, r4") >= 2 and body.count("adcs\tr6, r4") == 1


@settings(max_examples=6, deadline=None, suppress_health_check=[*HC, HealthCheck.filter_too_much])
@given(st.lists(rows_case().filter(fits_board), min_size=6, max_size=10))
def test_random_cases_on_the_boards(board_elf, host_exe, cases):
    """Random shapes in the build with step tables (four channels' full range)."""
    board_id, elf = board_elf
    _, host_out = run_host(host_exe, cases)
    host_ref = [ref for ref, _ in split(cases, host_out)]
    status, out = run_board(board_id, elf, cases, FILES)
    assert_same(cases, status, out, host_ref)


@pytest.mark.parametrize("board_id", ["microbit", "hifive1"])
def test_fixed_cases_on_the_boards(tmp_module, host_exe, board_id):
    """The MinAtar layers (a build with room for them) and the benchmark CNN's where they fit."""
    elf = _board(board_id, tmp_module, "layers")
    cases = [c for c in fixed_cases() if fits_board(c, "layers")]
    assert len(cases) >= 8 and sum(c.header[2] == 10 for c in cases) == 4   # MinAtar's
    _, host_out = run_host(host_exe, cases)
    status, out = run_board(board_id, elf, cases, FILES)
    assert_same(cases, status, out, [ref for ref, _ in split(cases, host_out)])


@pytest.fixture(scope="module")
def minatar_cnn(tmp_module) -> Path:
    """The MinAtar DQN's shape (quarl_edge/rl/defaults.py, dqn.py): 10x10x4, conv 16 3x3
    stride 1 VALID relu, flatten, dense 128 relu, dense 6; random weights."""
    from helpers_models import convert, minatar_keras
    model, calib = minatar_keras()
    path = tmp_module / "minatar_dqn.tflite"
    path.write_bytes(convert(model, "int8", calib))
    return path


def test_only_the_variants_get_the_rows_layout(minatar_cnn, tmp_path):
    from quarl_edge.converters import cgen
    schedule = lambda gm: gm.c_path.read_text().split("void qe_model_invoke(void)", 1)[1]  # noqa: E731
    ref = cgen.generate(minatar_cnn, tmp_path / "ref")
    assert "qe_conv_s8(" in schedule(ref) and "_rows(" not in schedule(ref)
    assert "qe_fully_connected_s8(" in schedule(ref) and "_bytes(" not in schedule(ref)
    for v in ("cortex-m0", "rv32"):
        gm = cgen.generate(minatar_cnn, tmp_path / v, kernels=v)
        assert schedule(gm).count("qe_conv_s8_rows(") == 1 and "qe_conv_s8(" not in schedule(gm)
        assert gm.layout_extra_bytes > 0 and "_rq[" in gm.c_path.read_text()
        # the 1,024-deep FC on the byte lanes (one byte a weight: 4 x 128 x 1,024 bytes of
        # words and the bias'), the 128-deep head on the row pairs; none left to the reference
        assert schedule(gm).count("qe_fully_connected_s8_bytes(") == 1
        assert schedule(gm).count("qe_fully_connected_s8_pairs(") == 1
        assert "qe_fully_connected_s8(" not in schedule(gm)
        assert "_bytes[32768]" in gm.c_path.read_text()


@pytest.fixture(scope="module")
def bench_cnn(tmp_module) -> Path:
    """benchmarks/speed.py's cnn: 16x16x2, conv 3x3 stride 2 SAME (8), depthwise, conv 1x1 (12)."""
    from helpers_models import convert, random_cnn
    calib = np.random.default_rng(0).standard_normal((64, 16, 16, 2)).astype(np.float32)
    path = tmp_module / "cnn_16x16x2_int8.tflite"
    path.write_bytes(convert(random_cnn(1, (16, 16, 2), pool="max", n_actions=5, head=None,
                                       filters=8, pointwise=12, hidden=0), "int8", calib))
    return path


@pytest.mark.parametrize("board_id", ["microbit", "hifive1"])
@pytest.mark.parametrize("model, n_conv", [("minatar_cnn", 1), ("bench_cnn", 2)])
def test_cnns_are_bit_exact_with_tflm(request, tmp_path, board_id, model, n_conv):
    from quarl_edge.measure.validate import validate
    path = request.getfixturevalue(model)
    res = validate(path, get_board(board_id), tmp_path / "fw", random_n=40)
    variant = {"microbit": "cortex-m0", "hifive1": "rv32"}[board_id]
    assert f"optimized/{variant}/conv.c" in (tmp_path / "fw" / "build.cmd").read_text()
    model_c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert model_c.count("qe_conv_s8_rows(&") == n_conv
    if model == "minatar_cnn":      # its 1,024 -> 128 FC on the byte lanes (the asm walks)
        assert model_c.count("qe_fully_connected_s8_bytes(&") == 1
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 40
