"""Quantization of a trained run: real converter, real tflite-runtime, the shipped example run."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers_models import copy_example_run  # noqa: E402
from quarl_edge.rl.tf_env import make_env, run_episode  # noqa: E402
from quarl_edge.core.errors import QuarlError  # noqa: E402
from quarl_edge.core.resources import examples_dir  # noqa: E402
from quarl_edge.measure.reference import model_ops, model_tensors, tflite_runner
from quarl_edge.quant.calibration import collect_calibration
from quarl_edge.quant.schemes import SCHEMES, quantize
from quarl_edge.core.run import load_keras  # noqa: E402

EXAMPLE = examples_dir() / "cartpole_dqn"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A copy of the shipped example run's trained network (never writes into examples/)."""
    return copy_example_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def models(run_dir):
    return {s: quantize(run_dir, s, calib_size=500)
            for s in ("fp32", "fp16", "int8")}


@pytest.fixture(scope="module")
def probe(run_dir, models):
    return np.load(run_dir / "calibration.npy")[:200]


def test_every_scheme_writes_a_model_that_tflite_runtime_runs(run_dir, models, probe):
    model = load_keras(run_dir)
    q = model(probe).numpy()
    tol = {"fp32": 1e-4, "fp16": 2e-2, "int8": 6e-2}  # relative to the Q-value range
    scale = float(np.abs(q).max())
    for scheme, path in models.items():
        assert path == run_dir / "models" / f"{scheme}.tflite" and path.stat().st_size > 1000
        run = tflite_runner(path)
        out = np.stack([run(x) for x in probe])
        assert out.shape == q.shape and out.dtype == np.float32
        err = np.abs(out - q).max() / scale
        assert err < tol[scheme], (scheme, err)
    sizes = {s: p.stat().st_size for s, p in models.items()}
    assert sizes["int8"] < sizes["fp16"] < sizes["fp32"]


def test_int8_is_full_integer_with_float_io(models):
    path = models["int8"]
    ops = model_ops(path)
    assert ops[0] == "QUANTIZE" and ops[-1] == "DEQUANTIZE"
    assert set(ops) == {"QUANTIZE", "FULLY_CONNECTED", "DEQUANTIZE"}
    assert ops.count("FULLY_CONNECTED") == 3

    run = tflite_runner(path)
    assert run.input_details["dtype"] == np.float32 and run.output_details["dtype"] == np.float32
    tensors = model_tensors(path)
    io = {run.input_details["index"], run.output_details["index"]}
    inner = [t for t in tensors if t["index"] not in io]
    weights = [t for t in inner if len(t["shape"]) == 2 and t["shape"][0] != 1]
    biases = [t for t in inner if len(t["shape"]) == 1]
    acts = [t for t in inner if len(t["shape"]) == 2 and t["shape"][0] == 1]
    assert len(weights) == 3 and len(biases) == 3
    for t in weights:  # per-tensor symmetric int8 weights
        qp = t["quantization_parameters"]
        assert t["dtype"] == np.int8 and len(qp["scales"]) == 1 and qp["zero_points"][0] == 0
    assert all(t["dtype"] == np.int32 for t in biases)
    assert acts and all(t["dtype"] == np.int8 for t in acts)


def test_fp16_weights_are_float16_and_fp32_has_no_quantization(models):
    fp16 = model_tensors(models["fp16"])
    half = [t for t in fp16 if t["dtype"] == np.float16]
    assert len(half) == 6  # 3 kernels + 3 biases, dequantized to float32 at load
    assert set(model_ops(models["fp16"])) == {"DEQUANTIZE", "FULLY_CONNECTED"}
    assert model_ops(models["fp32"]) == ["FULLY_CONNECTED"] * 3
    assert all(t["dtype"] == np.float32 for t in model_tensors(models["fp32"]))


def test_calibration_comes_from_policy_rollouts(run_dir, models):
    calib = np.load(run_dir / "calibration.npy")
    assert calib.shape == (500, 4) and calib.dtype == np.float32
    # states of a balancing policy: inside CartPole's termination bounds, not random noise
    assert np.all(np.abs(calib[:, 0]) <= 2.4 + 0.2) and np.all(np.abs(calib[:, 2]) <= 0.21 + 0.05)
    again = collect_calibration(run_dir, size=500, seed=0)
    np.testing.assert_array_equal(calib, again)  # seeded: reproducible
    other = collect_calibration(run_dir, size=500, seed=1)
    assert not np.array_equal(calib, other)
    longer = collect_calibration(run_dir, size=50, episodes=1, seed=0)
    assert longer.shape == (50, 4)


def test_unknown_scheme_and_missing_model(run_dir, tmp_path):
    with pytest.raises(QuarlError, match="int3.*known: fp32, fp16, int8"):
        quantize(run_dir, "int3")
    with pytest.raises(QuarlError, match="no trained model"):
        quantize(tmp_path, "fp32")
    with pytest.raises(QuarlError, match="no model"):
        tflite_runner(tmp_path / "missing.tflite")
    assert list(SCHEMES)[:3] == ["fp32", "fp16", "int8"]


def test_shipped_example_models_balance_the_pole():
    """The committed example models run in tflite-runtime and keep the pole up (test seeds)."""
    env = make_env("CartPole-v1")
    for scheme in ("fp32", "int8"):
        path = EXAMPLE / "models" / f"{scheme}.tflite"
        run = tflite_runner(path)
        returns = [run_episode(env, lambda o: int(np.argmax(run(o))), seed)[0] for seed in (0, 1)]
        assert np.mean(returns) >= 400, (scheme, returns)
    size = sum(p.stat().st_size for p in EXAMPLE.rglob("*") if p.is_file())
    assert size < 2_000_000
