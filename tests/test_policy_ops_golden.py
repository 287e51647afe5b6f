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
from quarl_edge.tfcompat import configure_converter
from quarl_edge.errors import UnsupportedOpError

_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
_HC = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
CHEAP = settings(max_examples=4, deadline=None, phases=_PHASES, suppress_health_check=_HC)
FEW = settings(max_examples=2, deadline=None, phases=_PHASES, suppress_health_check=_HC)  # 3-6 builds each
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
    c = configure_converter(tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f))
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


# scale triples where float32 and double scale ratios give different int8 SUB outputs (found
# by search over all 65536 input pairs): the interpreter agrees with double, as ADD's Prepare
_SUB_RATIO_CASES = [((0.16229993104934692, 121), (0.8617790937423706, 79), (0.5826199054718018, -117)),
                    ((0.5804091691970825, 0), (0.1772611290216446, -16), (0.03269818425178528, 3)),
                    ((0.0386870875954628, 124), (0.024941222742199898, 88), (0.03935600072145462, 29))]


@pytest.mark.parametrize("qa, qb, qo", _SUB_RATIO_CASES)
def test_sub_int8_every_pair_where_float_and_double_ratios_differ(tmp_path, qa, qb, qo):
    a = np.repeat(ALL_INT8, 256).reshape(1, 256, 256)
    b = np.tile(ALL_INT8, 256).reshape(1, 256, 256)
    m = op_model("SUB", [dict(shape=[256, 256], dtype="int8", q=qa), dict(shape=[256, 256], dtype="int8", q=qb)],
                 [dict(shape=[256, 256], dtype="int8", q=qo)], S.SubOptionsT())
    compare_generated(m, [a, b], _wd(tmp_path), f"SUB all pairs {qa} {qb} {qo}")


def test_sub_refusals(tmp_path):
    # int16 runs (tests/test_binary_s16_golden.py) with zero points 0 only
    m = op_model("SUB", [dict(shape=[1, 4], dtype="int16", q=(0.1, 3)), dict(shape=[1, 4], dtype="int16", q=(0.1, 0))],
                 [dict(shape=[1, 4], dtype="int16", q=(0.1, 0))], S.SubOptionsT())
    refused(tmp_path, m, r"op 0 SUB \(int16, int16 -> int16\) is not supported: int16 input 1 "
                         r"'in0' has zero point 3; int16 SUB needs 0")
    m = op_model("SUB", [dict(shape=[1, 4], dtype="int32"), dict(shape=[1, 4], dtype="int32")],
                 [dict(shape=[1, 4], dtype="int32")], S.SubOptionsT())
    refused(tmp_path, m, r"op 0 SUB \(int32, int32 -> int32\) is not supported: int32 SUB; "
                         r"supported: int8, int16 and float32")
    m = op_model("SUB", [dict(shape=[1, 4], dtype="int8", q=(1.0, 0)), dict(shape=[1, 4], dtype="int8", q=(1.0, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(1e-7, 0))], S.SubOptionsT())
    refused(tmp_path, m, r"op 0 SUB .*output scale")


# ------------------------------------------------------------------------- LEAKY_RELU
ALPHAS = st.sampled_from([0.01, 0.2, 0.3, 1.0, 1.7, 0.0, -0.5, -2.0])


@CHEAP
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([[1, 8], [2, 3, 5], [1, 4, 4, 3]]),
       mode=MODES, calib=CALIB, alpha=st.sampled_from([0.01, 0.2, 0.3]))
def test_leaky_relu_from_converter(tmp_path, seed, shape, mode, calib, alpha):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    check_tf(tmp_path, lambda x: tf.nn.leaky_relu(x, alpha), [shape], mode, rng, calib,
             "LEAKY_RELU", f"leaky_relu {alpha}")


@FEW
@given(seed=st.integers(0, 2 ** 16), alpha=ALPHAS)
def test_leaky_relu_every_int8_and_int16_value(tmp_path, seed, alpha):
    """Hand-built: all 256 int8 inputs for 3 random (input, output) quantizations, alpha of
    either sign and beyond one; int16 over its whole range."""
    rng = np.random.default_rng(seed)
    opt = S.LeakyReluOptionsT()
    opt.alpha = alpha
    for k in range(3):
        qi = _q(rng, -2, 0)
        qo = qi if k == 0 else _q(rng, -2.5, 0.5)
        m = op_model("LEAKY_RELU", [dict(shape=[1, 256], dtype="int8", q=qi)],
                     [dict(shape=[1, 256], dtype="int8", q=qo)], opt)
        compare_generated(m, [ALL_INT8.reshape(1, 1, 256)], _wd(tmp_path), f"leaky int8 {alpha} {qi} {qo}")
    si, so = _f32(10 ** rng.uniform(-5, -3)), _f32(10 ** rng.uniform(-5, -3))
    m = op_model("LEAKY_RELU", [dict(shape=[1, 512], dtype="int16", q=(si, 0))],
                 [dict(shape=[1, 512], dtype="int16", q=(so, 0))], opt)
    x = rng.integers(-32768, 32768, (8, 1, 512)).astype(np.int16)
    x[0, 0, :2] = -32768, 32767
    compare_generated(m, [x], _wd(tmp_path), f"leaky int16 {alpha} {si} {so}")
    m = op_model("LEAKY_RELU", [dict(shape=[1, 16], dtype="float32")], [dict(shape=[1, 16], dtype="float32")], opt)
    x = _float_inputs(rng, [1, 16])
    x[1, 0, :4] = np.inf, -np.inf, np.nan, -0.0
    compare_generated(m, [x], _wd(tmp_path), f"leaky float {alpha}")


def test_leaky_relu_int16_multipliers_in_double(tmp_path):
    """Every int16 value for scales where float32 ratios (as in the TFLM sources we read) move
    17 outputs by one: the interpreter computes them in double, and so do we."""
    opt = S.LeakyReluOptionsT()
    opt.alpha = 0.3
    m = op_model("LEAKY_RELU", [dict(shape=[256, 256], dtype="int16", q=(3.123496571788564e-05, 0))],
                 [dict(shape=[256, 256], dtype="int16", q=(1.75723234860925e-05, 0))], opt)
    x = np.arange(-32768, 32768, dtype=np.int16).reshape(1, 256, 256)
    compare_generated(m, [x], _wd(tmp_path), "leaky int16 double ratios")


def test_leaky_relu_refusals(tmp_path):
    opt = S.LeakyReluOptionsT()
    opt.alpha = 0.1
    m = op_model("LEAKY_RELU", [dict(shape=[1, 4], dtype="int32")], [dict(shape=[1, 4], dtype="int32")], opt)
    refused(tmp_path, m, r"op 0 LEAKY_RELU \(int32 -> int32\) is not supported: int32 LEAKY_RELU")
    m = op_model("LEAKY_RELU", [dict(shape=[1, 4], dtype="int8", q=(1.0, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(1e-9, 0))], opt)
    refused(tmp_path, m, r"LEAKY_RELU.*identity rescaling .* out of range")


# ------------------------------------------------------------------------- HARD_SWISH
def test_hard_swish_twin_matches_interpreter():
    """hard_swish_s8 (TFLM's int16 fixed point, in Python) against the interpreter on
    every int8 input for 150 random quantizations: scales over four decades (reluish exponents
    of both signs, output exponents down to -20, where int16 RoundingDivideByPOT is odd)."""
    from helpers_models import tflm_run_multi
    from quarl_edge.converters.ops.hard_swish import hard_swish_params_s8, hard_swish_s8
    rng = np.random.default_rng(5)
    done = 0
    for _ in range(150):
        (si, zi), (so, zo) = _q(rng, -3, 1), _q(rng, -3, 1)
        try:
            p = hard_swish_params_s8(si, so)
        except ValueError:
            continue
        m = op_model("HARD_SWISH", [dict(shape=[1, 256], dtype="int8", q=(si, zi))],
                     [dict(shape=[1, 256], dtype="int8", q=(so, zo))])
        ref = tflm_run_multi(m, [[ALL_INT8.reshape(1, 256)]])[0][0].ravel()
        twin = [hard_swish_s8(v, zi, zo, *p) for v in range(-128, 128)]
        assert ref.tolist() == twin, (si, zi, so, zo, p)
        done += 1
    assert done > 100


@FEW
@given(seed=st.integers(0, 2 ** 16))
def test_hard_swish_every_int8_value_and_float(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for k in range(3):
        qi = _q(rng, -2.5, 0.5)
        qo = qi if k == 0 else _q(rng, -2.5, 0.5)
        if qo[0] < qi[0] / 128:
            qo = (qi[0], qo[1])
        m = op_model("HARD_SWISH", [dict(shape=[1, 256], dtype="int8", q=qi)],
                     [dict(shape=[1, 256], dtype="int8", q=qo)])
        compare_generated(m, [ALL_INT8.reshape(1, 1, 256)], _wd(tmp_path), f"hard_swish int8 {qi} {qo}")
    m = op_model("HARD_SWISH", [dict(shape=[1, 16], dtype="float32")], [dict(shape=[1, 16], dtype="float32")])
    x = _float_inputs(rng, [1, 16], scale=4.0)
    x[1, 0, :6] = np.inf, -np.inf, np.nan, -0.0, -3.0, 3.0
    compare_generated(m, [x], _wd(tmp_path), "hard_swish float")


@CHEAP
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([[1, 8], [2, 3, 5], [1, 4, 4, 3]]),
       mode=MODES, calib=CALIB)
def test_hard_swish_from_converter(tmp_path, seed, shape, mode, calib):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    check_tf(tmp_path, lambda x: x * tf.nn.relu6(x + 3.0) * (1.0 / 6.0), [shape], mode, rng, calib,
             "HARD_SWISH", "hard_swish")


def test_hard_swish_refusals(tmp_path):
    from helpers_models import tflm_run_multi
    m = op_model("HARD_SWISH", [dict(shape=[1, 4], dtype="int8", q=(1.0, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(1e-4, 0))])
    with pytest.raises(RuntimeError):          # TFLM's Prepare refuses the left shift too
        tflm_run_multi(m, [[np.zeros((1, 4), np.int8)]])
    refused(tmp_path, m, r"op 0 HARD_SWISH \(int8 -> int8\) is not supported: .*left shift")
    m = op_model("HARD_SWISH", [dict(shape=[1, 4], dtype="int16", q=(1e-3, 0))],
                 [dict(shape=[1, 4], dtype="int16", q=(1e-3, 0))])
    refused(tmp_path, m, r"op 0 HARD_SWISH \(int16 -> int16\) is not supported: int16 HARD_SWISH")


# ------------------------------------------------------------------ MAXIMUM, MINIMUM
@CHEAP
@given(seed=st.integers(0, 2 ** 16), shapes=st.sampled_from(_BROADCASTS), mode=MODES, calib=CALIB,
       const=st.booleans())
def test_maximum_minimum_from_converter(tmp_path, seed, shapes, mode, calib, const):
    """A constant operand on either side; and the clip SB3's VecNormalize exports
    (tf.clip_by_value -> MINIMUM(MAXIMUM(x, lo), hi))."""
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    sa, sb = shapes
    if const:
        c = tf.constant((rng.standard_normal(sb) * calib).astype(np.float32))
        r = check_tf(tmp_path, lambda a: tf.minimum(tf.maximum(a, c), c + 0.5 * calib), [sa], mode, rng,
                     calib, "MAXIMUM", "max/min const")
        assert "MINIMUM" in r["gm"].ops
    else:   # constant first; two differently calibrated graph inputs would need an int8 -> int8
        # QUANTIZE (requantization), which the generator does not have yet: hand-built below
        c = tf.constant((rng.standard_normal(sb) * calib).astype(np.float32))
        # (and one use of the input: MAXIMUM and MINIMUM of one tensor make the converter
        # requantize it for one of them)
        check_tf(tmp_path, lambda a: tf.maximum(c, a) * 2.0, [sa], mode, rng, calib, "MAXIMUM",
                 "max const first")
    clip = 5.0 * calib
    r = check_tf(tmp_path, lambda a: tf.clip_by_value(a, -clip, clip), [sa], mode, rng, calib, "MINIMUM",
                 "clip")


@FEW
@given(seed=st.integers(0, 2 ** 16), shapes=st.sampled_from(_BROADCASTS), swap=st.booleans())
def test_maximum_minimum_hand_built(tmp_path, seed, shapes, swap):
    """int8 and int16 with one random quantization, float32 with NaN, inf and -0.0 on both sides."""
    rng = np.random.default_rng(seed)
    sa, sb = shapes[::-1] if swap else shapes
    so = list(np.broadcast_shapes(sa, sb))
    for op in ("MAXIMUM", "MINIMUM"):
        q = _q(rng)
        m = op_model(op, [dict(shape=sa, dtype="int8", q=q), dict(shape=sb, dtype="int8", q=q)],
                     [dict(shape=so, dtype="int8", q=q)])
        compare_generated(m, [_int8_inputs(rng, sa, 50), _int8_inputs(rng, sb, 50)], _wd(tmp_path), f"{op} int8")
        q16 = (q[0], 0)
        m = op_model(op, [dict(shape=sa, dtype="int16", q=q16), dict(shape=sb, dtype="int16", q=q16)],
                     [dict(shape=so, dtype="int16", q=q16)])
        xs = [rng.integers(-32768, 32768, (50, *s)).astype(np.int16) for s in (sa, sb)]
        compare_generated(m, xs, _wd(tmp_path), f"{op} int16")
        m = op_model(op, [dict(shape=sa, dtype="float32"), dict(shape=sb, dtype="float32")],
                     [dict(shape=so, dtype="float32")])
        xs = [_float_inputs(rng, s, 50) for s in (sa, sb)]
        for x in xs:
            x.reshape(50, -1)[1:5, 0] = np.nan, np.inf, -np.inf, -0.0
        compare_generated(m, xs, _wd(tmp_path), f"{op} float")


def test_maximum_minimum_refusals(tmp_path):
    m = op_model("MAXIMUM", [dict(shape=[1, 4], dtype="int8", q=(0.1, 0)), dict(shape=[1, 4], dtype="int8", q=(0.2, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(0.2, 0))])
    refused(tmp_path, m, r"op 0 MAXIMUM \(int8, int8 -> int8\) is not supported: .*different "
                         r"quantizations.*without rescaling")
    m = op_model("MINIMUM", [dict(shape=[1, 4], dtype="int32"), dict(shape=[1, 4], dtype="int32")],
                 [dict(shape=[1, 4], dtype="int32")])
    refused(tmp_path, m, r"op 0 MINIMUM \(int32, int32 -> int32\) is not supported: int32 MINIMUM")


# ------------------------------------------------------------------------ PAD, PADV2
@CHEAP
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([[1, 5], [2, 3, 4], [1, 4, 4, 3], [1, 2, 3, 2, 2]]),
       mode=MODES, calib=CALIB, value=st.sampled_from([0.0, 0.0, -1.5]))
def test_pad_from_converter(tmp_path, seed, shape, mode, calib, value):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    pads = rng.integers(0, 3, (len(shape), 2)).tolist()
    r = check_tf(tmp_path, lambda x: tf.pad(x, pads, constant_values=value * calib) * 2.0, [shape],
                 mode, rng, calib, None, f"pad {pads} {value}")
    assert {"PAD", "PADV2"} & set(r["gm"].ops), r["gm"].ops


@FEW
@given(seed=st.integers(0, 2 ** 16), rank=st.integers(1, 5), v2=st.booleans())
def test_pad_hand_built(tmp_path, seed, rank, v2):
    """Random shapes and paddings (zero-size input dimensions too), every type: int8 pads
    with the output zero point (PAD) or the constant (PADV2)."""
    rng = np.random.default_rng(seed)
    shape = rng.integers(1, 4, rank).tolist()
    pads = rng.integers(0, 3, (rank, 2))
    so = (np.array(shape) + pads.sum(1)).tolist()
    pd = dict(shape=[rank, 2], dtype="int32", data=pads.astype(np.int32))
    for dt in ("float32", "int8", "int16", "int32"):
        q = _q(rng) if dt == "int8" else (0.01, 0) if dt == "int16" else None
        ins = [dict(shape=shape, dtype=dt, q=q), pd]
        if v2:
            c = rng.standard_normal(1) if dt == "float32" else rng.integers(-100, 100, 1)
            ins.append(dict(shape=[1], dtype=dt, q=q, data=c.astype(dt)))
        m = op_model("PADV2" if v2 else "PAD", ins, [dict(shape=so, dtype=dt, q=q)])
        x = (_float_inputs(rng, shape, 20) if dt == "float32"
             else rng.integers(-128, 128, (20, *shape)).astype(dt))
        compare_generated(m, [x], _wd(tmp_path), f"pad {dt} {shape} {pads.tolist()} v2={v2}")


def test_pad_refusals(tmp_path):
    pd = dict(shape=[2, 2], dtype="int32", data=np.array([[0, 0], [1, 1]], np.int32))
    m = op_model("PAD", [dict(shape=[1, 4], dtype="int8", q=(0.1, 0)), pd], [dict(shape=[1, 6], dtype="int8", q=(0.2, 0))])
    refused(tmp_path, m, r"op 0 PAD \(int8, int32 \(const\) -> int8\) is not supported: .*copies raw")
    m = op_model("PAD", [dict(shape=[1, 4], dtype="float32"), dict(shape=[2, 2], dtype="int32")],
                 [dict(shape=[1, 6], dtype="float32")])
    refused(tmp_path, m, r"PAD.*paddings .* must be a constant")


# -------------------------------------------------------------------------- TRANSPOSE
@CHEAP
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([[2, 3], [2, 3, 4], [2, 4, 3, 2], [2, 2, 3, 2, 2]]),
       mode=MODES, calib=CALIB)
def test_transpose_from_converter(tmp_path, seed, shape, mode, calib):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(shape)).tolist()
    if perm == sorted(perm):
        perm = perm[::-1]
    check_tf(tmp_path, lambda x: tf.transpose(x, perm) * 2.0, [shape], mode, rng, calib, "TRANSPOSE",
             f"transpose {perm}")


@CHEAP
@given(seed=st.integers(0, 2 ** 16), rank=st.integers(1, 5))
def test_transpose_hand_built(tmp_path, seed, rank):
    rng = np.random.default_rng(seed)
    shape = rng.integers(1, 5, rank).tolist()
    perm = rng.permutation(rank)
    pd = dict(shape=[rank], dtype="int32", data=perm.astype(np.int32))
    for dt in ("float32", "int8", "int16"):
        q = _q(rng) if dt == "int8" else (0.01, 0) if dt == "int16" else None
        m = op_model("TRANSPOSE", [dict(shape=shape, dtype=dt, q=q), pd],
                     [dict(shape=[shape[p] for p in perm], dtype=dt, q=q)])
        x = (_float_inputs(rng, shape, 20) if dt == "float32"
             else rng.integers(-128, 128, (20, *shape)).astype(dt))
        compare_generated(m, [x], _wd(tmp_path), f"transpose {dt} {shape} {perm.tolist()}")


def test_transpose_refusals(tmp_path):
    pd = dict(shape=[6], dtype="int32", data=np.arange(6)[::-1].astype(np.int32))
    m = op_model("TRANSPOSE", [dict(shape=[1, 1, 2, 1, 1, 2], dtype="float32"), pd],
                 [dict(shape=[2, 1, 1, 2, 1, 1], dtype="float32")])
    refused(tmp_path, m, r"op 0 TRANSPOSE .* 6-D input; TFLM's TRANSPOSE handles 1 to 5")


# ----------------------------------------------------------------------- STRIDED_SLICE
@CHEAP
@given(seed=st.integers(0, 2 ** 16), mode=MODES, calib=CALIB,
       case=st.sampled_from(["range", "reverse", "shrink", "step"]))
def test_strided_slice_from_converter(tmp_path, seed, mode, calib, case):
    rng = np.random.default_rng(seed)
    fn, shape = {"range": (lambda x: x[:, 1:5] * 2.0, [1, 7]),
                 "reverse": (lambda x: x[:, ::-1, :] * 2.0, [2, 4, 3]),
                 "shrink": (lambda x: x[:, 1, -3:] * 2.0, [1, 3, 5]),
                 "step": (lambda x: x[:, 3:0:-2, ::2, 1:] * 2.0, [1, 5, 4, 3])}[case]
    check_tf(tmp_path, fn, [shape], mode, rng, calib, "STRIDED_SLICE", f"strided_slice {case}")


@FEW
@given(seed=st.integers(0, 2 ** 16), rank=st.integers(1, 4))
def test_strided_slice_hand_built(tmp_path, seed, rank):
    """Random begin/end (negative, out of range), strides of both signs, and all three masks."""
    from quarl_edge.converters.ops.strided_slice import _end, _start
    rng = np.random.default_rng(seed)
    shape = rng.integers(1, 6, rank).tolist()
    begin = rng.integers(-7, 7, rank)
    end = rng.integers(-7, 7, rank)
    strides = rng.choice([-3, -2, -1, 1, 1, 2, 3], rank)
    bm, em, sm = (int(rng.integers(0, 1 << rank)) for _ in range(3))
    counts = []
    for d in range(rank):
        s = _start(int(begin[d]), int(strides[d]), shape[d], bool(bm >> d & 1))
        e = _end(int(end[d]), s, int(strides[d]), shape[d], bool(em >> d & 1), bool(sm >> d & 1))
        counts.append(max(0, -(-(e - s) // int(strides[d]))) if strides[d] > 0
                      else max(0, -(-(s - e) // -int(strides[d]))))
    if 0 in counts:               # an empty output: give the axis its whole range instead
        bm, em, sm = bm | ((1 << rank) - 1), em | ((1 << rank) - 1), 0
        counts = [shape[d] if strides[d] in (1, -1) else -(-shape[d] // abs(int(strides[d])))
                  for d in range(rank)]
    so = [c for d, c in enumerate(counts) if not sm >> d & 1]
    opt = S.StridedSliceOptionsT()
    opt.beginMask, opt.endMask, opt.shrinkAxisMask = bm, em, sm
    cst = lambda v: dict(shape=[rank], dtype="int32", data=np.asarray(v, np.int32))  # noqa: E731
    for dt in ("float32", "int8", "int16", "int32"):
        q = _q(rng) if dt == "int8" else (0.01, 0) if dt == "int16" else None
        m = op_model("STRIDED_SLICE", [dict(shape=shape, dtype=dt, q=q), cst(begin), cst(end), cst(strides)],
                     [dict(shape=so, dtype=dt, q=q)], opt)
        x = (_float_inputs(rng, shape, 20) if dt == "float32"
             else rng.integers(-128, 128, (20, *shape)).astype(dt))
        compare_generated(m, [x], _wd(tmp_path),
                          f"strided_slice {dt} {shape} {begin} {end} {strides} {bm} {em} {sm}")


def test_strided_slice_refusals(tmp_path):
    cst = lambda v: dict(shape=[2], dtype="int32", data=np.asarray(v, np.int32))  # noqa: E731
    opt = S.StridedSliceOptionsT()
    opt.ellipsisMask = 1
    m = op_model("STRIDED_SLICE", [dict(shape=[2, 3], dtype="float32"), cst([0, 0]), cst([2, 3]), cst([1, 1])],
                 [dict(shape=[2, 3], dtype="float32")], opt)
    refused(tmp_path, m, r"op 0 STRIDED_SLICE .* ellipsis_mask 1: TFLM's kernel ignores it")
    m = op_model("STRIDED_SLICE", [dict(shape=[2, 3], dtype="float32"), cst([0, 0]), cst([2, 3]),
                                   dict(shape=[2], dtype="int32")], [dict(shape=[2, 3], dtype="float32")])
    refused(tmp_path, m, r"STRIDED_SLICE.*strides .* must be a constant")


# ------------------------------------------------------------- end to end, on boards
def _normalized_policy():
    """An SB3-style policy: VecNormalize's (obs - mean) / std clipped to +-5 (SUB, MUL,
    MAXIMUM, MINIMUM), a dense layer with leaky ReLU, one with hard-swish, and a head that
    pads, transposes and slices (PAD, TRANSPOSE, STRIDED_SLICE)."""
    import tensorflow as tf
    rng = np.random.default_rng(7)
    mean = tf.constant(rng.standard_normal(6).astype(np.float32))
    inv_std = tf.constant((1 / rng.uniform(0.5, 2, 6)).astype(np.float32))
    w1 = tf.constant(rng.standard_normal((6, 16)).astype(np.float32) * 0.5)
    w2 = tf.constant(rng.standard_normal((16, 8)).astype(np.float32) * 0.5)

    def policy(obs):
        x = tf.clip_by_value((obs - mean) * inv_std, -5.0, 5.0)
        h = tf.nn.leaky_relu(tf.matmul(x, w1), 0.1)
        h = h * tf.nn.relu6(h + 3.0) * (1.0 / 6.0)
        h = tf.matmul(h, w2)
        g = tf.transpose(tf.pad(tf.reshape(h, [1, 2, 4]), [[0, 0], [0, 1], [1, 0]]), [0, 2, 1])
        return g[:, 1:, ::-1] * 2.0
    return policy


@pytest.mark.parametrize("mode", ["int8", "float"])
def test_policy_with_new_ops_is_bit_exact_on_host_and_qemu(tmp_path, mode):
    import shutil as sh
    from quarl_edge.measure.validate import validate
    from quarl_edge.targets.boards import get_board
    m = tf_model(_normalized_policy(), [[1, 6]], mode, 2.0)
    path = tmp_path / f"policy_{mode}.tflite"
    path.write_bytes(m)
    from quarl_edge.converters.tflite_model import parse
    ops = {o.opcode for o in parse(m).operators}
    assert {"SUB", "MAXIMUM", "MINIMUM", "LEAKY_RELU", "HARD_SWISH", "PAD", "TRANSPOSE",
            "STRIDED_SLICE"} <= ops, ops
    boards = ["host"] + (["mps2-an386"] if sh.which("qemu-system-arm") and sh.which("arm-none-eabi-gcc") else [])
    for b in boards:
        res = validate(path, get_board(b), tmp_path / b, random_n=30, seed=3)
        assert res["bit_exact"] is True, (b, mode, res)
    assert len(boards) == 2 or pytest.skip("no QEMU/arm-none-eabi-gcc: validated on host only")
