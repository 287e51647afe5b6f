"""n-bit fake quantization (QuaRL's 2..8-bit sweep): levels really restricted, TF's arithmetic."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from quarl_edge.core.errors import QuarlError  # noqa: E402
from quarl_edge.core.resources import examples_dir  # noqa: E402
from quarl_edge.quant.nbit import fake_quant, fake_quant_forward, fake_quant_weights, nbit_sweep
from quarl_edge.core.nets import mlp_layers  # noqa: E402
from quarl_edge.core.run import load_keras  # noqa: E402

EXAMPLE = examples_dir() / "cartpole_dqn"


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 7, 8])
def test_fake_quant_equals_tensorflow(bits):
    import tensorflow as tf
    rng = np.random.default_rng(bits)
    x = rng.normal(scale=3.0, size=2000).astype(np.float32)
    for lo, hi in ((-2.5, 4.0), (0.3, 5.0), (-7.0, -1.0), (-1.0, 1.0)):
        ours = fake_quant(x, bits, lo, hi)
        tf_out = tf.quantization.fake_quant_with_min_max_vars(
            x, lo, hi, num_bits=bits, narrow_range=False).numpy()
        np.testing.assert_allclose(ours, tf_out, atol=1e-5 * max(abs(lo), abs(hi)))
        assert len(np.unique(ours)) <= 2 ** bits
        assert fake_quant(np.zeros(1), bits, lo, hi)[0] == 0.0  # zero is exact


def test_weight_levels_per_tensor_and_per_channel():
    w = load_keras_example_kernels()[1]  # 64 x 64
    for bits in range(2, 9):
        q = fake_quant_weights(w, bits)
        assert len(np.unique(q)) <= 2 ** bits
        qc = fake_quant_weights(w, bits, per_channel=True)
        assert max(len(np.unique(qc[:, j])) for j in range(qc.shape[1])) <= 2 ** bits
        assert len(np.unique(qc)) > 2 ** bits  # each channel has its own grid
    q2 = fake_quant_weights(w, 2)
    assert 2 <= len(np.unique(q2)) <= 4
    # more bits, smaller error
    errs = [np.abs(fake_quant_weights(w, b) - w).max() for b in range(2, 9)]
    assert all(a > b for a, b in zip(errs, errs[1:]))


def load_keras_example_kernels():
    return [k for k, _, _ in mlp_layers(load_keras(EXAMPLE))]


def test_fake_quant_forward_restricts_activations():
    layers = mlp_layers(load_keras(EXAMPLE))
    calib = np.load(EXAMPLE / "calibration.npy")
    f = fake_quant_forward(layers, calib, 3, 3)
    assert all(len(np.unique(k)) <= 8 for k, _, _ in f.layers)
    out = f(calib)
    assert out.shape == (len(calib), 2) and len(np.unique(out)) <= 8
    exact = fake_quant_forward(layers, calib, None, None)(calib)
    from quarl_edge.core.nets import mlp_forward
    np.testing.assert_allclose(exact, mlp_forward(layers, calib), rtol=1e-6)
    f8 = fake_quant_forward(layers, calib, 8, 8)(calib)
    assert np.abs(f8 - exact).max() < np.abs(out - exact).max()
    with pytest.raises(QuarlError, match="bits"):
        fake_quant(calib, 1, -1, 1)


def test_nbit_sweep_on_the_example_run(tmp_path):
    from helpers_models import copy_example_run
    rows = nbit_sweep(copy_example_run(tmp_path), bits=(2, 8), seeds=range(3), calib_size=200)
    assert [(r["mode"], r["bits"]) for r in rows] == [
        ("fp32", 32), ("weights+activations", 2), ("weights+activations", 8),
        ("weights", 2), ("weights", 8)]
    assert rows[0]["mean_return"] == 500.0
    two = [r for r in rows if r["bits"] == 2]
    assert all(r["mean_return"] < 100 for r in two)  # 2 bits: the policy collapses
    assert all(0.0 <= r["agreement"] <= 1.0 for r in rows)
    with pytest.raises(QuarlError, match="unknown sweep mode"):
        nbit_sweep(tmp_path, bits=(8,), seeds=range(1), calib_size=50, modes=("bias",))
