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
from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import COMMON_CFLAGS, board_defines, expand_flag, port_dirs


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
