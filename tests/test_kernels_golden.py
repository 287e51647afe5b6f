"""Golden tests: generated C (gcc, tests/c/run_model.c) against the tflite-micro interpreter.

Random Keras MLPs go through the real TFLite converter (full int8 with float I/O, full int8 with
int8 I/O, plain float32), through cgen and gcc, and thousands of inputs (many far outside the
calibration range) through both the driver and TFLM. int8 outputs must be bit-identical; float
outputs too (x86-64, -ffp-contract=off). Hand-built flatbuffers cover what the converter does not
emit from Keras: batches > 1 with keep_num_dims, RELU_N1_TO_1, exact QUANTIZE/DEQUANTIZE ties.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers_models import (affine_model, build_generated, convert, fc_model, random_mlp,
                            run_driver, tflm_run)
from quarl_edge.converters import qmath

N_INPUTS = 2000


def _compare(model_bytes: bytes, inputs: np.ndarray, workdir: Path, label: str) -> dict:
    """Run `inputs` (N records, each shaped like the model input) through TFLM and the C driver."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.tflite"
    path.write_bytes(model_bytes)
    gm, exe = build_generated(path, workdir / "gen")
    assert len(gm.inputs) == 1 and len(gm.outputs) == 1
    spec_in, spec_out = gm.inputs[0], gm.outputs[0]
    inputs = np.ascontiguousarray(inputs, dtype=spec_in.np_dtype).reshape((-1, *spec_in.shape))
    ref = np.stack(tflm_run(model_bytes, list(inputs)))
    raw = run_driver(exe, inputs.tobytes())
    assert len(raw) == len(inputs) * spec_out.nbytes
    got = np.frombuffer(raw, dtype=spec_out.np_dtype).reshape(ref.shape)
    assert ref.dtype == got.dtype, (ref.dtype, got.dtype)
    if spec_out.dtype == "float32":
        both_nan = np.isnan(ref) & np.isnan(got)
        bad = (ref.view("<u4") != got.view("<u4")) & ~both_nan
        if bad.any():
            diff = np.abs(ref.astype(np.float64) - got.astype(np.float64))[bad]
            pytest.fail(f"{label}: {bad.sum()} of {bad.size} float outputs differ from TFLM, "
                        f"max abs diff {diff.max():.3g}; first at record {np.argwhere(bad)[0][0]}")
    else:
        bad = ref != got
        if bad.any():
            i = np.argwhere(bad)[0][0]
            pytest.fail(f"{label}: {bad.sum()} of {bad.size} integer outputs differ from TFLM; "
                        f"record {i}: tflm {ref[i].ravel().tolist()} c {got[i].ravel().tolist()}")
    return {"gm": gm, "ref": ref, "got": got}


# ------------------------------------------------------------------- random Keras MLPs
@st.composite
def mlp_specs(draw):
    depth = draw(st.integers(1, 3))
    return dict(
        seed=draw(st.integers(0, 2 ** 16)),
        input_dim=draw(st.integers(1, 32)),
        widths=draw(st.lists(st.integers(1, 64), min_size=depth, max_size=depth)),
        activations=draw(st.lists(st.sampled_from(["relu", "none", "relu6"]),
                                  min_size=depth, max_size=depth)),
        weight_scale=draw(st.sampled_from([0.01, 0.1, 0.5, 1.0, 3.0, 10.0])),
        use_bias=draw(st.lists(st.booleans(), min_size=depth, max_size=depth)),
        input_scale=draw(st.sampled_from([0.1, 1.0, 5.0])),
    )


def _float_inputs(rng, n, dim, scale, extreme=False) -> np.ndarray:
    """Calibration-like inputs, plus 20 % x100 and 15 % x1e4 (saturating the int8 input)."""
    x = rng.standard_normal((n, 1, dim)) * scale
    k = np.arange(n)
    x[k % 20 >= 12] *= 100.0
    x[k % 20 >= 17] *= 100.0
    x[0] = 0.0
    if extreme:                       # float models: overflow to inf, -0.0
        x[1] = 3e38
        x[2] = -3e38
        x[3] = -0.0
    return x.astype(np.float32)


def _mlp(spec):
    return random_mlp(spec["seed"], spec["input_dim"], spec["widths"], spec["activations"],
                      spec["weight_scale"], use_bias=spec["use_bias"])


# ~0.5 s of TFLite conversion per example: few models, many inputs each, and no shrinking
# (the failure message names the whole model spec; shrinking would convert dozens more).
GOLDEN = settings(max_examples=4, deadline=None,
                  phases=[Phase.explicit, Phase.reuse, Phase.generate],
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@GOLDEN
@given(mlp_specs())
def test_int8_mlp_float_io(spec):
    rng = np.random.default_rng(spec["seed"])
    calib = rng.standard_normal((64, spec["input_dim"])) * spec["input_scale"]
    model = convert(_mlp(spec), "int8", calib)
    with tempfile.TemporaryDirectory() as d:
        r = _compare(model, _float_inputs(rng, N_INPUTS, spec["input_dim"], spec["input_scale"]),
                     Path(d), f"int8 float-io {spec}")
    assert r["gm"].ops[0] == "QUANTIZE" and r["gm"].ops[-1] == "DEQUANTIZE"
    assert r["gm"].ops.count("FULLY_CONNECTED") == len(spec["widths"])


@GOLDEN
@given(mlp_specs())
def test_int8_mlp_int8_io(spec):
    rng = np.random.default_rng(spec["seed"])
    calib = rng.standard_normal((64, spec["input_dim"])) * spec["input_scale"]
    model = convert(_mlp(spec), "int8_io", calib)
    x = rng.integers(-128, 128, (N_INPUTS, 1, spec["input_dim"])).astype(np.int8)
    x[0], x[1] = -128, 127
    with tempfile.TemporaryDirectory() as d:
        r = _compare(model, x, Path(d), f"int8 int8-io {spec}")
    gm = r["gm"]
    assert gm.inputs[0].dtype == "int8" and gm.outputs[0].dtype == "int8"
    assert set(gm.ops) == {"FULLY_CONNECTED"}


@GOLDEN
@given(mlp_specs())
def test_float_mlp(spec):
    rng = np.random.default_rng(spec["seed"])
    model = convert(_mlp(spec), "float")
    with tempfile.TemporaryDirectory() as d:
        r = _compare(model, _float_inputs(rng, N_INPUTS, spec["input_dim"], spec["input_scale"],
                                          extreme=True), Path(d), f"float {spec}")
    assert set(r["gm"].ops) == {"FULLY_CONNECTED"}


# ----------------------------------------------------------- hand-built FULLY_CONNECTED
@pytest.mark.parametrize("activation", ["NONE", "RELU", "RELU6", "RELU_N1_TO_1"])
def test_fc_batches_keep_num_dims_and_activations(tmp_path, activation):
    rng = np.random.default_rng(hash(activation) % 1000)
    w = rng.integers(-127, 128, (5, 4))
    bias = rng.integers(-3000, 3000, 5)
    model = fc_model(w, (0.05, -3), 0.01, (0.02, 4), bias=bias, activation=activation,
                     input_shape=[2, 3, 4], output_shape=[2, 3, 5], keep_num_dims=True)
    x = rng.integers(-128, 128, (N_INPUTS, 2, 3, 4)).astype(np.int8)
    r = _compare(model, x, tmp_path, f"fc {activation}")
    assert r["gm"].outputs[0].shape == (2, 3, 5)
    lo, hi = qmath.activation_range_quantized(activation, 0.02, 4)
    assert r["got"].min() >= lo and r["got"].max() <= hi
    if activation != "NONE":
        assert (r["got"] == lo).any()            # the clamp was exercised


def test_fc_requantization_extremes(tmp_path):
    """Large and tiny multipliers, deep accumulators, bias near the int32 edge of practice."""
    rng = np.random.default_rng(7)
    for k, (si, sw, so) in enumerate([(1.0, 1.0, 0.5), (0.5, 0.9, 1e-3), (1e-3, 1e-3, 50.0),
                                      (2.0, 0.25, 3.0)]):
        w = rng.integers(-128, 128, (7, 64))
        bias = rng.integers(-(1 << 20), 1 << 20, 7)
        model = fc_model(w, (si, 5), sw, (so, -7), bias=bias)
        x = rng.integers(-128, 128, (500, 1, 64)).astype(np.int8)
        x[0], x[1] = -128, 127
        (tmp_path / str(k)).mkdir()
        _compare(model, x, tmp_path / str(k), f"fc scales {si}, {sw}, {so}")


# --------------------------------------------------------------- QUANTIZE / DEQUANTIZE
@pytest.mark.parametrize("scale, zp", [(0.5, 0), (0.0078125, -128), (0.0371, 17), (3.3, -5),
                                       (1e-4, 127)])
def test_quantize_matches_tflm(tmp_path, scale, zp):
    rng = np.random.default_rng(abs(int(scale * 1e4) + zp))
    n = 64
    k = rng.integers(-300, 300, (N_INPUTS, 1, n)).astype(np.float32)
    x = np.concatenate([
        (k[: N_INPUTS // 2] + 0.5) * np.float32(scale),         # ties (as far as float allows)
        rng.standard_normal((N_INPUTS // 2, 1, n)) * scale * 200,
    ]).astype(np.float32)
    x[0, 0, :4] = [0.0, -0.0, 1e6 * scale, -1e6 * scale]
    r = _compare(affine_model("QUANTIZE", n, scale, zp), x, tmp_path, f"quantize {scale} {zp}")
    assert np.array_equal(r["got"].reshape(x.shape), qmath.quantize_f32(x, scale, zp))


@pytest.mark.parametrize("scale, zp", [(0.5, 0), (0.0078125, -128), (0.0371, 17), (1e-30, 3),
                                       (3.3e30, -5)])
def test_dequantize_matches_tflm(tmp_path, scale, zp):
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 256)
    r = _compare(affine_model("DEQUANTIZE", 256, scale, zp), x, tmp_path, f"dequantize {scale} {zp}")
    assert r["got"].ravel().view("<u4").tolist() == qmath.dequantize(x, scale, zp).ravel().view("<u4").tolist()


def test_quantize_out_of_int32_range_saturates(tmp_path):
    """Where TFLM's float->int32 cast is undefined (|x/scale| >= 2^31, NaN), our kernel is
    defined: finite values saturate, NaN gives -128. (TFLM on x86 returns INT32_MIN + zp there,
    i.e. -128 for zp >= 0 and 127 for zp < 0, even for +inf.)"""
    from helpers_models import compile_driver
    from quarl_edge.converters import cgen
    path = tmp_path / "q.tflite"
    path.write_bytes(affine_model("QUANTIZE", 6, 0.5, -5))
    cgen.generate(path, tmp_path / "gen")
    exe = compile_driver(tmp_path / "gen")
    x = np.array([np.nan, 1e30, -1e30, np.inf, -np.inf, 2.0 ** 40], np.float32)
    got = np.frombuffer(run_driver(exe, x.tobytes()), np.int8)
    assert got.tolist() == [-128, 127, -128, 127, -128, 127]
    assert got.tolist() == qmath.quantize_f32(x, 0.5, -5).tolist()
