"""Shared by the golden tests of issue 12's ops (tests/test_policy_ops_golden*.py): hypothesis
settings, inputs, models from the real TFLite converter (tf_model, check_tf) and the refusal
check. Hand-built one-op models come from helpers_models.op_model."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from helpers_models import compare_generated, schema
from quarl_edge.converters import cgen
from quarl_edge.core.tfcompat import configure_converter
from quarl_edge.core.errors import UnsupportedOpError

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

_BROADCASTS = [([1, 4, 3], [1, 4, 3]), ([1, 4, 3], [3]), ([2, 1, 5], [1, 3, 1]), ([1, 6], [1, 1]),
               ([1, 2, 3, 4], [1, 1, 1, 4]), ([3, 1], [1, 5]), ([1, 8], [8])]
