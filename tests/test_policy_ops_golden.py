"""Golden tests for the ops of issue 12 ("ops for policies people train"): SUB, LEAKY_RELU,
HARD_SWISH, MAXIMUM, MINIMUM, PAD/PADV2, TRANSPOSE, STRIDED_SLICE. Generated C (gcc,
tests/c/run_model.c) against the tflite-micro interpreter: integer outputs bit-identical, float
outputs bit-identical (x86-64, -ffp-contract=off).

Two sources of models, both with hypothesis over shapes and quantization:
- the real TFLite converter on small tf.functions (float32, full int8 with float I/O, full int8
  with int8 I/O), calibrated on data whose range hypothesis draws, so the scales and zero
  points are the converter's own;
- hand-built one-op flatbuffers (helpers_models.op_model) for exact control where the converter
  does not reach: every int8 input value of an element-wise op against many random
  quantizations, alpha < 0 or > 1, the int8 SUB scales where float32 and double ratios differ.

And the refusals: every variant we do not run is one UnsupportedOpError naming the op and why.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers_models import compare_generated, op_model, schema
from quarl_edge.converters import cgen
from quarl_edge.errors import UnsupportedOpError

_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
_HC = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
CHEAP = settings(max_examples=6, deadline=None, phases=_PHASES, suppress_health_check=_HC)
S = schema()
N = 200                       # records per model
ACTS = ["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]
ALL_INT8 = np.arange(-128, 128, dtype=np.int8)


def _f32(v: float) -> float:
    return float(np.float32(v))


def _q(rng, lo=-2.5, hi=0.5):
    return _f32(10 ** rng.uniform(lo, hi)), int(rng.integers(-128, 128))


def _wd(tmp_path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


def _float_inputs(rng, shape, n=N, scale=1.0):
    """Around the calibration range, plus 20 % far outside it (int8 saturation), and zeros."""
    x = rng.standard_normal((n, *shape)) * scale
    k = np.arange(n)
    x[k % 5 == 4] *= 50.0
    x[0] = 0.0
    return x.astype(np.float32)


def _int8_inputs(rng, shape, n=N):
    x = rng.integers(-128, 128, (n, *shape)).astype(np.int8)
    x[0], x[1] = -128, 127
    return x


def tf_model(fn, shapes, mode: str, calib_scale: float = 1.0, seed: int = 0) -> bytes:
    """Convert a tf.function of float32 inputs `shapes` with the real TFLite converter.
    mode: "float", "int8" (full int8, float I/O), "int8_io" (full int8, int8 I/O); the int8 modes
    calibrate on normal data times `calib_scale` (plus an offset, so zero points vary)."""
    import tensorflow as tf
    f = tf.function(fn, input_signature=[tf.TensorSpec(s, tf.float32) for s in shapes])
    c = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    if mode != "float":
        rng = np.random.default_rng(seed)
        offs = [rng.uniform(-1, 1) * calib_scale for _ in shapes]

        def rep():
            for _ in range(32):
                yield [(rng.standard_normal(s) * calib_scale + o).astype(np.float32)
                       for s, o in zip(shapes, offs)]
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = rep
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if mode == "int8_io":
            c.inference_input_type = tf.int8
            c.inference_output_type = tf.int8
    return c.convert()


def check_tf(tmp_path, fn, shapes, mode, rng, calib_scale=1.0, want_op=None, label=""):
    """tf_model + compare_generated with inputs fitting the mode; returns compare's result."""
    m = tf_model(fn, shapes, mode, calib_scale, int(rng.integers(1 << 30)))
    if mode == "int8_io":
        xs = [_int8_inputs(rng, s[1:] if s[0] == 1 else s) for s in shapes]
    else:
        xs = [_float_inputs(rng, s[1:] if s[0] == 1 else s, scale=calib_scale) for s in shapes]
    r = compare_generated(m, xs, _wd(tmp_path), f"{label} {mode} {shapes} calib x{calib_scale}")
    if want_op is not None:
        assert want_op in r["gm"].ops, (want_op, r["gm"].ops)
    return r


def refused(tmp_path, model: bytes, pattern: str):
    p = _wd(tmp_path) / "m.tflite"
    p.write_bytes(model)
    with pytest.raises(UnsupportedOpError, match=pattern):
        cgen.generate(p, p.parent / "gen")


MODES = st.sampled_from(["float", "int8", "int8_io"])
CALIB = st.sampled_from([0.05, 1.0, 3.0, 40.0])


# -------------------------------------------------------------------------------- SUB
_BROADCASTS = [([1, 4, 3], [1, 4, 3]), ([1, 4, 3], [3]), ([2, 1, 5], [1, 3, 1]), ([1, 6], [1, 1]),
               ([1, 2, 3, 4], [1, 1, 1, 4]), ([3, 1], [1, 5]), ([1, 8], [8])]


@CHEAP
@given(seed=st.integers(0, 2 ** 16), shapes=st.sampled_from(_BROADCASTS), mode=MODES,
       calib=CALIB, const=st.sampled_from([None, "a", "b"]), relu=st.booleans())
def test_sub_from_converter(tmp_path, seed, shapes, mode, calib, const, relu):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    sa, sb = shapes
    c = tf.constant((rng.standard_normal(sb if const == "b" else sa) * calib).astype(np.float32))

    def post(y):
        return tf.nn.relu(y) if relu else y
    if const is None:
        fn, ins = (lambda a, b: post(a - b)), [sa, sb]
    elif const == "b":
        fn, ins = (lambda a: post(a - c)), [sa]
    else:
        fn, ins = (lambda b: post(c - b)), [sb]
    check_tf(tmp_path, fn, ins, mode, rng, calib, "SUB", "sub")


@CHEAP
@given(seed=st.integers(0, 2 ** 16), shapes=st.sampled_from(_BROADCASTS), act=st.sampled_from(ACTS),
       swap=st.booleans())
def test_sub_int8_exact_quantization(tmp_path, seed, shapes, act, swap):
    """Hand-built: random scales and zero points (float32 vs double ratios differ for most),
    fused activations, every int8 value on both sides."""
    rng = np.random.default_rng(seed)
    sa, sb = shapes[::-1] if swap else shapes
    so = list(np.broadcast_shapes(sa, sb))
    opt = S.SubOptionsT()
    opt.fusedActivationFunction = getattr(S.ActivationFunctionType, act)
    qa, qb, qo = _q(rng, -2, 0), _q(rng, -2, 0), _q(rng, -1.5, 0.5)
    m = op_model("SUB", [dict(shape=sa, dtype="int8", q=qa), dict(shape=sb, dtype="int8", q=qb)],
                 [dict(shape=so, dtype="int8", q=qo)], opt)
    compare_generated(m, [_int8_inputs(rng, sa), _int8_inputs(rng, sb)], _wd(tmp_path),
                      f"SUB int8 {sa} {sb} {qa} {qb} {qo} {act}")


def test_sub_refusals(tmp_path):
    m = op_model("SUB", [dict(shape=[1, 4], dtype="int16", q=(0.1, 0)), dict(shape=[1, 4], dtype="int16", q=(0.1, 0))],
                 [dict(shape=[1, 4], dtype="int16", q=(0.1, 0))], S.SubOptionsT())
    refused(tmp_path, m, r"op 0 SUB \(int16, int16 -> int16\) is not supported: int16 SUB")
    m = op_model("SUB", [dict(shape=[1, 4], dtype="int8", q=(1.0, 0)), dict(shape=[1, 4], dtype="int8", q=(1.0, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(1e-7, 0))], S.SubOptionsT())
    refused(tmp_path, m, r"op 0 SUB .*output scale")
