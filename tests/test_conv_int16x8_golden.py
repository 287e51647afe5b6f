"""CONV_2D int16x8 (issue 12): int16 activations, int8 filters, int64 bias, from the real
TFLite converter's 16x8 mode, generated C against the tflite-micro interpreter bit for bit,
with hypothesis over shapes, strides, padding, dilation and the calibration range."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from helpers_models import compare_generated, convert
from quarl_edge.converters.tflite_model import load

SOME = settings(max_examples=5, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def conv_stack(seed, shape, filters, kernel, stride, padding, dilation, pointwise):
    import tensorflow as tf
    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(seed)
    inp = tf.keras.Input(shape)
    x = tf.keras.layers.Conv2D(filters, kernel, strides=stride, padding=padding,
                               dilation_rate=dilation if stride == 1 else 1,
                               activation="relu")(inp)
    if pointwise:
        x = tf.keras.layers.Conv2D(pointwise, 1, activation="relu6")(x)
    x = tf.keras.layers.Conv2D(3, 1, use_bias=False)(x)            # no bias, no activation
    return tf.keras.Model(inp, tf.keras.layers.Flatten()(x))


def _ops(model_bytes, tmp_path):
    p = tmp_path / "m.tflite"
    p.write_bytes(model_bytes)
    m = load(p)
    return [(op.opcode, m.tensors[op.inputs[0]].dtype) for op in m.operators]


@SOME
@given(seed=st.integers(0, 2 ** 16), h=st.integers(3, 9), w=st.integers(3, 9),
       c=st.integers(1, 4), filters=st.integers(1, 8), kernel=st.sampled_from([1, 2, 3]),
       stride=st.sampled_from([1, 2]), padding=st.sampled_from(["same", "valid"]),
       dilation=st.sampled_from([1, 2]), pointwise=st.sampled_from([0, 5]),
       spread=st.floats(0.1, 20.0))
def test_conv_int16x8_is_bit_exact_with_tflm(tmp_path, seed, h, w, c, filters, kernel, stride,
                                             padding, dilation, pointwise, spread):
    if padding == "valid" and (h - dilation * (kernel - 1) < 1 or w - dilation * (kernel - 1) < 1):
        return
    model = conv_stack(seed, (h, w, c), filters, kernel, stride, padding, dilation, pointwise)
    rng = np.random.default_rng(seed)
    calib = (rng.standard_normal((48, h, w, c)) * spread).astype(np.float32)
    data = convert(model, "int16x8", calib)
    ops = _ops(data, tmp_path)
    assert ("CONV_2D", "int16") in ops, ops
    # a dilated convolution the converter writes as SPACE_TO_BATCH_ND, CONV_2D,
    # BATCH_TO_SPACE_ND and ADD (not ours to run in int16); one it keeps is tested
    assume("SPACE_TO_BATCH_ND" not in {name for name, _ in ops})
    x = (rng.standard_normal((24, 1, h, w, c)) * spread * 1.5).astype(np.float32)  # some clip
    compare_generated(data, [x], tmp_path / "gen", "conv int16x8")


def test_an_int32_bias_is_refused_by_name(tmp_path):
    """(The converter's 16x8 mode gives int64 biases; a hand-made int32 one is named.)"""
    from helpers_models import op_model
    from quarl_edge.converters import cgen
    from quarl_edge.core.errors import UnsupportedOpError
    model = op_model("CONV_2D", [
        dict(shape=[1, 4, 4, 1], dtype="int16", q=(0.01, 0)),
        dict(shape=[2, 3, 3, 1], dtype="int8", q=(0.02, 0), data=np.ones((2, 3, 3, 1))),
        dict(shape=[2], dtype="int32", q=(0.0002, 0), data=np.zeros(2))],
        [dict(shape=[1, 4, 4, 2], dtype="int16", q=(0.05, 0))])
    p = tmp_path / "m.tflite"
    p.write_bytes(model)
    with pytest.raises(UnsupportedOpError, match=r"int16x8 CONV_2D with int32 bias"):
        cgen.generate(p, tmp_path / "gen", name="m")
