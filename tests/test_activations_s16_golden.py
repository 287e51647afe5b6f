"""TANH and LOGISTIC int16 -> int16 (the int16x8 scheme's activations: TD3 / DDPG / SAC actors'
tanh heads): generated C against the tflite-micro interpreter bit for bit. Every int16 input at
power-of-two input scales (TFLM's "POT" branch: TANH at left shifts 0 and 1, LOGISTIC at 0) and
at other scales (the multiplier branch, shifts up to 30), and whole int16x8 MLPs from the real
converter with tanh and sigmoid layers over calibration ranges drawn by hypothesis."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers_models import compare_generated, convert, random_mlp, unary_model
from quarl_edge.converters import qmath

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int16).reshape(-1, 1, 512)   # 128 records


@pytest.mark.parametrize("op", ["TANH", "LOGISTIC"])
@pytest.mark.parametrize("scale", [2.0 ** -12, 2.0 ** -11, 2.0 ** -10, 1 / 3000, 0.0173, 1.3e-6,
                                   2.0 ** -15])
def test_every_int16_input_is_tflms(tmp_path, op, scale):
    m, s = qmath.tanh_logistic_s16_params(op, scale)
    assert 0 < m <= 32767 * 3 and 0 <= s <= 31, (m, s)
    model = unary_model(op, [1, 512], "int16", (scale, 0), (2.0 ** -15, 0))
    compare_generated(model, [ALL_INT16], tmp_path / "gen", f"{op} int16 scale {scale:g}")


def test_the_pot_branches_are_the_ones_tflm_takes():
    # TANH: POT when 12 + log2(scale) is 0 or 1 (multiplier 3 << shift); LOGISTIC only at 0
    assert qmath.tanh_logistic_s16_params("TANH", 2.0 ** -12) == (3, 0)
    assert qmath.tanh_logistic_s16_params("TANH", 2.0 ** -11) == (6, 0)
    assert qmath.tanh_logistic_s16_params("LOGISTIC", 2.0 ** -12) == (3, 0)
    assert qmath.tanh_logistic_s16_params("LOGISTIC", 2.0 ** -11) != (6, 0)
    m, s = qmath.tanh_logistic_s16_params("TANH", 2.0 ** -10)     # not POT for the kernel
    assert (m, s) != (12, 0) and 16383.5 < m <= 32767


@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 16), n_in=st.integers(1, 6), width=st.integers(2, 24),
       spread=st.floats(0.05, 30.0), head=st.sampled_from(["tanh", "sigmoid"]))
def test_int16x8_mlps_with_tanh_and_sigmoid_are_bit_exact(tmp_path, seed, n_in, width, spread, head):
    # (a relu layer can be dead on the calibration data: a zero range the converter cannot scale)
    model = random_mlp(seed, n_in, [width, 3], ["tanh", head], weight_scale=2.0)
    rng = np.random.default_rng(seed)
    calib = (rng.standard_normal((64, n_in)) * spread).astype(np.float32)
    data = convert(model, "int16x8", calib)
    x = (rng.standard_normal((40, 1, n_in)) * spread * 1.5).astype(np.float32)   # some clip
    compare_generated(data, [x], tmp_path / "gen", f"int16x8 mlp {head}")
