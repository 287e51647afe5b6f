"""The optimized QUANTIZE kernels (cortex-m0, cortex-m-dsp) are the reference's, bit for bit:
tests/c/quantize_check.c with both compiled in, over floats and scales where the rounding and the
saturation decide, on the host under ASan/UBSan and under QEMU on the variants' boards."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from helpers_fc_cases import DSP_BOARDS, FW, M0_VARIANT, ROOT
from helpers_fc_checker import SAN_ENV
from quarl_edge.converters.ops.optimized.cortex_m0.quantize import scale_inverse
from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import COMMON_CFLAGS, board_defines, expand_flag, family_dirs


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fc_variant")


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
                out += struct.pack("<iiII", len(chunk), zp, int(np.array([s], "<f4").view("<u4")[0]),
                                   scale_inverse(float(s)))
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
    srcs = [Q_CHECK, qfile, FW / "core" / "requant.c", *(c for d in family_dirs(board) for c in sorted(d.glob("*.c")))]
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           *board_defines(board), f"-I{FW / 'core'}", *(f"-I{d}" for d in family_dirs(board)),
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


# ------------------------------------------------------------------------------ DEQUANTIZE (cortex-m0)
DQ_CHECK = ROOT / "tests" / "c" / "dequantize_check.c"
M0_DEQUANTIZE = FW / "core" / "kernels" / "optimized" / M0_VARIANT / "dequantize.c"


def dequantize_cases(seed: int = 7) -> list[tuple[int, int]]:
    """(zero point, scale bits): the integer path's ends (the least normal scale, the largest
    biased exponent it takes, 245, and 246 beyond it), significands of all ones (the products'
    ties and carries into the exponent), scales that are not normal or positive (0, -0, a
    denormal, negative, inf, NaN: the float path), and random normal scales; zero points at the
    ends."""
    rng = np.random.default_rng(seed)
    f = lambda v: int(np.array([v], "<f4").view("<u4")[0])  # noqa: E731
    bits = [f(v) for v in (1.0, 0.5, 0.0117, 0.25, 3.0e-5, 1.7, 1e-30, 0.003921569, 1.1754944e-38,
                           1e-45, 0.0, -0.0, -0.5, np.inf, np.nan, 16777215.0, 0.99999994)]
    bits += [(245 << 23) | 0x7FFFFF, (245 << 23), (246 << 23), (1 << 23) | 0x7FFFFF, (1 << 23),
             (127 << 23) | 0x7FFFFF, (100 << 23) | 0x400001]
    bits += rng.integers(1 << 23, 246 << 23, 60).tolist()
    return [(zp, int(b)) for b in bits for zp in (-128, -1, 0, 5, 127)]


def _dequantize_expected(cases: list[tuple[int, int]]) -> list[np.ndarray]:
    """TFLM's result: the float32 product of the scale and q - zero_point (one rounding)."""
    q = np.arange(-128, 128, dtype=np.int32)
    with np.errstate(all="ignore"):
        return [(np.array([b], "<u4").view("<f4")[0] * (q - zp).astype(np.float32)).astype("<f4")
                for zp, b in cases]


def _dequantize_check(run_out: bytes, cases: list[tuple[int, int]]) -> None:
    assert len(run_out) == len(cases) * 2 * 1024
    for k, want in enumerate(_dequantize_expected(cases)):
        ref = run_out[2048 * k:2048 * k + 1024]
        opt = run_out[2048 * k + 1024:2048 * (k + 1)]
        assert opt == ref, cases[k]
        got = np.frombuffer(opt, "<f4")       # NaN's bits are the FPU's (ARM 0x7fc00000, x86 0xffc00000)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), cases[k]
        assert np.array_equal(got[~nan].view("<u4"), want[~nan].view("<u4")), cases[k]


def _dequantize_bytes(cases: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack("<iI", zp, b) for zp, b in cases)


def test_the_m0_dequantize_is_the_reference_on_the_host_under_sanitizers(tmp_module):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp_module / "dq_check_san"
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", "-fsanitize=address,undefined",
                          "-fno-sanitize-recover=all", "-g", f"-I{FW / 'core'}", str(DQ_CHECK),
                          str(M0_DEQUANTIZE), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cases = dequantize_cases()
    run = subprocess.run([str(exe)], input=_dequantize_bytes(cases), capture_output=True,
                         timeout=120, env={**os.environ, **SAN_ENV})
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    _dequantize_check(run.stdout, cases)


def test_the_m0_dequantize_is_the_reference_on_cortex_m0(tmp_module):
    board = get_board("microbit")
    if shutil.which(board.cc) is None or shutil.which("qemu-system-arm") is None:
        pytest.skip(f"{board.cc} or qemu-system-arm is not installed")
    elf = tmp_module / "dq_check_microbit.elf"
    srcs = [DQ_CHECK, M0_DEQUANTIZE, *(c for d in family_dirs(board) for c in sorted(d.glob("*.c")))]
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           *board_defines(board), f"-I{FW / 'core'}", *(f"-I{d}" for d in family_dirs(board)),
           *map(str, srcs), "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cases = dequantize_cases(11)
    with tempfile.TemporaryDirectory(prefix="qe-dq-") as d:
        (Path(d) / "dq_cases.bin").write_bytes(_dequantize_bytes(cases))
        run = subprocess.run(["qemu-system-arm", "-machine", board.connect["machine"], "-kernel",
                              str(elf), "-display", "none", "-monitor", "none", "-serial", "null",
                              "-nodefaults", "-nic", "none", "-semihosting-config",
                              "enable=on,target=native"], cwd=d, capture_output=True, timeout=300)
        assert run.returncode == 0, (run.returncode, run.stderr)
        out = (Path(d) / "dq_out.bin").read_bytes()
    _dequantize_check(out, cases)
