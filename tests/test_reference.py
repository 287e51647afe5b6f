"""The host references: TF Lite Micro's interpreter is given the arena a model needs, so that
'TF Lite Micro cannot load' is never said of a model it can run. (How tflite-runtime's
reference kernels differ from TF Lite Micro's: tests/test_qmath.py.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers_models import convert
from quarl_edge.core.errors import ModelError
from quarl_edge.measure.reference import TFLMReference, tflm_interpreter

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_conv(tmp_path_factory):
    """4 kB of int8 DEPTHWISE_CONV_2D (depth multiplier 16) + MAX_POOL_2D over 32x32x4: 68 kB
    of activations, more than the 10x-the-file arena tflite-micro's interpreter defaults to,
    with input and output that fit the host board's 4 kB frames."""
    import tensorflow as tf
    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((32, 32, 4))
    x = tf.keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=16,
                                        activation="relu")(inp)
    x = tf.keras.layers.MaxPool2D(4)(x)
    path = tmp_path_factory.mktemp("small_conv") / "small_conv.tflite"
    path.write_bytes(convert(tf.keras.Model(inp, x), "int8_io"))
    return path


def test_the_default_arena_is_too_small_for_it(small_conv):
    """The case is real: tflite-micro's own default refuses this model."""
    from tflite_micro.python.tflite_micro import runtime
    data = small_conv.read_bytes()
    assert len(data) <= 4096
    with pytest.raises(RuntimeError, match="allocate"):
        runtime.Interpreter.from_bytes(data)


def test_the_reference_grows_its_arena_until_the_model_loads(small_conv, capfd):
    ref = TFLMReference(small_conv)
    x = np.random.default_rng(0).integers(-128, 128, (1, 32, 32, 4)).astype(np.int8)
    (y,) = ref.run([x])
    assert y.shape == (1, 8, 8, 64) and y.dtype == np.int8 and np.any(y != y.flat[0])
    assert "Failed to resize buffer" not in capfd.readouterr().err   # the attempts stay quiet


def test_the_board_is_bit_exact_with_it(small_conv, tmp_path):
    from quarl_edge.measure.validate import validate
    from quarl_edge.targets.boards import get_board
    res = validate(small_conv, get_board("host"), tmp_path / "build", random_n=5)
    assert res["bit_exact"] and res["n"] == 5


def test_a_model_tflm_refuses_is_still_named(tmp_path):
    with pytest.raises(ModelError, match="TF Lite Micro cannot load bad.tflite"):
        tflm_interpreter(b"\x1c\x00\x00\x00TFL3" + bytes(64), "bad.tflite")


def test_tflite_runtime_kernels_are_named():
    from quarl_edge.measure.reference import tflite_runtime_interpreter
    with pytest.raises(ValueError, match="optimized"):
        tflite_runtime_interpreter(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite",
                                   kernels="fast")
