"""TRANSPOSE_CONV (issue 26): float32, int8 and int16x8 models from the real TFLite converter
(tf.keras.layers.Conv2DTranspose), generated C against the tflite-micro interpreter bit for bit,
with hypothesis over shapes, filters, strides, padding, bias, the fused activation and the
calibration range; hand-built flatbuffers for what the converter does not write (no bias, the
output shape as a graph input) and refusals by name."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers_models import compare_generated, convert, op_model
from quarl_edge.converters import cgen
from quarl_edge.converters.tflite_model import load
from quarl_edge.core.errors import ModelError, UnsupportedOpError

SOME = settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def tconv_model(seed, shape, filters, kernel, stride, padding, use_bias, activation):
    import tensorflow as tf
    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(seed)
    inp = tf.keras.Input(shape, batch_size=1)        # a static batch: a constant output shape
    x = tf.keras.layers.Conv2DTranspose(filters, kernel, strides=stride, padding=padding,
                                        use_bias=use_bias, activation=activation,
                                        bias_initializer="random_normal")(inp)
    return tf.keras.Model(inp, x)


def _ops(model_bytes, tmp_path):
    p = tmp_path / "m.tflite"
    p.write_bytes(model_bytes)
    m = load(p)
    return [(op.opcode, m.tensors[op.inputs[2 if op.opcode == "TRANSPOSE_CONV" else 0]].dtype)
            for op in m.operators]


GEOMETRY = dict(seed=st.integers(0, 2 ** 16), h=st.integers(1, 6), w=st.integers(1, 6),
                c=st.integers(1, 4), filters=st.integers(1, 6),
                kernel=st.sampled_from([1, 2, 3, (2, 3)]),
                stride=st.sampled_from([1, 2, (1, 2), 3]),
                padding=st.sampled_from(["same", "valid"]), use_bias=st.booleans(),
                activation=st.sampled_from([None, "relu"]))


def _case(tmp_path, mode, dtype, seed, h, w, c, filters, kernel, stride, padding, use_bias,
          activation, spread=1.0):
    model = tconv_model(seed, (h, w, c), filters, kernel, stride, padding, use_bias, activation)
    rng = np.random.default_rng(seed)
    calib = (rng.standard_normal((32, h, w, c)) * spread).astype(np.float32)
    data = convert(model, mode, calib)
    ops = _ops(data, tmp_path)
    assert ("TRANSPOSE_CONV", dtype) in ops, ops
    m = load(tmp_path / "m.tflite")
    tc = next(op for op in m.operators if op.opcode == "TRANSPOSE_CONV")
    assert (len(tc.inputs) == 4 and tc.inputs[3] >= 0) == use_bias     # (a nonzero bias)
    x = (rng.standard_normal((16, 1, h, w, c)) * spread * 1.5).astype(np.float32)  # some clip
    compare_generated(data, [x], tmp_path / "gen", f"transpose conv {mode}")


@SOME
@given(**GEOMETRY)
def test_float32_is_bit_exact_with_tflm(tmp_path, seed, h, w, c, filters, kernel, stride,
                                        padding, use_bias, activation):
    _case(tmp_path, "float", "float32", seed, h, w, c, filters, kernel, stride, padding,
          use_bias, activation)


@SOME
@given(**GEOMETRY, spread=st.floats(0.1, 20.0))
def test_int8_is_bit_exact_with_tflm(tmp_path, seed, h, w, c, filters, kernel, stride, padding,
                                     use_bias, activation, spread):
    _case(tmp_path, "int8", "int8", seed, h, w, c, filters, kernel, stride, padding, use_bias,
          activation, spread)


@SOME
@given(**GEOMETRY, spread=st.floats(0.1, 20.0))
def test_int16x8_is_bit_exact_with_tflm(tmp_path, seed, h, w, c, filters, kernel, stride,
                                        padding, use_bias, activation, spread):
    # (the converter keeps a RELU apart, and int16 RELU is not ours: fused ones are hand-built)
    _case(tmp_path, "int16x8", "int16", seed, h, w, c, filters, kernel, stride, padding,
          use_bias, None, spread)


def _hand_model(dtype, out_shape, shape_input=False, bias=True, shape_data=None, w_q=None,
                bias_dtype=None, padding=0, strides=(2, 2), in_shape=(1, 3, 3, 2), act=0, k=2):
    """A hand-built TRANSPOSE_CONV: output shape constant (or a graph input), k x k filter."""
    from helpers_models import schema
    rng = np.random.default_rng(7)
    oc, ic = out_shape[3], in_shape[3]
    q_in = dict(float32=None, int8=(0.05, 3), int16=(0.002, 0))[dtype]
    q_out = dict(float32=None, int8=(0.1, -5), int16=(0.01, 0))[dtype]
    if dtype == "float32":
        w = dict(shape=[oc, k, k, ic], dtype="float32", data=rng.standard_normal((oc, k, k, ic)))
        b = dict(shape=[oc], dtype="float32", data=rng.standard_normal(oc))
    else:
        w = dict(shape=[oc, k, k, ic], dtype="int8", q=w_q or ([0.02] * oc, [0] * oc),
                 data=rng.integers(-127, 128, (oc, k, k, ic)))
        bd = bias_dtype or ("int32" if dtype == "int8" else "int64")
        b = dict(shape=[oc], dtype=bd, q=([1e-4] * oc, [0] * oc),
                 data=rng.integers(-3000, 3000, oc))
    shape = dict(shape=[4], dtype="int32",
                 data=None if shape_input else np.array(shape_data or out_shape))
    s = schema()
    opts = s.TransposeConvOptionsT()
    opts.padding, opts.strideH, opts.strideW = padding, *strides
    opts.fusedActivationFunction = act
    return op_model("TRANSPOSE_CONV",
                    [shape, w, dict(shape=list(in_shape), dtype=dtype, q=q_in)]
                    + ([b] if bias else []),
                    [dict(shape=list(out_shape), dtype=dtype, q=q_out)], options=opts)


@pytest.mark.parametrize("dtype", ["float32", "int8", "int16"])
def test_no_bias_and_the_output_shape_as_a_graph_input(tmp_path, dtype):
    """Without a bias, and with the output shape a graph input (as in tflite-micro's seanet
    models): TFLM never reads its values, nor do we; SAME padding of a 6x6 output (stride 2,
    2x2 filter: no padding) and of a 5x5 one (the odd pixel cut at the end)."""
    rng = np.random.default_rng(1)
    for k, (out_hw, shape_input) in enumerate([(6, True), (5, False), (5, True)]):
        data = _hand_model(dtype, [1, out_hw, out_hw, 3], shape_input=shape_input, bias=k != 1)
        if dtype == "float32":
            x = rng.standard_normal((8, 1, 3, 3, 2)).astype(np.float32)
        else:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max + 1, (8, 1, 3, 3, 2)).astype(dtype)
        inputs = [x]
        if shape_input:     # any values: neither TFLM nor the generated C reads them
            inputs = [np.tile(np.array([1, out_hw, out_hw, 3], np.int32), (8, 1)), x]
        compare_generated(data, inputs, tmp_path / f"gen{k}", f"{dtype} case {k}")


@pytest.mark.parametrize("dtype", ["float32", "int8", "int16"])
def test_fused_activations_and_padding(tmp_path, dtype):
    """Fused RELU, RELU_N1_TO_1 and RELU6 (which the converter does not write for
    TRANSPOSE_CONV; TFLM's kernel applies them), VALID padding, strides 1x2 and 2x1, and SAME
    padding of one pixel before (3x3 filter, stride 1; 3x3 filter, stride 2, a 5x6 output)."""
    rng = np.random.default_rng(2)
    cases = [(1, [1, 6, 6, 4], (2, 2), 1, 2), (2, [1, 4, 7, 4], (1, 2), 1, 2),
             (3, [1, 7, 4, 4], (2, 1), 1, 2), (1, [1, 6, 6, 4], (2, 2), 0, 2),
             (0, [1, 3, 3, 4], (1, 1), 0, 3), (0, [1, 5, 6, 4], (2, 2), 0, 3)]
    for k, (act, out_shape, strides, padding, size) in enumerate(cases):
        data = _hand_model(dtype, out_shape, strides=strides, padding=padding, act=act, k=size)
        if dtype == "float32":
            x = (rng.standard_normal((8, 1, 3, 3, 2)) * 2).astype(np.float32)
        else:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max + 1, (8, 1, 3, 3, 2)).astype(dtype)
        compare_generated(data, [x], tmp_path / f"gen{k}", f"{dtype} case {k}")


def _generate(tmp_path, data):
    p = tmp_path / "m.tflite"
    p.write_bytes(data)
    return cgen.generate(p, tmp_path / "gen", name="m")


def test_refusals_by_name(tmp_path):
    with pytest.raises(UnsupportedOpError, match=r"int16x8 TRANSPOSE_CONV with int32 bias"):
        _generate(tmp_path, _hand_model("int16", [1, 6, 6, 3], bias_dtype="int32"))
    with pytest.raises(UnsupportedOpError, match=r"int16x8 TRANSPOSE_CONV with int16 bias"):
        _generate(tmp_path, _hand_model("int16", [1, 6, 6, 3], bias_dtype="int16"))
    with pytest.raises(UnsupportedOpError, match=r"int8 TRANSPOSE_CONV with int64 bias"):
        _generate(tmp_path, _hand_model("int8", [1, 6, 6, 3], bias_dtype="int64"))
    with pytest.raises(UnsupportedOpError, match=r"filter 'in1' is not symmetric"):
        _generate(tmp_path, _hand_model("int8", [1, 6, 6, 3], w_q=([0.02] * 3, [1] * 3)))
    with pytest.raises(ModelError, match=r"output shape operand \[1, 7, 6, 3\], but the output "
                                         r"tensor is \[1, 6, 6, 3\]"):
        _generate(tmp_path, _hand_model("float32", [1, 6, 6, 3], shape_data=[1, 7, 6, 3]))
