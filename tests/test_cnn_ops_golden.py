"""Golden tests for the CNN and policy-head ops: generated C (gcc, tests/c/run_model.c) against
the tflite-micro interpreter. Integer outputs bit-identical; float outputs bit-identical too
(x86-64, -ffp-contract=off, the same libm expf as the interpreter).

- SOFTMAX int8 (the Python twin exhaustively against TFLM over many scales and betas, then
  through C) and float32;
- CONV_2D, DEPTHWISE_CONV_2D (random geometry: stride, dilation, SAME/VALID, depth multiplier,
  fused activations; int8 per-channel and per-tensor, float32), MAX_POOL_2D, AVERAGE_POOL_2D;
- ADD, MUL (int8 and float, broadcasting, two graph inputs or a constant operand),
  CONCATENATION, MEAN (spatial, keep_dims or not, requantizing), ARG_MAX (int32 output);
- small CNN policies from the real converter (full int8 with float I/O and int8 I/O, float32);
- refusals: unsupported variants name the op, the dtype and the shape.

Each hand-built model gets hundreds of random inputs (int8 inputs span -128..127, so the int8
clamps saturate; float inputs span several magnitudes). Longer fuzzing: @pytest.mark.slow.
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

from helpers_models import (CFLAGS, CORE, compare_generated, convert, gcc, op_model, random_cnn,
                            schema, tflm_run)
from quarl_edge.converters import cgen
from quarl_edge.converters.ops.binary import add_params_s8
from quarl_edge.converters.ops.softmax import softmax_params_s8, softmax_s8
from quarl_edge.core.errors import UnsupportedOpError

_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
_HC = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
CHEAP = settings(max_examples=8, deadline=None, phases=_PHASES, suppress_health_check=_HC)
SLOW = settings(max_examples=150, deadline=None, phases=_PHASES, suppress_health_check=_HC)
N = 300                       # inputs per hand-built model
ACTS = ["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]
S = schema()


def _f32(v: float) -> float:
    return float(np.float32(v))


def _q(rng, lo=-2.5, hi=0.5):
    return _f32(10 ** rng.uniform(lo, hi)), int(rng.integers(-128, 128))


def _int8_inputs(rng, shape, n=N):
    x = rng.integers(-128, 128, (n, *shape)).astype(np.int8)
    x[0], x[1] = -128, 127
    return x


def _float_inputs(rng, shape, n=N):
    x = rng.standard_normal((n, *shape)) * rng.choice([0.01, 1.0, 5.0, 1e3], (n,) + (1,) * len(shape))
    x = x.astype(np.float32)
    x[0] = 0.0
    return x


def _workdir(tmp_path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


def _out_size(i, k, s, d, padding):
    eff = (k - 1) * d + 1
    return (i + s - 1) // s if padding == 0 else (i + s - eff) // s


# ------------------------------------------------------------------------------ SOFTMAX
def _softmax_model(dtype, shape, in_q, beta):
    opt = S.SoftmaxOptionsT()
    opt.beta = beta
    out_q = (1 / 256, -128) if dtype == "int8" else None
    return op_model("SOFTMAX", [dict(shape=shape, dtype=dtype, q=in_q)],
                    [dict(shape=shape, dtype=dtype, q=out_q)], opt)


def test_softmax_twin_matches_interpreter():
    """softmax_s8 (TFLM's gemmlowp softmax in Python) against the interpreter over 80
    random input quantizations and betas, rows with ties, saturating maxima, one-hot rows."""
    rng = np.random.default_rng(11)
    for _ in range(80):
        s, zp = _q(rng, -3, 0.7)
        beta = _f32(rng.choice([1.0, 1.0, 0.5, 2.0, rng.uniform(0.05, 4)]))
        depth = int(rng.integers(1, 24))
        x = rng.integers(-128, 128, (24, 1, depth)).astype(np.int8)
        x[0], x[1, 0, 0], x[1, 0, 1:], x[2] = 127, 127, -128, x[2, 0, 0]
        # (no draw is refused: a ValueError here fails the test instead of skipping a case)
        mult, shift, diff_min = softmax_params_s8(s, beta)
        ref = np.stack(tflm_run(_softmax_model("int8", [1, depth], (s, zp), beta), list(x)))
        assert np.array_equal(ref, softmax_s8(x, mult, shift, diff_min)), (s, zp, beta, depth)


@CHEAP
@given(seed=st.integers(0, 2 ** 16), rows=st.integers(1, 4), depth=st.integers(1, 64),
       beta=st.sampled_from([1.0, 1.0, 0.25, 3.0]))
def test_softmax_int8_and_float(tmp_path, seed, rows, depth, beta):
    rng = np.random.default_rng(seed)
    q = _q(rng, -3, 0.7)
    r = compare_generated(_softmax_model("int8", [rows, depth], q, beta),
                          [_int8_inputs(rng, [rows, depth])], _workdir(tmp_path), f"softmax int8 {q}")
    assert "qe_softmax_s8(" in r["gm"].c_path.read_text()
    x = _float_inputs(rng, [rows, depth])
    x[1, 0, 0] = -np.inf
    compare_generated(_softmax_model("float32", [rows, depth], None, beta), [x],
                      _workdir(tmp_path), f"softmax float beta {beta}")


def test_softmax_refusals(tmp_path):
    path = tmp_path / "s.tflite"
    m = op_model("SOFTMAX", [dict(shape=[1, 4], dtype="int8", q=(0.1, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(0.1, 0))], S.SoftmaxOptionsT())
    path.write_bytes(m)
    with pytest.raises(UnsupportedOpError, match=r"op 0 SOFTMAX \(int8 -> int8\).*1/256"):
        cgen.generate(path, tmp_path / "g")
    path.write_bytes(_softmax_model("int8", [1, 600], (0.1, 0), 1.0))
    with pytest.raises(UnsupportedOpError, match=r"SOFTMAX.*600 values"):
        cgen.generate(path, tmp_path / "g2")


# ------------------------------------------------------------ CONV_2D, DEPTHWISE_CONV_2D
@st.composite
def conv_specs(draw, depthwise: bool):
    ih, iw = draw(st.integers(1, 10)), draw(st.integers(1, 10))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dil = draw(st.sampled_from([1, 1, 2]))
    padding = draw(st.sampled_from([0, 1]))           # SAME, VALID
    oh, ow = _out_size(ih, kh, sh, dil, padding), _out_size(iw, kw, sw, dil, padding)
    if oh < 1 or ow < 1:
        padding, oh, ow = 0, _out_size(ih, kh, sh, dil, 0), _out_size(iw, kw, sw, dil, 0)
    ic = draw(st.integers(1, 6))
    dm = draw(st.integers(1, 3)) if depthwise else 1
    oc = ic * dm if depthwise else draw(st.integers(1, 8))
    return dict(ih=ih, iw=iw, ic=ic, kh=kh, kw=kw, sh=sh, sw=sw, dil=dil, padding=padding, oh=oh,
                ow=ow, oc=oc, dm=dm, batches=draw(st.integers(1, 2)), act=draw(st.sampled_from(ACTS)),
                per_channel=draw(st.booleans()), bias=draw(st.booleans()),
                seed=draw(st.integers(0, 2 ** 16)))


def _conv_model(spec, dtype, depthwise, rng):
    if depthwise:       # the interpreter crashes on a DEPTHWISE_CONV_2D without bias (converters
        spec = dict(spec, bias=True)   # always emit one): no reference for that case
    opt = S.DepthwiseConv2DOptionsT() if depthwise else S.Conv2DOptionsT()
    opt.padding, opt.strideH, opt.strideW = spec["padding"], spec["sh"], spec["sw"]
    opt.dilationHFactor = opt.dilationWFactor = spec["dil"]
    opt.fusedActivationFunction = getattr(S.ActivationFunctionType, spec["act"])
    if depthwise:
        opt.depthMultiplier = spec["dm"]
    oc, b = spec["oc"], spec["batches"]
    wshape = [1, spec["kh"], spec["kw"], oc] if depthwise else [oc, spec["kh"], spec["kw"], spec["ic"]]
    in_shape, out_shape = [b, spec["ih"], spec["iw"], spec["ic"]], [b, spec["oh"], spec["ow"], oc]
    if dtype == "float32":
        ins = [dict(shape=in_shape, dtype="float32"),
               dict(shape=wshape, dtype="float32", data=rng.standard_normal(wshape)),
               dict(shape=[oc], dtype="float32", data=rng.standard_normal(oc)) if spec["bias"] else None]
        return op_model("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", ins,
                        [dict(shape=out_shape, dtype="float32")], opt), in_shape
    si, zpi = _q(rng, -2, 0)
    n_s = oc if spec["per_channel"] else 1
    ws = (10 ** rng.uniform(-3, -1, n_s)).astype(np.float32)
    ins = [dict(shape=in_shape, dtype="int8", q=(si, zpi)),
           dict(shape=wshape, dtype="int8", q=(ws, [0] * n_s), qdim=3 if depthwise else 0,
                data=rng.integers(-127, 128, wshape)),
           dict(shape=[oc], dtype="int32", q=(np.resize(ws, oc) * np.float32(si), [0] * oc),
                data=rng.integers(-20000, 20000, oc)) if spec["bias"] else None]
    out_q = _q(rng, -2, 0.7)
    return op_model("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", ins,
                    [dict(shape=out_shape, dtype="int8", q=out_q)], opt), in_shape


def _check_conv(tmp_path, spec, depthwise):
    rng = np.random.default_rng(spec["seed"])
    m, shape = _conv_model(spec, "int8", depthwise, rng)
    compare_generated(m, [_int8_inputs(rng, shape)], _workdir(tmp_path), f"int8 {spec}")
    m, shape = _conv_model(spec, "float32", depthwise, rng)
    compare_generated(m, [_float_inputs(rng, shape)], _workdir(tmp_path), f"float {spec}")


@CHEAP
@given(spec=conv_specs(False))
def test_conv2d(tmp_path, spec):
    _check_conv(tmp_path, spec, False)


@CHEAP
@given(spec=conv_specs(True))
def test_depthwise_conv2d(tmp_path, spec):
    _check_conv(tmp_path, spec, True)


@pytest.mark.slow
@SLOW
@given(spec=conv_specs(False), depthwise=st.booleans())
def test_conv_fuzz_slow(tmp_path, spec, depthwise):
    if depthwise:
        spec = dict(spec, oc=spec["ic"] * spec["dm"])
    else:
        spec = dict(spec, dm=1)
    _check_conv(tmp_path, spec, depthwise)


def test_conv_refusals(tmp_path):
    opt = S.Conv2DOptionsT()
    opt.padding, opt.strideH, opt.strideW = 1, 1, 1
    grouped = op_model("CONV_2D", [dict(shape=[1, 4, 4, 4], dtype="float32"),
                                   dict(shape=[2, 1, 1, 2], dtype="float32", data=np.ones((2, 1, 1, 2)))],
                       [dict(shape=[1, 4, 4, 2], dtype="float32")], opt)
    (tmp_path / "g.tflite").write_bytes(grouped)
    with pytest.raises(UnsupportedOpError, match=r"op 0 CONV_2D \(float32, float32 \(const\) -> "
                                                 r"float32\).*grouped convolution"):
        cgen.generate(tmp_path / "g.tflite", tmp_path / "g")
    asym = op_model("CONV_2D", [dict(shape=[1, 4, 4, 1], dtype="int8", q=(0.1, 0)),
                                dict(shape=[1, 1, 1, 1], dtype="int8", q=(0.1, 3), data=[[[[1]]]])],
                    [dict(shape=[1, 4, 4, 1], dtype="int8", q=(0.1, 0))], opt)
    (tmp_path / "a.tflite").write_bytes(asym)
    with pytest.raises(UnsupportedOpError, match=r"CONV_2D.*not symmetric"):
        cgen.generate(tmp_path / "a.tflite", tmp_path / "a")


# ----------------------------------------------------------------------------- pooling
@CHEAP
@given(seed=st.integers(0, 2 ** 16), ih=st.integers(1, 12), iw=st.integers(1, 12),
       c=st.integers(1, 6), k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       s=st.tuples(st.integers(1, 3), st.integers(1, 3)), padding=st.sampled_from([0, 1]),
       act=st.sampled_from(ACTS))
def test_pooling(tmp_path, seed, ih, iw, c, k, s, padding, act):
    oh, ow = _out_size(ih, k[0], s[0], 1, padding), _out_size(iw, k[1], s[1], 1, padding)
    if oh < 1 or ow < 1:
        padding, oh, ow = 0, _out_size(ih, k[0], s[0], 1, 0), _out_size(iw, k[1], s[1], 1, 0)
    rng = np.random.default_rng(seed)
    opt = S.Pool2DOptionsT()
    opt.padding, opt.strideH, opt.strideW, opt.filterHeight, opt.filterWidth = padding, *s, *k
    opt.fusedActivationFunction = getattr(S.ActivationFunctionType, act)
    for op in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
        q = _q(rng, -2, 0.5)
        m = op_model(op, [dict(shape=[1, ih, iw, c], dtype="int8", q=q)],
                     [dict(shape=[1, oh, ow, c], dtype="int8", q=q)], opt)
        compare_generated(m, [_int8_inputs(rng, [1, ih, iw, c])], _workdir(tmp_path), f"{op} int8")
        m = op_model(op, [dict(shape=[1, ih, iw, c], dtype="float32")],
                     [dict(shape=[1, oh, ow, c], dtype="float32")], opt)
        x = _float_inputs(rng, [1, ih, iw, c])
        x[2, 0, 0, 0, 0] = np.nan
        compare_generated(m, [x], _workdir(tmp_path), f"{op} float")


def test_average_pool_rounding_ties(tmp_path):
    """2x2 windows whose sums are exact half-integers after division: TFLM rounds half away."""
    opt = S.Pool2DOptionsT()
    opt.padding, opt.strideH, opt.strideW, opt.filterHeight, opt.filterWidth = 1, 2, 2, 2, 2
    m = op_model("AVERAGE_POOL_2D", [dict(shape=[1, 2, 2, 1], dtype="int8", q=(0.1, 0))],
                 [dict(shape=[1, 1, 1, 1], dtype="int8", q=(0.1, 0))], opt)
    rows = np.array([[2, 0, 0, 0], [-2, 0, 0, 0], [6, 0, 0, 0], [-6, 0, 0, 0], [1, 0, 0, 0],
                     [-1, 0, 0, 0], [127, 127, 127, 127], [-128, -128, -128, -128]], np.int8)
    x = np.concatenate([rows, np.random.default_rng(0).integers(-128, 128, (300, 4)).astype(np.int8)])
    r = compare_generated(m, [x.reshape(-1, 1, 2, 2, 1)], tmp_path, "avg ties")
    assert r["got"][0].ravel()[:8].tolist() == [1, -1, 2, -2, 0, 0, 127, -128]   # half away from 0


def test_int8_pool_with_requantization_is_refused(tmp_path):
    opt = S.Pool2DOptionsT()
    opt.padding, opt.strideH, opt.strideW, opt.filterHeight, opt.filterWidth = 1, 1, 1, 1, 1
    m = op_model("MAX_POOL_2D", [dict(shape=[1, 2, 2, 1], dtype="int8", q=(0.1, 0))],
                 [dict(shape=[1, 2, 2, 1], dtype="int8", q=(0.2, 0))], opt)
    (tmp_path / "p.tflite").write_bytes(m)
    with pytest.raises(UnsupportedOpError, match=r"op 0 MAX_POOL_2D \(int8 -> int8\).*rescale"):
        cgen.generate(tmp_path / "p.tflite", tmp_path / "g")


# ----------------------------------------------------------------------------- ADD, MUL
_BROADCASTS = [([1, 4, 4, 3], [1, 4, 4, 3]), ([1, 4, 4, 3], [3]), ([2, 1, 5], [1, 3, 1]),
               ([1, 6], [1, 1]), ([1, 2, 3, 4], [1, 1, 1, 4]), ([3, 1], [1, 5]), ([1, 8], [8])]


@CHEAP
@given(seed=st.integers(0, 2 ** 16), shapes=st.sampled_from(_BROADCASTS),
       op=st.sampled_from(["ADD", "MUL"]), act=st.sampled_from(ACTS), const_b=st.booleans(),
       swap=st.booleans())
def test_add_mul(tmp_path, seed, shapes, op, act, const_b, swap):
    rng = np.random.default_rng(seed)
    sa, sb = shapes[::-1] if swap else shapes
    so = list(np.broadcast_shapes(sa, sb))
    opt = S.AddOptionsT() if op == "ADD" else S.MulOptionsT()
    opt.fusedActivationFunction = getattr(S.ActivationFunctionType, act)
    qa, qb, qo = _q(rng, -2, 0), _q(rng, -2, 0), _q(rng, -1.5, 0.5)
    bdata = rng.integers(-128, 128, sb) if const_b else None
    m = op_model(op, [dict(shape=sa, dtype="int8", q=qa), dict(shape=sb, dtype="int8", q=qb, data=bdata)],
                 [dict(shape=so, dtype="int8", q=qo)], opt)
    xs = [_int8_inputs(rng, sa)] + ([] if const_b else [_int8_inputs(rng, sb)])
    compare_generated(m, xs, _workdir(tmp_path), f"{op} int8 {sa} {sb} {qa} {qb} {qo}")
    bdata = rng.standard_normal(sb) if const_b else None
    m = op_model(op, [dict(shape=sa, dtype="float32"), dict(shape=sb, dtype="float32", data=bdata)],
                 [dict(shape=so, dtype="float32")], opt)
    xs = [_float_inputs(rng, sa)] + ([] if const_b else [_float_inputs(rng, sb)])
    compare_generated(m, xs, _workdir(tmp_path), f"{op} float {sa} {sb}")


def test_add_params_twin_and_refusal(tmp_path):
    (m1, s1), (m2, s2), (mo, so) = add_params_s8(0.5, 0.25, 0.1)
    assert (m1, s1) == (1 << 30, 0) and (m2, s2) == (1 << 30, -1) and so <= 0
    # twice the larger input scale over 2^20 output steps: TFLM's multiplier would be >= 1
    m = op_model("ADD", [dict(shape=[1, 4], dtype="int8", q=(1.0, 0)), dict(shape=[1, 4], dtype="int8", q=(1.0, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(1e-7, 0))], S.AddOptionsT())
    (tmp_path / "a.tflite").write_bytes(m)
    with pytest.raises(UnsupportedOpError, match=r"op 0 ADD \(int8, int8 -> int8\).*output scale"):
        cgen.generate(tmp_path / "a.tflite", tmp_path / "g")


# ---------------------------------------------------------------- CONCATENATION, MEAN, ARG_MAX
@pytest.mark.parametrize("shapes, axis", [([[1, 3], [1, 5]], 1), ([[2, 2, 3], [2, 1, 3], [2, 4, 3]], -2),
                                          ([[1, 2, 2, 3], [1, 2, 2, 1]], 3), ([[2, 3], [1, 3]], 0)])
def test_concatenation(tmp_path, shapes, axis):
    rng = np.random.default_rng(len(shapes) + axis)
    opt = S.ConcatenationOptionsT()
    opt.axis = axis
    so = list(shapes[0])
    ax = axis % len(so)
    so[ax] = sum(s[ax] for s in shapes)
    q = _q(rng)
    for dt in ("int8", "float32"):
        qq = q if dt == "int8" else None
        m = op_model("CONCATENATION", [dict(shape=s, dtype=dt, q=qq) for s in shapes],
                     [dict(shape=so, dtype=dt, q=qq)], opt)
        xs = [_int8_inputs(rng, s) if dt == "int8" else _float_inputs(rng, s) for s in shapes]
        compare_generated(m, xs, _workdir(tmp_path), f"concat {shapes} {axis} {dt}")
    # a constant input
    m = op_model("CONCATENATION", [dict(shape=[1, 3], dtype="float32"),
                                   dict(shape=[1, 2], dtype="float32", data=np.array([[1.5, -2.0]]))],
                 [dict(shape=[1, 5], dtype="float32")], opt if axis == 1 else None)
    if axis == 1:
        r = compare_generated(m, [_float_inputs(rng, [1, 3])], _workdir(tmp_path), "concat const")
        assert (r["got"][0][:, 0, 3:] == np.float32([1.5, -2.0])).all()


def test_int8_concatenation_with_different_scales_is_refused(tmp_path):
    """int8 inputs with the output's quantization only: TFLM's kernel copies bytes without
    rescaling, and the interpreter refuses other quantizations at allocation."""
    opt = S.ConcatenationOptionsT()
    opt.axis = 1
    m = op_model("CONCATENATION", [dict(shape=[1, 2], dtype="int8", q=(0.1, 0)),
                                   dict(shape=[1, 2], dtype="int8", q=(0.2, 0))],
                 [dict(shape=[1, 4], dtype="int8", q=(0.2, 0))], opt)
    from helpers_models import tflm_run_multi
    x = np.array([[10, 20]], np.int8)
    with pytest.raises(RuntimeError):
        tflm_run_multi(m, [[x, x]])
    (tmp_path / "c.tflite").write_bytes(m)
    with pytest.raises(UnsupportedOpError, match=r"op 0 CONCATENATION \(int8, int8 -> int8\).*"
                                                 r"quantization"):
        cgen.generate(tmp_path / "c.tflite", tmp_path / "g")


@pytest.mark.parametrize("shape, axes, keep", [([1, 4, 4, 3], [1, 2], True), ([1, 4, 4, 3], [1, 2], False),
                                               ([2, 5, 3, 2], [2, 1], False), ([1, 7, 6], [-1], True),
                                               ([3, 8], [1], False), ([1, 9, 9, 16], [1, 2], False)])
def test_mean(tmp_path, shape, axes, keep):
    rng = np.random.default_rng(len(shape) * 10 + len(axes) + keep)
    opt = S.ReducerOptionsT()
    opt.keepDims = keep
    ax = sorted({a % len(shape) for a in axes})
    so = ([1 if i in ax else s for i, s in enumerate(shape)] if keep
          else [s for i, s in enumerate(shape) if i not in ax])
    axis = dict(shape=[len(axes)], dtype="int32", data=np.array(axes, np.int32))
    for k in range(3):       # same quantization, then requantizing ones
        qi = _q(rng, -2, 0)
        qo = qi if k == 0 else (_f32(qi[0] * rng.uniform(0.2, 4)), int(rng.integers(-128, 128)))
        m = op_model("MEAN", [dict(shape=shape, dtype="int8", q=qi), axis], [dict(shape=so, dtype="int8", q=qo)], opt)
        compare_generated(m, [_int8_inputs(rng, shape)], _workdir(tmp_path), f"mean int8 {qi} {qo}")
    m = op_model("MEAN", [dict(shape=shape, dtype="float32"), axis], [dict(shape=so, dtype="float32")], opt)
    compare_generated(m, [_float_inputs(rng, shape)], _workdir(tmp_path), "mean float")


def test_mean_non_contiguous_axes_is_refused(tmp_path):
    m = op_model("MEAN", [dict(shape=[2, 3, 4], dtype="float32"),
                          dict(shape=[2], dtype="int32", data=np.array([0, 2], np.int32))],
                 [dict(shape=[3], dtype="float32")], S.ReducerOptionsT())
    (tmp_path / "m.tflite").write_bytes(m)
    with pytest.raises(UnsupportedOpError, match=r"op 0 MEAN \(float32, int32 \(const\) -> float32\)"
                                                 r".*contiguous"):
        cgen.generate(tmp_path / "m.tflite", tmp_path / "g")


@pytest.mark.parametrize("shape, axis", [([1, 6], 1), ([2, 3, 4], 1), ([1, 5], -1), ([4, 3], 0)])
def test_arg_max(tmp_path, shape, axis):
    rng = np.random.default_rng(len(shape) + axis)
    so = [s for i, s in enumerate(shape) if i != axis % len(shape)]
    opt = S.ArgMaxOptionsT()
    opt.outputType = S.TensorType.INT32
    ax = dict(shape=[1], dtype="int32", data=np.array([axis], np.int32))
    m = op_model("ARG_MAX", [dict(shape=shape, dtype="int8", q=(0.1, 0)), ax], [dict(shape=so, dtype="int32")], opt)
    x = rng.integers(-3, 3, (N, *shape)).astype(np.int8)       # many ties: the first wins
    r = compare_generated(m, [x], _workdir(tmp_path), "argmax int8")
    assert r["gm"].outputs[0].dtype == "int32"
    m = op_model("ARG_MAX", [dict(shape=shape, dtype="float32"), ax], [dict(shape=so, dtype="int32")], opt)
    x = np.round(_float_inputs(rng, shape))
    x[3] = np.nan
    compare_generated(m, [x], _workdir(tmp_path), "argmax float")


def test_arg_max_int64_output_is_refused(tmp_path):
    opt = S.ArgMaxOptionsT()
    opt.outputType = S.TensorType.INT64
    m = op_model("ARG_MAX", [dict(shape=[1, 4], dtype="float32"),
                             dict(shape=[1], dtype="int32", data=np.array([1], np.int32))],
                 [dict(shape=[1], dtype="int64")], opt)
    (tmp_path / "a.tflite").write_bytes(m)
    with pytest.raises(UnsupportedOpError, match=r"op 0 ARG_MAX .*int64 output.*int32"):
        cgen.generate(tmp_path / "a.tflite", tmp_path / "g")


# ------------------------------------------------------ CNN policies from the converter
@pytest.mark.parametrize("pool", ["max", "avg", "gap"])
@pytest.mark.parametrize("mode", ["int8", "int8_io", "float"])
def test_cnn_policy_from_converter(tmp_path, pool, mode):
    """16x16x2 -> conv 3x3 s2 -> depthwise 3x3 -> pool -> FC -> softmax, converted by TFLite."""
    rng = np.random.default_rng(hash((pool, mode)) % 1000)
    model = random_cnn(3, pool=pool, depth_multiplier=2 if pool == "avg" else 1)
    tfl = convert(model, mode, rng.standard_normal((64, 16, 16, 2)))
    x = _int8_inputs(rng, [1, 16, 16, 2], 400) if mode == "int8_io" else _float_inputs(rng, [1, 16, 16, 2], 400)
    r = compare_generated(tfl, [x], tmp_path, f"cnn {pool} {mode}")
    ops = r["gm"].ops
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "SOFTMAX"} <= set(ops)
    assert {"max": "MAX_POOL_2D", "avg": "AVERAGE_POOL_2D", "gap": "MEAN"}[pool] in ops
    assert (ops[0] == "QUANTIZE") == (mode == "int8")


def test_cnn_compiles_for_cortex_m4_and_pedantic(tmp_path):
    arm = shutil.which("arm-none-eabi-gcc")
    if arm is None:
        pytest.skip("arm-none-eabi-gcc is not installed")
    rng = np.random.default_rng(0)
    srcs = []
    for mode in ("int8", "float"):
        p = tmp_path / f"{mode}.tflite"
        p.write_bytes(convert(random_cnn(4, pool="gap"), mode, rng.standard_normal((16, 16, 16, 2))))
        srcs.append(cgen.generate(p, tmp_path / mode).c_path)
    for src in srcs:
        for cmd in ([arm, "-mcpu=cortex-m4", "-mthumb", "-std=c99", "-Wall", "-Wextra", "-Werror",
                     "-Os", f"-I{CORE}", "-c", str(src), "-o", str(tmp_path / "x.o")],
                    [gcc(), *CFLAGS, "-pedantic", "-c", str(src), "-o", str(tmp_path / "y.o")]):
            res = subprocess.run(cmd, capture_output=True, text=True)
            assert res.returncode == 0, f"{src}:\n{res.stderr}"
