"""The kernels' shared int8/int16 output stage (firmware/core/requant.h: qe_offset_clamp,
qe_requantize_output): requantize, add the output zero point, clamp to the fused activation.

TFLM adds `requant(acc) + output_offset` in int32, which overflows (undefined behaviour) when a
multiplier near 2^31 with a large shift takes the accumulator to the ends of int32. Our stage
clamps in the offset-shifted domain instead: the exact clamp(requant(acc) + offset, lo, hi),
overflow-free while offset, lo and hi lie in int16 range (requant.h's precondition).

  - tests/c/output_stage_check.c, built with -fsanitize=undefined -fno-sanitize-recover=all
    (and plain -O2), over extreme inputs: scaled values at both ends of int32, around 0 and
    around every clamp point, a sweep; every int8 offset and the int16 ends; bounds at the
    type ends. Every result equals the Python twin (quarl_edge/converters/qmath.py), no UBSan report.
  - Hand-built int8 FULLY_CONNECTED models with the largest effective scales (multiplier
    2^31 - 1 or 2^31 - 256, shifts 28..30, output zero points -128 and 127), run through the
    generated C on the host board (and the emulated Cortex-M4 and M3) by `validate`: byte for
    byte TF Lite Micro's, on inputs where TFLM's int32 arithmetic is defined; on inputs where
    it is not, the generated C under UBSan gives the twin's saturated values."""
from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from helpers_models import (CFLAGS, DRIVER, compile_c, compile_driver, core_sources, fc_model, gcc,
                            run_driver, tflm_run)
from quarl_edge.targets.build import COMMON_CFLAGS
from quarl_edge.converters import qmath

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "firmware" / "core"
CHECK = ROOT / "tests" / "c" / "output_stage_check.c"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UBSAN = ["-fsanitize=undefined", "-fno-sanitize-recover=all", "-g"]
SAN_EXIT = 97
SAN_ENV = {"UBSAN_OPTIONS": f"exitcode={SAN_EXIT}:print_stacktrace=1",
           "ASAN_OPTIONS": f"exitcode={SAN_EXIT}"}


# ------------------------------------------------------------------------------ the checker
@dataclasses.dataclass(frozen=True)
class Rec:
    acc64: int
    scaled: int
    acc: int
    multiplier: int
    shift: int
    shift64: int
    offset: int
    act_min: int
    act_max: int

    def encode(self) -> bytes:
        return struct.pack("<q8i", self.acc64, self.scaled, self.acc, self.multiplier, self.shift,
                           self.shift64, self.offset, self.act_min, self.act_max)


def scaled_values() -> list[int]:
    """INT32_MIN, INT32_MIN + 1, ..., -1, 0, 1, ..., INT32_MAX - 1, INT32_MAX (the first and last
    few of each), powers of two and their neighbours, and a sweep over the whole range."""
    v = set()
    for k in range(10):
        v |= {INT32_MIN + k, INT32_MAX - k, k, -k}
    for e in (1, 2, 3, 7, 8, 14, 15, 16, 17, 24, 29, 30, 31):
        for d in (-1, 0, 1):
            v |= {(1 << e) + d, -(1 << e) + d}
    v |= set(np.random.default_rng(11).integers(INT32_MIN, INT32_MAX, 60, endpoint=True).tolist())
    return sorted(x for x in v if INT32_MIN <= x <= INT32_MAX)


# multiplier and shift of the requantization: the largest, the common ones, zero
MULT_SHIFTS = [(INT32_MAX, 30), (INT32_MAX, 29), (INT32_MAX, 28), (INT32_MAX, 0), (INT32_MAX, -31),
               (1 << 30, 30), (1 << 30, -1), ((1 << 31) - 256, 1), (0, 0), (1234567890, 5)]
SHIFTS64 = [7, 0, -1, -15, -31]   # the int16x8 path's shift range is [-31, 7]


def records() -> list[Rec]:
    """The int8 grid (every offset -128..127; bounds at the int8 ends, the RELU bound at the
    zero point, a single point at either end, and min > max) and the int16 one (offsets at the
    int16 ends; bounds likewise), each over scaled_values() and the clamp points
    bound - offset + {-1, 0, 1}."""
    base = scaled_values()
    grids = []
    for off in range(-128, 128):
        for lo, hi in ((-128, 127), (max(-128, off), 127), (-128, -128), (127, 127), (5, -5)):
            grids.append((off, lo, hi))
    for off in (-32768, -32767, -1, 0, 1, 32766, 32767):
        for lo, hi in ((-32768, 32767), (-32768, -32768), (32767, 32767), (0, 32767), (-32768, 0)):
            grids.append((off, lo, hi))
    out = []
    for g, (off, lo, hi) in enumerate(grids):
        crit = [b - off + d for b in (lo, hi) for d in (-1, 0, 1)]
        for i, s in enumerate(base + crit):
            # over the grids, every scaled value meets every multiplier and shift
            m, sh = MULT_SHIFTS[(i + g) % len(MULT_SHIFTS)]
            sh64 = SHIFTS64[(i + g) % len(SHIFTS64)]
            out.append(Rec(s * (1 << 15), s, s, m, sh, sh64, off, lo, hi))
    return out


def twin(r: Rec) -> tuple[int, int, int]:
    return (qmath.offset_clamp(r.scaled, r.offset, r.act_min, r.act_max),
            qmath.requantize_output(r.acc, r.multiplier, r.shift, r.offset, r.act_min, r.act_max),
            qmath.offset_clamp(qmath.multiply_by_quantized_multiplier_int64(r.acc64, r.multiplier,
                                                                            r.shift64),
                               r.offset, r.act_min, r.act_max))


def build_checker(tmp: Path, flags: list[str], name: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp / name
    cmd = ["gcc", *COMMON_CFLAGS, "-O2", *flags, f"-I{CORE}", str(CHECK), str(CORE / "requant.c"),
           "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return exe


def run_checker(exe: Path, recs: list[Rec]) -> np.ndarray:
    res = subprocess.run([str(exe)], input=b"".join(r.encode() for r in recs), capture_output=True,
                         timeout=300, env={**os.environ, **SAN_ENV})
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 0 and "runtime error" not in err, (res.returncode, err[-3000:])
    assert len(res.stdout) == 12 * len(recs)
    return np.frombuffer(res.stdout, "<i4").reshape(len(recs), 3)


@pytest.fixture(scope="module")
def checkers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("output_stage")
    return {"ubsan": build_checker(tmp, UBSAN, "check_ubsan"),
            "plain": build_checker(tmp, [], "check_plain")}


def test_the_grid_reaches_the_overflow_and_the_precondition_ends():
    """The inputs really are the extremes: int32 `scaled + offset` overflows for some, offsets
    and bounds reach the int16 ends, the requantization saturates at both int32 ends."""
    recs = records()
    assert any(not INT32_MIN <= r.scaled + r.offset <= INT32_MAX for r in recs)
    assert {-32768, 32767, -128, 127} <= {r.offset for r in recs}
    assert {-32768, 32767} <= {r.act_min for r in recs} | {r.act_max for r in recs}
    req = {qmath.multiply_by_quantized_multiplier(r.acc, r.multiplier, r.shift) for r in recs}
    assert min(req) <= INT32_MIN + 1 and max(req) >= INT32_MAX - 1


def test_output_stage_equals_the_twin_under_ubsan(checkers):
    recs = records()
    got = run_checker(checkers["ubsan"], recs)
    want = np.array([twin(r) for r in recs], np.int64)
    bad = np.argwhere(got != want)
    assert bad.size == 0, [(recs[i], int(got[i, j]), int(want[i, j])) for i, j in bad[:5]]


def test_output_stage_plain_build_gives_the_same(checkers):
    """-O2 without instrumentation: nothing the sanitizer build does differently."""
    recs = records()[::7]
    assert np.array_equal(run_checker(checkers["plain"], recs), run_checker(checkers["ubsan"], recs))


def test_output_stage_is_defined_outside_its_precondition(checkers):
    """Offsets and bounds anywhere in int32 (outside the documented int16 precondition the
    generator never emits): the values may differ from the exact clamp, but no UB."""
    ends = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX]
    recs = [Rec(0, s, s, INT32_MAX, 30, 0, off, lo, hi)
            for s in ends for off in ends for lo in ends[::2] for hi in ends[1::2]]
    run_checker(checkers["ubsan"], recs)


# ------------------------------------------------------------------------------ vs TFLM
def max_multiplier_scales() -> tuple[np.float32, np.float32]:
    """float32 input and weight scales whose (exact, double) product is 2^-15 * (1 - e) with
    e in (2^-32, 3 * 2^-32]: QuantizeMultiplier then rounds q * 2^31 to 2^31 - 1, the largest
    multiplier there is. Found by search over the two 24-bit significands A, B:
    A * B in [2^47 - 3 * 2^15, 2^47 - 2^15)."""
    lo, hi = (1 << 47) - 3 * (1 << 15), (1 << 47) - (1 << 15)
    for a in range(int(np.sqrt(lo)) + 1, 1 << 24):
        b = -(-lo // a)
        if b < (1 << 24) and a * b < hi:
            return np.float32(a * 2.0**-31), np.float32(b * 2.0**-31)
    raise AssertionError("no pair of significands found")


@dataclasses.dataclass
class FcSpec:
    name: str
    in_zp: int
    out_zp: int
    shifts: list[int]          # per output channel (one value: per tensor)
    bias: bool = True
    weight_zp: int = 0
    activation: str = "NONE"
    rows: int = 6
    depth: int = 5

    @property
    def multiplier(self) -> int:
        """2^31 - 1 takes a double input x weight scale product that no float32 bias scale is
        within TFLM's tolerance of (2 % of the output scale, ~2^-45 here): per tensor, only
        without a bias. With one, the product must be a float32: (1 - 2^-24) * 2^-15, whose
        multiplier is 2^31 - 128."""
        return (1 << 31) - 128 if self.bias and len(self.shifts) == 1 else INT32_MAX


SPECS = [FcSpec("shift30-zp-128-mult-max", -128, -128, [30], bias=False),
         FcSpec("shift29-zp127", 127, 127, [29]),
         FcSpec("shift28-zp-128-mult-max", 0, -128, [28], bias=False),
         FcSpec("shift28-zp0-relu", 0, 0, [28], activation="RELU"),
         FcSpec("shift30-zp127", 0, 127, [30]),
         FcSpec("shift29-zp-128-filter-offset", 0, -128, [29], weight_zp=1),
         FcSpec("per-channel-zp127", -128, 127, [30, 29, 28, 30, 29, 28]),
         FcSpec("per-channel-zp-128", 127, -128, [28, 29, 30, 28, 29, 30])]


def build_model(spec: FcSpec) -> tuple[bytes, dict]:
    """An int8 FULLY_CONNECTED (input [1, 2, depth]: two batches) with small weights and biases
    and the requested multipliers; returns the .tflite and the parameters our kernel gets."""
    if spec.multiplier == INT32_MAX:
        s_in, s_w = max_multiplier_scales()
    else:
        # the product (1 - 2^-24) * 2^-15 is a float32: q * 2^31 = 2^31 - 2^7
        s_in, s_w = np.float32((2**24 - 1) * 2.0**-31), np.float32(2.0**-8)
    top = max(spec.shifts)
    s_out = np.float32(2.0 ** (-15 - top))
    ws = [np.float32(s_w * 2.0 ** (sh - top)) for sh in spec.shifts]
    mults = []
    for w_scale, sh in zip(ws, spec.shifts):
        m, got_shift = qmath.quantize_multiplier(qmath.effective_scale(s_in, w_scale, s_out))
        assert got_shift == sh, (got_shift, sh)
        mults.append(m)
    assert set(mults) == {spec.multiplier}, mults
    rng = np.random.default_rng(zlib.crc32(spec.name.encode()))
    w = rng.choice(np.array([-1, 0, 0, 1], np.int8), (spec.rows, spec.depth))
    w[0] = 0                                   # one row of zero weights
    bias = rng.integers(-1, 2, spec.rows) if spec.bias else np.zeros(spec.rows, np.int64)
    model = fc_model(w, (float(s_in), spec.in_zp), ws if len(ws) > 1 else float(ws[0]),
                     (float(s_out), spec.out_zp), bias=bias if spec.bias else None,
                     activation=spec.activation,
                     input_shape=[1, 2, spec.depth], weight_zp=spec.weight_zp)
    lo, hi = qmath.activation_range_quantized(spec.activation, float(s_out), spec.out_zp)
    per_row = (lambda v: v * spec.rows) if len(spec.shifts) == 1 else (lambda v: v)  # noqa: E731
    return model, {"w": w.astype(np.int64) - spec.weight_zp, "bias": bias,
                   "mults": per_row(mults), "shifts": per_row(list(spec.shifts)), "lo": lo, "hi": hi}


def accumulators(spec: FcSpec, p: dict, x: np.ndarray) -> np.ndarray:
    """[2][rows] int32 sums for one input record x (int8 [1, 2, depth])."""
    xin = x.reshape(2, spec.depth).astype(np.int64) - spec.in_zp
    return xin @ p["w"].T + p["bias"]


def tflm_defined(spec: FcSpec, p: dict, acc: np.ndarray) -> bool:
    """TFLM's int32 arithmetic is defined for every output: acc * 2^shift and requant + zp fit."""
    for b in range(acc.shape[0]):
        for r in range(acc.shape[1]):
            a, sh = int(acc[b, r]), p["shifts"][r]
            if not INT32_MIN <= a * (1 << max(sh, 0)) <= INT32_MAX:
                return False
            v = qmath.multiply_by_quantized_multiplier(a, p["mults"][r], sh) + spec.out_zp
            if not INT32_MIN <= v <= INT32_MAX:
                return False
    return True


def twin_outputs(spec: FcSpec, p: dict, x: np.ndarray) -> np.ndarray:
    acc = accumulators(spec, p, x)
    return np.array([[qmath.requantize_output(int(acc[b, r]), p["mults"][r], p["shifts"][r],
                                              spec.out_zp, p["lo"], p["hi"])
                      for r in range(acc.shape[1])] for b in range(acc.shape[0])], np.int8)


def candidate_inputs(spec: FcSpec, n: int = 4000) -> np.ndarray:
    """Inputs at the input zero point but for up to three values 1..3 away per batch (so that
    the accumulators stay small enough for TFLM's acc * 2^shift to fit int32, or just not)."""
    rng = np.random.default_rng(17)
    d = np.zeros((n, 2, spec.depth), np.int64)
    for i in range(n):
        for b in range(2):
            k = rng.integers(0, 4)
            d[i, b, rng.choice(spec.depth, k, replace=False)] = rng.choice([-3, -2, -1, 1, 2, 3], k)
    return np.clip(spec.in_zp + d, -128, 127).astype(np.int8).reshape(n, 1, 2, spec.depth)


def split_inputs(spec: FcSpec, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """(inputs where TFLM is defined, inputs where it is not), each without repeats."""
    xs = np.unique(candidate_inputs(spec), axis=0)
    ok = np.array([tflm_defined(spec, p, accumulators(spec, p, x)) for x in xs])
    return xs[ok], xs[~ok]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_twin_equals_tflm_where_tflm_is_defined(spec):
    """The Python twin is TFLM's arithmetic on these models (the reference the boards are
    compared with below), and the inputs hit the large requantized values, not just zeros."""
    model, p = build_model(spec)
    good, _ = split_inputs(spec, p)
    assert len(good) >= 30
    xs = good[:120]
    got = tflm_run(model, list(xs))
    for x, y in zip(xs, got):
        assert np.array_equal(np.asarray(y).reshape(2, spec.rows), twin_outputs(spec, p, x)), x
    scaled = [abs(qmath.multiply_by_quantized_multiplier(int(a), p["mults"][r], p["shifts"][r]))
              for x in xs for a_row in accumulators(spec, p, x) for r, a in enumerate(a_row)]
    assert max(scaled) >= 1 << 29
    outs = np.concatenate([np.asarray(y).ravel() for y in got])
    assert {int(outs.min()), int(outs.max())} >= ({p["lo"], p["hi"]} if p["lo"] < p["hi"] else {p["lo"]})


BOARDS = ["host", "mps2-an386", "lm3s6965evb"]


@pytest.mark.parametrize("board_id", BOARDS)
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_large_scale_fc_models_are_bit_exact_with_tflm(tmp_path, spec, board_id):
    """Through the generator and `validate`: host (reference kernels, gcc), mps2-an386 (the
    cortex-m-dsp FC, QEMU) and lm3s6965evb (reference kernels on Cortex-M3, QEMU)."""
    from quarl_edge.targets.boards import get_board
    from quarl_edge.measure.validate import validate
    board = get_board(board_id)
    if board_id != "host" and (shutil.which(board.cc) is None or shutil.which("qemu-system-arm") is None):
        pytest.skip(f"{board.cc} or qemu-system-arm is not installed")
    model, p = build_model(spec)
    good, _ = split_inputs(spec, p)
    path = tmp_path / "fc.tflite"
    path.write_bytes(model)
    np.save(tmp_path / "inputs.npy", good[:120].reshape(-1, 2, spec.depth))   # (n, *shape[1:])
    res = validate(path, board, tmp_path / "fw", inputs=tmp_path / "inputs.npy")
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == min(len(good), 120)
    c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert str(spec.multiplier) in c
    assert (("qe_fully_connected_s8_pc(" in c) if len(spec.shifts) > 1 else
            f".output_shift = {spec.shifts[0]}," in c)
    assert f".output_offset = {spec.out_zp}," in c


@pytest.fixture(scope="module")
def ubsan_kernels(tmp_path_factory) -> list[Path]:
    """firmware/core's sources compiled once with UBSan (-O1), for the generated models below."""
    d = tmp_path_factory.mktemp("ubsan_kernels")
    objs = []
    for src in core_sources():
        obj = d / (src.stem + ".o")
        res = subprocess.run([gcc(), *CFLAGS, *UBSAN, "-O1", "-c", str(src), "-o", str(obj)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        objs.append(obj)
    return objs


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_where_tflm_overflows_the_generated_c_saturates(tmp_path, spec, ubsan_kernels):
    """The inputs TFLM cannot run defined (acc * 2^shift or requant + zero point overflow
    int32): the generated model.c and the kernels under UBSan, no report, every output the
    twin's exact clamp -- -128 or 127 here, where TFLM's int32 add would have wrapped."""
    from quarl_edge.converters.cgen import generate
    model, p = build_model(spec)
    _, bad = split_inputs(spec, p)
    assert len(bad) >= 4
    bad = bad[:300]
    path = tmp_path / "fc.tflite"
    path.write_bytes(model)
    generate(path, tmp_path / "gen")
    exe = compile_c([tmp_path / "gen" / "model.c", DRIVER, *ubsan_kernels], tmp_path / "san",
                    UBSAN + ["-O1"])
    proc = subprocess.run([str(exe)], input=bad.tobytes(), capture_output=True, timeout=120,
                          env={**os.environ, **SAN_ENV})
    assert proc.returncode == 0 and b"runtime error" not in proc.stderr, proc.stderr[-2000:]
    got = np.frombuffer(proc.stdout, np.int8).reshape(len(bad), 2, spec.rows)
    want = np.stack([twin_outputs(spec, p, x) for x in bad])
    assert np.array_equal(got, want)
    assert run_driver(compile_driver(tmp_path / "gen"), bad.tobytes()) == proc.stdout
