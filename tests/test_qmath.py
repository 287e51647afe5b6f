"""quarl_edge/converters/qmath.py against the C requantizer (gcc + ctypes) and against TFLM's interpreter."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers_models import CORE, compile_c, fc_model, tflm_run
from quarl_edge.converters import qmath
from quarl_edge.core import tflite_host

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
int32s = st.integers(I32_MIN, I32_MAX)
multipliers = st.one_of(st.integers(1 << 30, I32_MAX), st.integers(0, I32_MAX),
                        st.sampled_from([0, 1, 1 << 30, (1 << 30) + 1, I32_MAX]))
shifts = st.one_of(st.integers(-31, 30), st.sampled_from([-31, -30, -1, 0, 1, 29, 30]))


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    so = tmp_path_factory.mktemp("requant") / "librequant.so"
    compile_c([CORE / "requant.c"], so, extra=["-shared", "-fPIC"])
    lib = ctypes.CDLL(str(so))
    for fn, n in (("qe_multiply_by_quantized_multiplier", 3),
                  ("qe_saturating_rounding_doubling_high_mul", 2), ("qe_rounding_divide_by_pot", 2)):
        getattr(lib, fn).argtypes = [ctypes.c_int32] * n
        getattr(lib, fn).restype = ctypes.c_int32
    return lib


# --------------------------------------------------------------- C twin == Python twin
@settings(max_examples=3000, deadline=None)
@given(x=int32s, m=multipliers, shift=shifts)
@example(x=I32_MIN, m=I32_MAX, shift=0)
@example(x=I32_MAX, m=I32_MAX, shift=0)
@example(x=I32_MAX, m=I32_MAX, shift=30)        # left shift wraps in int32
@example(x=I32_MIN, m=1 << 30, shift=-31)
@example(x=-1, m=1 << 30, shift=-31)
@example(x=-2, m=1 << 30, shift=-1)
def test_multiply_by_quantized_multiplier_c_matches_python(clib, x, m, shift):
    want = qmath.multiply_by_quantized_multiplier(x, m, shift)
    assert clib.qe_multiply_by_quantized_multiplier(x, m, shift) == want
    assert I32_MIN <= want <= I32_MAX
    assert int(qmath.multiply_by_quantized_multiplier_np([x], m, shift)[0]) == want


@settings(max_examples=1000, deadline=None)
@given(a=int32s, b=int32s)
@example(a=I32_MIN, b=I32_MIN)                  # the one saturating case
@example(a=I32_MIN, b=I32_MAX)
@example(a=-1, b=1 << 30)
def test_srdhm_c_matches_python(clib, a, b):
    want = qmath.saturating_rounding_doubling_high_mul(a, b)
    assert clib.qe_saturating_rounding_doubling_high_mul(a, b) == want
    if not a == b == I32_MIN:
        # round(a*b / 2^31) with ties up, checked against exact rationals
        assert want == (a * b + (1 << 30)) >> 31
    else:
        assert want == I32_MAX


@settings(max_examples=1000, deadline=None)
@given(x=int32s, e=st.integers(0, 31))
@example(x=-1, e=1)
@example(x=I32_MIN, e=31)
@example(x=I32_MAX, e=31)
@example(x=-3, e=1)
def test_rounding_divide_by_pot_c_matches_python(clib, x, e):
    want = qmath.rounding_divide_by_pot(x, e)
    assert clib.qe_rounding_divide_by_pot(x, e) == want
    # round half away from zero of x / 2^e
    q = abs(x) / (1 << e)
    assert want == int(math.copysign(math.floor(q + 0.5), x))


def test_numpy_twin_matches_scalar_on_many_values():
    rng = np.random.default_rng(1)
    x = rng.integers(I32_MIN, I32_MAX, 20000, endpoint=True)
    x[:4] = [I32_MIN, I32_MAX, 0, -1]
    for m, shift in [(1 << 30, -1), (I32_MAX, 0), (1431655765, -7), (1 << 30, 3), (123456789, -31)]:
        vec = qmath.multiply_by_quantized_multiplier_np(x, m, shift)
        ref = [qmath.multiply_by_quantized_multiplier(int(v), m, shift) for v in x[:2000]]
        assert vec[:2000].tolist() == ref


# ------------------------------------------------------------------ QuantizeMultiplier
@pytest.mark.parametrize("real, expected", [
    (0.0, (0, 0)),
    (0.5, (1 << 30, 0)),
    (0.25, (1 << 30, -1)),
    (1.0, (1 << 30, 1)),
    (0.75, (3 << 29, 0)),
    (1.0 - 2.0 ** -40, (1 << 30, 1)),      # q rounds up to 2^31: halved, shift + 1
    (2.0 ** -32, (1 << 30, -31)),          # the smallest shift kept
    (2.0 ** -33, (0, 0)),                  # shift < -31: flushed to zero
    (2.0 ** -40, (0, 0)),
    (1.0 / 3.0, (1431655765, -1)),
    (2.0 ** 29 * 1.5, (3 << 29, 30)),
])
def test_quantize_multiplier_edges(real, expected):
    assert qmath.quantize_multiplier(real) == expected


def test_quantize_multiplier_single_rounding_clamps_large_shift():
    assert qmath.quantize_multiplier(2.0 ** 31) == (1 << 30, 32)
    assert qmath.quantize_multiplier(2.0 ** 31, single_rounding=True) == (I32_MAX, 30)


def test_quantize_multiplier_rejects_non_finite():
    with pytest.raises(ValueError):
        qmath.quantize_multiplier(float("nan"))


@settings(max_examples=500, deadline=None)
@given(st.floats(min_value=2.0 ** -31, max_value=2.0 ** 29, allow_nan=False, allow_infinity=False))
def test_quantize_multiplier_is_the_nearest_q31(real):
    m, shift = qmath.quantize_multiplier(real)
    assert (1 << 30) <= m < (1 << 31)
    approx = m * 2.0 ** (shift - 31)
    assert abs(approx - real) <= 2.0 ** (shift - 32) * (1 + 1e-12)


def test_effective_scale_is_a_double_product():
    si, sw, so = 0.1, 0.3, 0.7
    f64 = float(np.float32(si)) * float(np.float32(sw)) / float(np.float32(so))
    f32 = float(np.float32(si) * np.float32(sw)) / float(np.float32(so))
    assert f32 != f64                    # the example can tell the two apart
    assert qmath.effective_scale(si, sw, so) == f64


_SCALE_VARIANTS = {
    "double product": lambda si, sw, so: float(si) * float(sw) / float(so),
    "float32 product": lambda si, sw, so: float(np.float32(si) * np.float32(sw)) / float(so),
    "all float32": lambda si, sw, so: float(np.float32(np.float32(si) * np.float32(sw)) / np.float32(so)),
}


def _round_in_double(accs: np.ndarray, real: float) -> np.ndarray:
    """LiteRT's reference FULLY_CONNECTED requantization: round(acc * real) in double, halves
    away from zero (std::round), no fixed-point multiplier."""
    v = accs.astype(np.float64) * real
    return (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64)


# What each host interpreter's reference kernels (OpResolverType.BUILTIN_REF) do in an int8
# FULLY_CONNECTED, measured: the rule the crafted accumulators below all follow.
REFERENCE_FC_RULE = {"tflite-runtime": "float32 product", "litert": "round in double"}


def _interpreter_agreement(run) -> tuple[dict, int]:
    """Which effective-scale arithmetic does an interpreter use? Craft FCs (weights 1, input 0,
    bias = the accumulator) at accumulators where the candidate multipliers disagree; `run`
    (model bytes, int8 input) -> the int8 outputs. Returns ({variant: outputs it predicts},
    number of outputs)."""
    rng = np.random.default_rng(5)
    agree = {k: 0 for k in [*_SCALE_VARIANTS, "round in double"]}
    total = 0
    for _ in range(30):
        si, sw, so = (float(np.float32(v)) for v in np.exp(rng.uniform(-6, 0, 3)) * [1, 0.01, 1])
        ms = {k: qmath.quantize_multiplier(f(si, sw, so)) for k, f in _SCALE_VARIANTS.items()}
        # accumulators next to the rounding boundaries (k + 1/2) / scale of every output k
        real = _SCALE_VARIANTS["double product"](si, sw, so)
        near = np.round((np.arange(-120, 120) + 0.5) / real).astype(np.int64)
        accs = (near[:, None] + np.arange(-3, 4)[None, :]).ravel()
        outs = {k: qmath.multiply_by_quantized_multiplier_np(accs, *m) for k, m in ms.items()}
        outs["round in double"] = _round_in_double(accs, real)
        disc = np.zeros(len(accs), bool)
        for a in outs.values():
            for b in outs.values():
                disc |= a != b
        bias = accs[disc][:16]
        if len(bias) == 0:
            continue
        model = fc_model(np.ones((len(bias), 1)), (si, 0), sw, (so, 0), bias=bias)
        ref = run(model, np.zeros((1, 1), np.int8))
        for k in agree:
            agree[k] += int((np.clip(outs[k][disc][:16], -128, 127) == ref).sum())
        total += len(bias)
    return agree, total


def test_tflm_effective_scale_is_a_double_product():
    agree, total = _interpreter_agreement(lambda m, x: tflm_run(m, [x])[0].ravel())
    assert total >= 50
    assert agree["double product"] == total, agree
    assert all(n < total for k, n in agree.items() if k != "double product"), agree


@pytest.mark.parametrize("runtime", tflite_host.installed())
def test_host_reference_kernels_requantize_the_fc_as_measured(runtime):
    """The host interpreters' reference kernels (OpResolverType.BUILTIN_REF, the study's
    '= tflite-runtime (ref. kernels)' column) compute the int8 FULLY_CONNECTED like TFLM but
    for its requantization (REFERENCE_FC_RULE):
    - tflite-runtime 2.14 takes the multiplier from float32(input_scale * filter_scale) /
      output_scale (TFLM: the double product). So a board, which is bit-exact with TFLM,
      returns otherwise than it does where an accumulator lies that near a rounding boundary
      (DQN Acrobot-v1 seed 0's int8 policy in the 2-seed classic-boards grid: 9 of 500
      calibration observations in its first layer).
    - LiteRT 2.3 has no fixed-point multiplier there at all: round(acc * double product),
      halves away from zero (LiteRT's "do requant in float" change of its reference kernel),
      so it parts from TFLM at every accumulator whose two roundings differ from one."""
    module = tflite_host.interpreter_module(runtime)

    def run(model: bytes, x: np.ndarray) -> np.ndarray:
        it = module.Interpreter(model_content=model,
                                experimental_op_resolver_type=module.OpResolverType.BUILTIN_REF)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"]).ravel()
    agree, total = _interpreter_agreement(run)
    rule = REFERENCE_FC_RULE[runtime]
    assert total >= 50
    assert agree[rule] == total, agree
    assert agree["double product"] < total


# ----------------------------------------------------- rounding variant used by TFLM
def _fc_twin(x_q, w_q, zp_in, zp_out, m, shift, mbqm):
    acc = sum((int(w)) * (int(x) - zp_in) for x, w in zip(x_q, w_q))
    return max(-128, min(127, mbqm(acc, m, shift) + zp_out))


def _single_half_away(x, m, shift):
    total = 31 - shift
    v = abs(x * m)
    r = (v + (1 << (total - 1))) >> total
    return r if x * m >= 0 else -r


def test_tflm_interpreter_uses_double_rounding():
    """The pinned tflite-micro interpreter rounds like the default (double-rounding) build."""
    # multiplier 2^30, shift -1 (x 0.25): accumulators -2, -6, -10 are negative ties
    model = fc_model([[1]], (1.0, 0), 1.0, (4.0, 0))
    xs = [np.array([[v]], np.int8) for v in (-2, -6, -10, 2, 6)]
    got = [int(o.ravel()[0]) for o in tflm_run(model, xs)]
    assert got == [-1, -2, -3, 1, 2]               # double rounding
    assert [qmath.multiply_by_quantized_multiplier(v, 1 << 30, -1) for v in (-2, -6, -10, 2, 6)] == got
    assert [qmath.multiply_by_quantized_multiplier_single(v, 1 << 30, -1)
            for v in (-2, -6, -10, 2, 6)] == [0, -1, -2, 1, 2]

    # Every int8 input through FCs with non-power-of-two multipliers.
    differs_single = differs_half_away = 0
    all_x = np.arange(-128, 128, dtype=np.int8)
    for out_scale, weights, zp_in in [(3.0, [[127], [-93], [61]], 0), (0.37, [[1], [-1], [3]], 7),
                                      (12.5, [[100], [-128], [77]], -3), (5.0, [[9], [-7], [127]], 0)]:
        model = fc_model(weights, (1.0, zp_in), 1.0, (out_scale, 0))
        m, shift = qmath.quantize_multiplier(qmath.effective_scale(1.0, 1.0, out_scale))
        ref = tflm_run(model, [np.array([[v]], np.int8) for v in all_x])
        for x, out in zip(all_x, ref):
            for k, w in enumerate(weights):
                want = _fc_twin([x], w, zp_in, 0, m, shift, qmath.multiply_by_quantized_multiplier)
                assert int(out.ravel()[k]) == want, (out_scale, int(x), w)
                differs_single += want != _fc_twin([x], w, zp_in, 0, m, shift,
                                                   qmath.multiply_by_quantized_multiplier_single)
                differs_half_away += want != _fc_twin([x], w, zp_in, 0, m, shift, _single_half_away)
    assert differs_single > 0 and differs_half_away > 0   # the data can tell the variants apart


def test_tflm_rounding_on_random_multipliers():
    """Double rounding against both single-rounding variants at accumulators where they
    disagree, over random (double-product) multipliers."""
    rng = np.random.default_rng(11)
    variants = {"double": qmath.multiply_by_quantized_multiplier,
                "single": qmath.multiply_by_quantized_multiplier_single,
                "single half away": _single_half_away}
    agree = {k: 0 for k in variants}
    total = 0
    for _ in range(20):
        si, sw, so = (float(np.float32(v)) for v in np.exp(rng.uniform(-6, 0, 3)) * [1, 0.01, 1])
        m, shift = qmath.quantize_multiplier(qmath.effective_scale(si, sw, so))
        lim = min(int(120 * so / (si * sw)), 1 << 24)
        accs = rng.integers(-lim, lim, 4000)
        outs = {k: np.array([f(int(a), m, shift) for a in accs]) for k, f in variants.items()}
        disc = (outs["double"] != outs["single"]) | (outs["double"] != outs["single half away"])
        bias = accs[disc][:16]
        if len(bias) == 0:
            continue
        model = fc_model(np.ones((len(bias), 1)), (si, 0), sw, (so, 0), bias=bias)
        ref = tflm_run(model, [np.zeros((1, 1), np.int8)])[0].ravel()
        for k in variants:
            agree[k] += int((np.clip(outs[k][disc][:16], -128, 127) == ref).sum())
        total += len(bias)
    assert total >= 50
    assert agree["double"] == total, agree
    assert agree["single"] < total and agree["single half away"] < total


@pytest.mark.parametrize("runtime", tflite_host.installed())
def test_host_int16x8_fc_requantizes_otherwise_than_tflm(runtime):
    """int16x8 FULLY_CONNECTED: TF Lite Micro (and the firmware) requantize the int64
    accumulator with the multiplier rounded to 15 bits and one rounding
    (multiply_by_quantized_multiplier_int64); tflite-runtime 2.14's reference kernels take the
    32-bit path instead (all 31 bits, double rounding). Through the continuous-action actors'
    last layer (a diagonal scale after TANH; TD3 Pendulum-v1's scales) the two differ by one
    output step on about half of the int16 inputs, so the int16x8 actors' board returns equal
    TF Lite Micro's but not tflite-runtime's (results/classic-boards). LiteRT 2.3 rounds
    acc * real in double instead (and wants the FC's options, which name the bias type)."""
    from helpers_models import op_model, schema
    from quarl_edge.measure.reference import tflm_interpreter
    module = tflite_host.interpreter_module(runtime)
    sx, sw, sy = 2.0 ** -15, 0.015748031, 6.103701889514923e-05
    xs = np.arange(-32768, 32768, dtype=np.int16)
    model = op_model("FULLY_CONNECTED",
                     [dict(shape=[len(xs), 1], dtype="int16", q=(sx, 0)),
                      dict(shape=[1, 1], dtype="int8", q=(sw, 0), data=[[127]])],
                     [dict(shape=[len(xs), 1], dtype="int16", q=(sy, 0))],
                     options=schema().FullyConnectedOptionsT() if runtime == "litert" else None)
    it = module.Interpreter(model_content=model,
                            experimental_op_resolver_type=module.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], xs[:, None])
    it.invoke()
    tflite = it.get_tensor(it.get_output_details()[0]["index"]).ravel().astype(np.int64)
    micro = tflm_interpreter(model, "int16x8 FC")        # the arena the batch needs
    micro.set_input(xs[:, None], 0)
    micro.invoke()
    tflm = np.array(micro.get_output(0)).ravel().astype(np.int64)
    m, shift = qmath.quantize_multiplier(qmath.effective_scale(sx, sw, sy))
    path32 = [qmath.multiply_by_quantized_multiplier(127 * int(x), m, shift) for x in xs]
    path64 = [qmath.multiply_by_quantized_multiplier_int64(127 * int(x), m, shift) for x in xs]
    in_double = _round_in_double(127 * xs.astype(np.int64), qmath.effective_scale(sx, sw, sy))
    host_rule = {"tflite-runtime": path32, "litert": in_double}[runtime]
    assert tflite.tolist() == np.clip(host_rule, -32768, 32767).tolist()
    assert tflm.tolist() == np.clip(path64, -32768, 32767).tolist()
    differ = int((tflite != tflm).sum())
    assert len(xs) // 3 < differ < len(xs) and np.abs(tflite - tflm).max() == 1
