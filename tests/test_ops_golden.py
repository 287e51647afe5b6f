"""Golden tests for the ops beyond int8/float FULLY_CONNECTED: generated C against the
tflite-micro interpreter (int outputs bit-identical, float outputs bit-identical on x86-64).

- int16x8 (16-bit activations, 8-bit weights, int64 bias) MLPs from the real converter, with
  their int16 QUANTIZE/DEQUANTIZE, and hand-built int16 QUANTIZE/DEQUANTIZE edge cases;
- int8 FULLY_CONNECTED with per-channel weights (hand-built: TF 2.15's converter quantizes
  Dense layers per tensor);
- int8 TANH, LOGISTIC, RELU, RELU6: lookup tables computed in Python
  (quarl_edge/converters/qmath.py), checked over all 256 inputs for many random input quantizations, both
  the table itself (cheap, many scales) and through generated C (fewer, slower: gcc);
- float32 RELU, RELU6, TANH, LOGISTIC, including inf, NaN, -0.0 and the logistic cutoffs;
- MLPs with tanh/sigmoid heads from the converter (the PPO/SAC shape: Dense -> tanh) in int8
  (float I/O and int8 I/O) and float32;
- RESHAPE as an alias (no code) and in-place element-wise ops in the memory plan.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers_models import (CFLAGS, CORE, convert, gcc, op_model, random_mlp, tflm_run,
                            unary_model)
from quarl_edge.converters import cgen, qmath
from test_kernels_golden import N_INPUTS, _compare, _float_inputs

FEW = settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture])
CHEAP = settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ALL_INT8 = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 256)


def _f32(v: float) -> float:
    return float(np.float32(v))


# ------------------------------------------------------------------------------- int16x8
@FEW
@given(seed=st.integers(0, 2 ** 16), input_dim=st.integers(1, 24),
       widths=st.lists(st.integers(1, 48), min_size=1, max_size=3),
       act=st.sampled_from(["relu", "none", "relu6"]),
       weight_scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_int16x8_mlp(seed, input_dim, widths, act, weight_scale):
    acts = [act] * (len(widths) - 1) + ["none"]
    rng = np.random.default_rng(seed)
    model = convert(random_mlp(seed, input_dim, widths, acts, weight_scale), "int16x8",
                    rng.standard_normal((64, input_dim)))
    with tempfile.TemporaryDirectory() as d:
        r = _compare(model, _float_inputs(rng, N_INPUTS, input_dim, 1.0), Path(d),
                     f"int16x8 {seed} {input_dim} {widths} {act} {weight_scale}")
    assert r["gm"].ops[0] == "QUANTIZE" and r["gm"].ops[-1] == "DEQUANTIZE"


def test_int16x8_int16_io_and_kernel_choice(tmp_path):
    model = op_model("FULLY_CONNECTED",
                     [dict(shape=[2, 5], dtype="int16", q=(0.001, 0)),
                      dict(shape=[3, 5], dtype="int8", q=(0.02, 0),
                           data=np.array([[127, -128, 5, 0, 1]] * 3)),
                      dict(shape=[3], dtype="int64", q=(0.00002, 0),
                           data=np.array([0, 1 << 24, -(1 << 24)]))],
                     [dict(shape=[2, 3], dtype="int16", q=(0.01, 0))])
    rng = np.random.default_rng(3)
    x = rng.integers(-32768, 32768, (N_INPUTS, 2, 5)).astype(np.int16)
    x[0], x[1] = -32768, 32767
    r = _compare(model, x, tmp_path, "int16 io")
    assert r["gm"].inputs[0].dtype == "int16" and r["gm"].outputs[0].dtype == "int16"
    assert "qe_fully_connected_s16(" in r["gm"].c_path.read_text()
    assert (r["got"] == 32767).any() and (r["got"] == -32768).any()   # saturation exercised


@pytest.mark.parametrize("scale", [1e-4, 0.0371, 3.0517578125e-05, 2.5])
def test_int16_quantize_dequantize(tmp_path, scale):
    rng = np.random.default_rng(int(scale * 1e5))
    k = rng.integers(-40000, 40000, (N_INPUTS // 2, 1, 64)).astype(np.float32)
    x = np.concatenate([(k + 0.5) * np.float32(scale),
                        rng.standard_normal((N_INPUTS // 2, 1, 64)) * scale * 40000]).astype(np.float32)
    x[0, 0, :6] = [0.0, -0.0, 1e9 * scale, -1e9 * scale, 40000 * scale, -40000 * scale]
    q = op_model("QUANTIZE", [dict(shape=[1, 64], dtype="float32")],
                 [dict(shape=[1, 64], dtype="int16", q=(scale, 0))])
    r = _compare(q, x, tmp_path / "q", f"quantize int16 {scale}")
    assert np.array_equal(r["got"].reshape(x.shape), qmath.quantize_f32_int16(x, scale))
    dq = op_model("DEQUANTIZE", [dict(shape=[1, 256], dtype="int16", q=(scale, 0))],
                  [dict(shape=[1, 256], dtype="float32")])
    xi = rng.integers(-32768, 32768, (200, 1, 256)).astype(np.int16)
    xi[0, 0, :2] = [-32768, 32767]
    _compare(dq, xi, tmp_path / "dq", f"dequantize int16 {scale}")


def test_int64_requantization_twin_matches_interpreter(tmp_path):
    """The 64-bit MultiplyByQuantizedMultiplier (Q15-reduced multiplier) against TFLM through an
    int16 FC with a bias that walks the accumulator across rounding boundaries."""
    depth = 1
    w = np.array([[1]], np.int8)
    bias = np.arange(-3000, 3000, 3, dtype=np.int64)
    outs = []
    for b in bias[:40]:
        model = op_model("FULLY_CONNECTED",
                         [dict(shape=[1, depth], dtype="int16", q=(1.0, 0)),
                          dict(shape=[1, depth], dtype="int8", q=(0.37, 0), data=w),
                          dict(shape=[1], dtype="int64", q=(0.37, 0), data=[b])],
                         [dict(shape=[1, 1], dtype="int16", q=(3.1, 0))])
        outs.append(int(tflm_run(model, [np.array([[0]], np.int16)])[0].ravel()[0]))
    m, sh = qmath.quantize_multiplier(qmath.effective_scale(1.0, 0.37, 3.1))
    assert outs == [qmath.multiply_by_quantized_multiplier_int64(int(b), m, sh) for b in bias[:40]]


# -------------------------------------------------------------- per-channel FULLY_CONNECTED
@CHEAP
@given(seed=st.integers(0, 2 ** 16), out_depth=st.integers(1, 24), depth=st.integers(1, 48),
       batches=st.integers(1, 3), use_bias=st.booleans(),
       activation=st.sampled_from(["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]))
def test_fc_per_channel(tmp_path, seed, out_depth, depth, batches, use_bias, activation):
    from helpers_models import schema
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (out_depth, depth)).astype(np.int8)
    si = _f32(10 ** rng.uniform(-3, 0.5))
    ws = (10 ** rng.uniform(-4, -1, out_depth)).astype(np.float32)
    so = _f32(10 ** rng.uniform(-2, 1))
    ins = [dict(shape=[batches, depth], dtype="int8", q=(si, int(rng.integers(-128, 128)))),
           dict(shape=[out_depth, depth], dtype="int8", q=(ws, [0] * out_depth), data=w)]
    ins.append(dict(shape=[out_depth], dtype="int32", q=(ws * np.float32(si), [0] * out_depth),
                    data=rng.integers(-(1 << 16), 1 << 16, out_depth)) if use_bias else None)
    opt = schema().FullyConnectedOptionsT()
    opt.fusedActivationFunction = getattr(schema().ActivationFunctionType, activation)
    model = op_model("FULLY_CONNECTED", ins,
                     [dict(shape=[batches, out_depth], dtype="int8", q=(so, int(rng.integers(-128, 128))))],
                     opt)
    x = rng.integers(-128, 128, (500, batches, depth)).astype(np.int8)
    x[0], x[1] = -128, 127
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    r = _compare(model, x, d, f"per-channel seed {seed}")
    # one output channel is one scale: per tensor
    assert ("qe_fully_connected_s8_pc(" in r["gm"].c_path.read_text()) == (out_depth > 1)


# --------------------------------------------------- int8 TANH / LOGISTIC / RELU / RELU6
_OUT_Q = {"TANH": (1 / 128, 0), "LOGISTIC": (1 / 256, -128)}


def _rand_q(rng):
    return _f32(10 ** rng.uniform(-3.5, 1.5)), int(rng.integers(-128, 128))


@pytest.mark.parametrize("op", ["TANH", "LOGISTIC", "RELU", "RELU6"])
def test_int8_lut_twin_matches_interpreter_exhaustively(op):
    """The Python tables against TFLM over all 256 inputs, for 150 random input quantizations
    (RELU: and random output quantizations). No C here: this pins the arithmetic."""
    rng = np.random.default_rng(sum(map(ord, op)))
    for _ in range(150):
        s, zp = _rand_q(rng)
        if op in _OUT_Q:
            out_q, table = _OUT_Q[op], qmath.tanh_logistic_lut_s8(op, s, zp)
        elif op == "RELU":
            out_q = (_f32(s * rng.uniform(0.2, 5)), int(rng.integers(-128, 128)))
            table = qmath.relu_lut_s8(s, zp, *out_q)
        else:
            out_q, table = (s, zp), qmath.relu6_lut_s8(s, zp)
        ref = tflm_run(unary_model(op, [1, 256], "int8", (s, zp), out_q), [ALL_INT8[0]])[0].ravel()
        assert np.array_equal(ref, table), (op, s, zp, out_q)


@pytest.mark.parametrize("op", ["TANH", "LOGISTIC", "RELU", "RELU6"])
def test_int8_unary_ops_generated_c(tmp_path, op):
    rng = np.random.default_rng(7 + len(op))
    for k in range(3):
        s, zp = _rand_q(rng)
        out_q = _OUT_Q.get(op, (s, zp) if op == "RELU6" else (_f32(s * 1.7), zp // 2))
        model = unary_model(op, [1, 2, 128], "int8", (s, zp), out_q)
        r = _compare(model, ALL_INT8.reshape(1, 2, 128), tmp_path / str(k), f"{op} {s} {zp}")
        assert "qe_lut_s8(" in r["gm"].c_path.read_text()


def test_int8_tanh_with_wrong_output_quantization_is_refused(tmp_path):
    from quarl_edge.core.errors import UnsupportedOpError
    path = tmp_path / "t.tflite"
    path.write_bytes(unary_model("TANH", [1, 4], "int8", (0.1, 0), (0.1, 0)))
    with pytest.raises(UnsupportedOpError, match=r"TANH.*scale 0.0078125"):
        cgen.generate(path, tmp_path / "gen")


# ------------------------------------------------------------------- float32 activations
@pytest.mark.parametrize("op", ["RELU", "RELU6", "TANH", "LOGISTIC"])
def test_float_unary_ops(tmp_path, op):
    rng = np.random.default_rng(len(op))
    x = (rng.standard_normal((N_INPUTS, 1, 64)) * rng.choice([0.1, 1, 5, 30], (N_INPUTS, 1, 1)))
    x = x.astype(np.float32)
    x[0, 0, :12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 6.0, -9.0, -9.000001,
                    16.619047164916992188, 16.62, 1e-40, -1e-40]
    _compare(unary_model(op, [1, 64], "float32"), x, tmp_path, f"float {op}")


# ---------------------------------------------------------- policy heads from the converter
@FEW
@given(seed=st.integers(0, 2 ** 16), input_dim=st.integers(1, 16),
       hidden=st.lists(st.integers(1, 64), min_size=1, max_size=2),
       head=st.sampled_from(["tanh", "sigmoid"]), mode=st.sampled_from(["int8", "int8_io", "float"]),
       weight_scale=st.sampled_from([0.3, 1.0, 4.0]))
def test_mlp_with_squashing_head(seed, input_dim, hidden, head, mode, weight_scale):
    widths = hidden + [int(np.random.default_rng(seed).integers(1, 6))]
    acts = ["tanh" if seed % 2 else "relu"] * len(hidden) + [head]
    rng = np.random.default_rng(seed)
    model = convert(random_mlp(seed, input_dim, widths, acts, weight_scale), mode,
                    rng.standard_normal((64, input_dim)))
    if mode == "int8_io":
        x = rng.integers(-128, 128, (N_INPUTS, 1, input_dim)).astype(np.int8)
    else:
        x = _float_inputs(rng, N_INPUTS, input_dim, 1.0, extreme=(mode == "float"))
    with tempfile.TemporaryDirectory() as d:
        r = _compare(model, x, Path(d), f"{mode} {head} head seed {seed} {input_dim} {widths}")
    assert {"TANH": "tanh", "LOGISTIC": "sigmoid"}[[o for o in r["gm"].ops
                                                   if o in ("TANH", "LOGISTIC")][-1]] == head


def test_ppo_style_tanh_policy_int8(tmp_path):
    """A fixed PPO/SAC-shaped actor (64-64 tanh, tanh head) in full int8: bit-exact."""
    model = convert(random_mlp(11, 8, [64, 64, 2], ["tanh", "tanh", "tanh"], 1.5), "int8",
                    np.random.default_rng(0).standard_normal((128, 8)))
    r = _compare(model, _float_inputs(np.random.default_rng(1), N_INPUTS, 8, 1.0), tmp_path, "ppo")
    assert r["gm"].ops == ["QUANTIZE", "FULLY_CONNECTED", "TANH", "FULLY_CONNECTED", "TANH",
                           "FULLY_CONNECTED", "TANH", "DEQUANTIZE"]
    assert np.abs(r["got"]).max() <= 1.0


# ------------------------------------------------------------------- aliases and in-place
def test_reshape_is_an_alias_and_activations_run_in_place(tmp_path):
    shape_const = dict(shape=[2], dtype="int32", data=np.array([4, 6], np.int32))
    model = op_model("RESHAPE", [dict(shape=[1, 24], dtype="float32"), shape_const],
                     [dict(shape=[4, 6], dtype="float32")], None,
                     op2=("TANH", None, dict(shape=[4, 6], dtype="float32")))
    x = np.random.default_rng(0).standard_normal((300, 1, 24)).astype(np.float32) * 3
    r = _compare(model, x, tmp_path, "reshape + tanh")
    gm = r["gm"]
    assert gm.ops == ["RESHAPE", "TANH"]
    src = gm.c_path.read_text()
    assert "qe_tanh_f32(" in src and "(alias, no code)" in src
    # graph input and output are not overwritten in place: two 96-byte buffers
    assert gm.arena_bytes == 2 * 96

    # int8: FC -> RELU -> TANH: the RELU and TANH outputs reuse the FC output's buffer
    mlp = convert(random_mlp(5, 6, [32, 32, 4], ["relu", "tanh", "none"]), "int8_io")
    (tmp_path / "m.tflite").write_bytes(mlp)
    gm2 = cgen.generate(tmp_path / "m.tflite", tmp_path / "gen2")
    assert gm2.ops.count("TANH") == 1 and gm2.arena_bytes <= 16 + 32 + 32 + 16


# ------------------------------------------------------------------ strict and Cortex-M4
def test_all_new_kernels_compile_for_cortex_m4(tmp_path):
    """Every kernel and a generated model using the new ops, with arm-none-eabi-gcc (strict)."""
    arm = shutil.which("arm-none-eabi-gcc")
    if arm is None:
        pytest.skip("arm-none-eabi-gcc is not installed")
    mlp = convert(random_mlp(5, 6, [16, 4], ["tanh", "sigmoid"]), "int8")
    (tmp_path / "a.tflite").write_bytes(mlp)
    cgen.generate(tmp_path / "a.tflite", tmp_path / "a")
    (tmp_path / "b.tflite").write_bytes(convert(random_mlp(5, 6, [16, 4], ["tanh", "sigmoid"]), "float"))
    cgen.generate(tmp_path / "b.tflite", tmp_path / "b")
    (tmp_path / "c.tflite").write_bytes(convert(random_mlp(5, 6, [16, 4], ["relu", "none"]), "int16x8"))
    cgen.generate(tmp_path / "c.tflite", tmp_path / "c")
    sources = ([CORE / "requant.c"] + sorted((CORE / "kernels").glob("*.c"))
               + [tmp_path / m / "model.c" for m in "abc"])
    for src in sources:
        for cmd in ([arm, "-mcpu=cortex-m4", "-mthumb", "-std=c99", "-Wall", "-Wextra", "-Werror",
                     "-Os", f"-I{CORE}", "-c", str(src), "-o", str(tmp_path / "x.o")],
                    [gcc(), *CFLAGS, "-pedantic", "-c", str(src), "-o", str(tmp_path / "y.o")]):
            res = subprocess.run(cmd, capture_output=True, text=True)
            assert res.returncode == 0, f"{src}:\n{res.stderr}"
