"""Issue 12, honest mismatch reports: `validate` classes each output row that differs from TF Lite
Micro's (quarl_edge/measure/compare.py) and only `mismatch` fails. Each class is provoked here
with real inputs on real boards (the host board and QEMU's mps2-an386, a Cortex-M4F with
newlib), and each test first shows that the difference it classes is really there."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from helpers_models import cli, cli_json, convert, random_mlp, unary_model
from quarl_edge.measure.compare import (LIBM_ULP, MISMATCH, NAN_PAYLOAD, InputQuantize,
                                        input_quantize, libm_ops, output_metrics, row_class,
                                        saturated_inputs, undefined_inputs)
from quarl_edge.measure.reference import TFLMReference
from quarl_edge.measure.validate import validate
from quarl_edge.targets.boards import get_board


def board(board_id: str):
    b = get_board(board_id)
    if b.kind != "host" and (shutil.which(b.cc) is None or shutil.which("qemu-system-arm") is None):
        pytest.skip(f"{b.cc} or qemu-system-arm is not installed")
    return b


def f32(*bits: int) -> np.ndarray:
    """float32 values from their bit patterns (exact, whatever repr would round)."""
    return np.array(bits, np.uint32).view(np.float32)


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32))


def run_tflm(model, xs: np.ndarray) -> np.ndarray:
    ref = TFLMReference(model)
    return np.stack([ref.run([x[None]])[0][0] for x in xs])


# --------------------------------------------------------------- reference-undefined
@pytest.fixture(scope="module")
def int8_float_io(tmp_path_factory):
    """An int8 MLP with float I/O whose input zero point is positive (63): TFLM's QUANTIZE on
    x86 turns 1e30 / scale into INT_MIN, + 63 is still negative, clamped to -128, where the
    firmware (and an ARM core's VCVT) saturates to 127."""
    d = tmp_path_factory.mktemp("int8_float_io")
    calib = np.random.default_rng(0).uniform(-3, 1, (200, 4)).astype(np.float32)
    path = d / "int8.tflite"
    path.write_bytes(convert(random_mlp(1, 4, [16, 3], ["relu", "none"]), "int8", calib))
    q = input_quantize(path)
    assert q.zero_point > 0 and q.dtype == np.int8, q
    xs = np.random.default_rng(1).uniform(-3, 1, (7, 4)).astype(np.float32)
    xs[1, 0], xs[2, 0], xs[3, 0] = 1e30, np.inf, 3e9       # undefined, and TFLM says -128
    xs[4, 0], xs[5, 0] = -1e30, np.nan                     # undefined, but TFLM says -128 too
    xs[6, 0] = 1e3                                         # defined: clamped to 127 by both
    np.save(d / "x.npy", xs)
    return path, d / "x.npy", xs, q


def test_undefined_inputs_are_where_the_cast_to_int32_is_undefined():
    q = InputQuantize(scale=0.5, zero_point=-10, dtype=np.dtype(np.int8))
    x = np.array([0.0, 1e3, 2 ** 30 - 64, 2 ** 30, -(2 ** 30), -(2 ** 30) + 64, np.inf, np.nan],
                 np.float32)
    # x / 0.5: 0, 2000, 2^31 - 128, 2^31 (not an int32), -2^31 (- 10 overflows the sum),
    # -2^31 + 128, inf, NaN
    assert undefined_inputs(x, q).tolist() == [False, False, False, True, True, False, True, True]
    sat = saturated_inputs(x, q, undefined_inputs(x, q))
    lo, hi = 0.5 * (-128 + 10), 0.5 * (127 + 10)
    assert sat.tolist() == [0.0, 1e3, 2 ** 30 - 64, hi, lo, -(2 ** 30) + 64, hi, lo]


@pytest.mark.parametrize("board_id", ["host", "mps2-an386"])
def test_an_input_tflm_cannot_quantize_is_reference_undefined(int8_float_io, board_id, tmp_path):
    path, inputs, xs, q = int8_float_io
    ref = run_tflm(path, xs)
    saturated = run_tflm(path, saturated_inputs(xs, q, undefined_inputs(xs, q)))
    # the reference itself is the odd one out: rows 1-3 differ from TFLM on the saturated input
    # (which is what TFLM gives for the defined 1e3 of row 6), rows 4-5 happen not to
    assert [not np.array_equal(ref[i], saturated[i]) for i in range(7)] == \
        [False, True, True, True, False, False, False]
    defined = xs[1].copy()
    defined[0] = 1e3                                          # saturates in TFLM as well
    assert np.array_equal(saturated[1], run_tflm(path, defined[None])[0])
    res = validate(path, board(board_id), tmp_path / "fw", inputs=inputs,
                   save_outputs=tmp_path / "y.npy")
    y = np.load(tmp_path / "y.npy").reshape(ref.shape)
    assert np.array_equal(y, saturated)                       # the board saturated each of them
    assert res["classes"] == {"mismatch": 0, "reference-undefined": 3, "libm-ulp": 0,
                              "nan-payload": 0}
    assert res["bit_exact"] is True and res["mismatches"] == 0 and res["differing"] == 3
    (out,) = res["outputs"]          # compared with TFLM on the saturated input: no error
    assert out["max_abs_error"] == 0.0 and out["rmse"] == 0.0 and out["cosine"] == 1.0
    assert out["top1_agreement"] == 1.0 and res["max_abs_diff"] == 0.0


def test_the_cli_shows_the_classes_and_exits_0(int8_float_io, tmp_path):
    path, inputs, _, _ = int8_float_io
    res = cli_json("validate", path, "--inputs", inputs, "--out", tmp_path / "fw")
    assert res["bit_exact"] is True and res["classes"]["reference-undefined"] == 3
    assert res["libm_ops"] == [] and res["outputs"][0]["name"] == "StatefulPartitionedCall:0"
    p = cli("validate", path, "--inputs", inputs, "--out", tmp_path / "fw")
    assert "3 of 7 outputs differ for reasons that are not ours" in p.stdout
    rows = {ln.split()[0]: ln.split() for ln in p.stdout.splitlines() if ln.strip()}
    assert rows["reference-undefined"][1] == "3" and rows["mismatch"][1] == "0"
    assert rows["StatefulPartitionedCall:0"][1:] == ["0", "0", "1.000000", "1.000"]


# ----------------------------------------------------------------------- nan-payload
@pytest.fixture(scope="module")
def float_dense(tmp_path_factory):
    """A float Dense layer fed infinities: inf * w summed over weights of both signs is
    inf - inf, an invalid operation whose NaN is 0xffc00000 on x86 and 0x7fc00000 on ARM."""
    d = tmp_path_factory.mktemp("float_dense")
    path = d / "dense.tflite"
    path.write_bytes(convert(random_mlp(2, 3, [4], ["none"]), "float"))
    xs = np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32)
    xs[1] = np.inf
    xs[2, :2] = np.inf, -np.inf
    np.save(d / "x.npy", xs)
    return path, d / "x.npy", xs


@pytest.mark.parametrize("board_id", ["host", "mps2-an386"])
def test_nan_with_another_payload_is_nan_payload(float_dense, board_id, tmp_path):
    path, inputs, xs = float_dense
    ref = run_tflm(path, xs)
    assert np.isnan(ref[1:]).sum() >= 4
    assert set(ref[np.isnan(ref)].view(np.uint32).tolist()) == {0xffc00000}   # x86's default NaN
    res = validate(path, board(board_id), tmp_path / "fw", inputs=inputs,
                   save_outputs=tmp_path / "y.npy")
    y = np.load(tmp_path / "y.npy").reshape(ref.shape)
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    assert np.array_equal(y[~np.isnan(y)].view(np.uint32), ref[~np.isnan(ref)].view(np.uint32))
    if board_id == "host":          # gcc on x86: the same NaN, nothing differs
        assert set(y[np.isnan(y)].view(np.uint32).tolist()) == {0xffc00000}
        assert res["differing"] == 0 and res["bit_exact"] is True
        return
    assert set(y[np.isnan(y)].view(np.uint32).tolist()) == {0x7fc00000}   # the Cortex-M4's default NaN
    assert res["classes"] == {"mismatch": 0, "reference-undefined": 0, "libm-ulp": 0,
                              "nan-payload": 2}
    assert res["bit_exact"] is True and res["differing"] == 2
    (out,) = res["outputs"]       # both NaN is no error; the finite values are equal
    assert out["max_abs_error"] == 0.0 and out["nonfinite"] == 0 and out["cosine"] == 1.0


# -------------------------------------------------------------------------- libm-ulp
# tanhf inputs where newlib's (mps2-an386) and glibc's (TFLM on the host) results differ,
# found by a search over 40,000 normal(0, 4) values: one ulp apart, and two ulps apart
TANH_ONE_ULP = f32(0xbe04d421, 0x40121757)        # -0.12971546, 2.2826746
TANH_TWO_ULPS = f32(0xbe2d60ce)                   # -0.1693146
ORDINARY = np.array([0.5, -1.0, 0.0, 3.0], np.float32)


@pytest.fixture(scope="module")
def float_tanh(tmp_path_factory):
    d = tmp_path_factory.mktemp("float_tanh")
    path = d / "tanh.tflite"
    path.write_bytes(unary_model("TANH", [1, 4], "float32"))
    rows = [ORDINARY.copy() for _ in range(4)]
    rows[1][1] = TANH_ONE_ULP[0]
    rows[2][3] = TANH_ONE_ULP[1]
    rows[3][0] = TANH_TWO_ULPS[0]
    xs = np.stack(rows)
    np.save(d / "one_ulp.npy", xs[:3])
    np.save(d / "two_ulps.npy", xs)
    return path, d, xs


def test_a_one_ulp_tanhf_difference_is_libm_ulp_and_two_are_a_mismatch(float_tanh, tmp_path):
    path, d, xs = float_tanh
    assert libm_ops(path) == ["TANH"]
    b = board("mps2-an386")
    res = validate(path, b, tmp_path / "fw", inputs=d / "one_ulp.npy",
                   save_outputs=tmp_path / "y.npy")
    y = np.load(tmp_path / "y.npy").reshape(3, 4)
    ref = run_tflm(path, xs[:3])
    assert ulps(y, ref).tolist() == [[0] * 4, [0, 1, 0, 0], [0, 0, 0, 1]]   # really there
    assert res["classes"] == {"mismatch": 0, "reference-undefined": 0, "libm-ulp": 2,
                              "nan-payload": 0}
    assert res["bit_exact"] is True and res["libm_ops"] == ["TANH"]
    (out,) = res["outputs"]
    assert out["max_abs_error"] == float(np.max(np.abs(y.astype(np.float64) - ref)))
    assert 0 < out["rmse"] < out["max_abs_error"] and 0.999999 < out["cosine"] <= 1.0
    assert out["top1_agreement"] == 1.0
    # the row with a two-ulp difference fails: the CLI says so and exits 1
    p = cli("validate", path, "--board", "mps2-an386", "--inputs", d / "two_ulps.npy",
            "--out", tmp_path / "fw", "--save-outputs", tmp_path / "y2.npy", "--json", expect=1)
    assert ulps(np.load(tmp_path / "y2.npy").reshape(4, 4)[3], run_tflm(path, xs[3:])[0]).max() == 2
    import json
    res = json.loads(p.stdout)
    assert res["classes"] == {"mismatch": 1, "reference-undefined": 0, "libm-ulp": 2,
                              "nan-payload": 0}
    assert res["bit_exact"] is False and res["mismatches"] == 1 and res["differing"] == 3


def test_the_host_board_has_glibcs_tanhf(float_tanh, tmp_path):
    """The same inputs on the host board (gcc, glibc): nothing differs, nothing to class."""
    path, d, _ = float_tanh
    res = validate(path, board("host"), tmp_path / "fw", inputs=d / "two_ulps.npy")
    assert res["differing"] == 0 and res["bit_exact"] is True


def test_libm_ops_are_the_float_transcendental_ops(float_tanh, int8_float_io, tmp_path):
    """An int8 TANH is a table computed with TFLM's integer arithmetic: no libm in it."""
    assert libm_ops(float_tanh[0]) == ["TANH"]
    int8_tanh = tmp_path / "int8_tanh.tflite"
    int8_tanh.write_bytes(convert(random_mlp(3, 8, [8, 2], ["relu", "tanh"]), "int8"))
    assert libm_ops(int8_tanh) == [] and libm_ops(int8_float_io[0]) == []
    softmax = tmp_path / "softmax.tflite"
    softmax.write_bytes(convert(random_mlp(3, 4, [8, 3], ["tanh", "softmax"]), "float"))
    assert libm_ops(softmax) == ["TANH", "SOFTMAX"]


# ------------------------------------------------------- the classifier on real outputs
def test_row_class_on_real_tflm_outputs(float_tanh):
    """TFLM's real tanh outputs, altered bit by bit as a board could: what each class admits."""
    path, _, xs = float_tanh
    r = run_tflm(path, xs[:1])[0]                  # tanh(0.5), tanh(-1), 0, tanh(3)
    bits = r.view(np.int32)

    def board(*delta):
        return (bits + np.array(delta, np.int32)).view(np.float32)
    assert row_class(r.copy(), r, libm=True) is None
    assert row_class(board(1, 0, 0, -1), r, libm=True) == LIBM_ULP
    assert row_class(board(1, 0, 0, 0), r, libm=False) == MISMATCH      # no libm in the model
    assert row_class(board(2, 0, 0, 0), r, libm=True) == MISMATCH
    assert row_class(board(0, 0, np.int32(-2 ** 31), 0), r, libm=True) == MISMATCH   # -0 vs 0
    nan_r, nan_y = r.copy(), r.copy()
    nan_r[2], nan_y[2] = f32(0xffc00000)[0], f32(0x7fc00000)[0]
    assert row_class(nan_y, nan_r, libm=False) == NAN_PAYLOAD
    nan_y[0] = board(1, 0, 0, 0)[0]
    assert row_class(nan_y, nan_r, libm=True) == LIBM_ULP     # an ulp and a payload: libm-ulp
    assert row_class(nan_y, nan_r, libm=False) == MISMATCH
    assert row_class(nan_y, r, libm=True) == MISMATCH          # NaN against a number
    q = np.array([5, -3], np.int8)                              # integers never may differ
    assert row_class(q + np.int8(1), q, libm=True) == MISMATCH


def test_output_metrics_are_on_dequantized_values():
    details = {"quantization_parameters": {"scales": np.array([0.5], np.float32),
                                           "zero_points": np.array([-2], np.int32)}}
    board = np.array([[10, 0], [0, 8]], np.int8)       # real: [6, 1], [1, 5]
    ref = np.array([[12, 0], [9, 0]], np.int8)         # real: [7, 1], [5.5, 1]
    m = output_metrics(board, ref, details, "q")
    assert m["max_abs_error"] == 4.5                   # 1 and 5.5 in the second row
    assert m["rmse"] == pytest.approx(np.sqrt((1 + 4.5 ** 2 + 4 ** 2) / 4))
    y, r = np.array([6, 1, 1, 5.0]), np.array([7, 1, 5.5, 1.0])
    assert m["cosine"] == pytest.approx(y @ r / np.linalg.norm(y) / np.linalg.norm(r))
    assert m["top1_agreement"] == 0.5 and m["nonfinite"] == 0
    # a 2x2 output per row is no argmax head; a NaN against a number is left out and counted
    grid = np.array([[[1.0, np.nan], [0.0, 2.0]]], np.float32)
    m = output_metrics(grid, np.array([[[1.0, 3.0], [0.0, 2.0]]], np.float32), {}, "f")
    assert m["top1_agreement"] is None and m["nonfinite"] == 1
    assert m["max_abs_error"] == 0.0 and m["cosine"] == 1.0
