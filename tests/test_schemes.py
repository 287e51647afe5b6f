"""The schemes beyond fp32/fp16/int8: dyn-int8, int16x8 and qat-int8 (QAT in the DQN loop).

Each is a real .tflite from the real converter, loaded and run in tflite-runtime, with the
dtypes and op set its description claims. Uses a copy of the shipped example run."""
from __future__ import annotations

import json
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers_models import copy_example_run  # noqa: E402
from quarl_edge.core.errors import QuarlError  # noqa: E402
from quarl_edge.rl.qat import NStepReplay, qat_model  # noqa: E402
from quarl_edge.measure.reference import model_ops, model_tensors, tflite_runner  # noqa: E402
from quarl_edge.quant.schemes import SCHEMES, quantize  # noqa: E402
from quarl_edge.core.run import load_keras  # noqa: E402

QAT_FAST = {"steps": 512, "train_every": 256, "updates_per_train": 32, "eval_every": 512,
            "eval_episodes": 2}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return copy_example_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def models(run_dir):
    return {s: quantize(run_dir, s, calib_size=300, qat=QAT_FAST)
            for s in ("dyn-int8", "int16x8", "qat-int8")}


@pytest.fixture(scope="module")
def probe(run_dir, models):
    return np.load(run_dir / "calibration.npy")[:200]


def _split(path):
    """(io, weights, biases, activations) tensor details of a 3-layer MLP model."""
    run = tflite_runner(path)
    io = {run.input_details["index"], run.output_details["index"]}
    inner = [t for t in model_tensors(path) if t["index"] not in io]
    weights = [t for t in inner if len(t["shape"]) == 2 and t["shape"][0] != 1]
    biases = [t for t in inner if len(t["shape"]) == 1 and t["shape"][0] > 1]
    acts = [t for t in inner if len(t["shape"]) == 2 and t["shape"][0] == 1]
    return run, weights, biases, acts


def _rel_err(path, model, probe):
    run = tflite_runner(path)
    out = np.stack([run(x) for x in probe])
    q = model(probe).numpy()
    assert out.shape == q.shape and out.dtype == np.float32
    return float(np.abs(out - q).max() / np.abs(q).max())


def test_scheme_registry():
    assert list(SCHEMES) == ["fp32", "fp16", "int8", "dyn-int8", "int16x8", "int8x4", "qat-int8",
                            "qat-int8x4", "qat-distill-int8", "qat-distill-int8x4",
                            "int8-centred", "int8-acc", "int8-centred-acc"]


def test_dyn_int8_is_hybrid_int8_weights_float_activations(run_dir, models, probe):
    path = models["dyn-int8"]
    assert model_ops(path) == ["FULLY_CONNECTED"] * 3  # no QUANTIZE/DEQUANTIZE: hybrid kernels
    run, weights, biases, _ = _split(path)
    assert run.input_details["dtype"] == np.float32 and run.output_details["dtype"] == np.float32
    # the converter quantizes weight tensors of >= 1024 elements (the 64x64 one); small stay float
    big = [t for t in weights if np.prod(t["shape"]) >= 1024]
    assert big and all(t["dtype"] == np.int8 for t in big)
    assert all(t["dtype"] == np.float32 for t in biases if "BiasAdd" in t["name"])
    assert _rel_err(path, load_keras(run_dir), probe) < 2e-2
    assert path.stat().st_size < (run_dir / "qnet.keras").stat().st_size


def test_int16x8_has_int16_activations_int8_weights_int64_biases(run_dir, models, probe):
    path = models["int16x8"]
    ops = model_ops(path)
    assert ops == ["QUANTIZE"] + ["FULLY_CONNECTED"] * 3 + ["DEQUANTIZE"]
    run, weights, biases, acts = _split(path)
    assert run.input_details["dtype"] == np.float32 and run.output_details["dtype"] == np.float32
    assert len(weights) == 3 and all(t["dtype"] == np.int8 for t in weights)
    assert len(biases) == 3 and all(t["dtype"] == np.int64 for t in biases)
    assert acts and all(t["dtype"] == np.int16 for t in acts)
    for t in acts:  # symmetric int16 activations
        assert t["quantization_parameters"]["zero_points"][0] == 0
    assert _rel_err(path, load_keras(run_dir), probe) < 3e-2  # int8 weights dominate


def test_qat_int8_is_full_integer_with_float_io(run_dir, models):
    path = models["qat-int8"]
    ops = model_ops(path)
    assert ops[0] == "QUANTIZE" and ops[-1] == "DEQUANTIZE" and ops.count("FULLY_CONNECTED") == 3
    assert set(ops) == {"QUANTIZE", "FULLY_CONNECTED", "DEQUANTIZE"}
    run, weights, biases, acts = _split(path)
    assert run.input_details["dtype"] == np.float32 and run.output_details["dtype"] == np.float32
    assert len(weights) == 3 and all(t["dtype"] == np.int8 for t in weights)
    assert all(t["quantization_parameters"]["zero_points"][0] == 0 for t in weights)
    assert len(biases) == 3 and all(t["dtype"] == np.int32 for t in biases)
    assert acts and all(t["dtype"] == np.int8 for t in acts)
    # the output range covers the Q-values (~20..100), not tfmot's default [-6, 6]
    out = run.output_details
    q_act = [t for t in acts if t["shape"][1] == 2][0]["quantization_parameters"]
    assert out["dtype"] == np.float32 and q_act["scales"][0] * 255 > 60


def test_qat_fine_tuning_ran_in_the_rl_loop_and_keeps_the_policy(run_dir, models, probe):
    log = json.loads((run_dir / "qat.json").read_text())
    assert log["config"]["steps"] == 512 and log["gradient_steps"] == 2 * 32
    assert log["n_step"] == 3 and log["double"] is True  # the run's own DQN settings
    assert [c["step"] for c in log["curve"]] == [0, 512]
    assert log["curve"][1]["loss"] is not None and log["best_validation_return"] >= 400
    # the converted model still plays CartPole like the float network (real tflite-runtime)
    run = tflite_runner(models["qat-int8"])
    from quarl_edge.rl.tf_env import make_env, run_episode
    env = make_env("CartPole-v1")
    assert run_episode(env, lambda o: int(np.argmax(run(o))), seed=0)[0] >= 400
    assert _rel_err(models["qat-int8"], load_keras(run_dir), probe) < 0.1


def test_qat_model_starts_from_the_trained_weights_with_calibrated_ranges(run_dir, probe):
    model = load_keras(run_dir)
    q = qat_model(model, probe)
    fake = q(probe, training=False).numpy()
    ref = model(probe).numpy()
    assert ref.max() > 20  # DQN Q-values far outside [-6, 6]
    err = np.abs(fake - ref) / np.abs(ref).max()
    assert err.max() < 6e-2 and np.median(err) < 1e-2  # like post-training int8 (test_quantize)
    # a second QAT model in the same process (its input layer is quantize_layer_1) too
    again = qat_model(model, probe)(probe, training=False).numpy()
    np.testing.assert_allclose(again, fake, atol=1e-4)
    # the original Keras model is untouched (a copy was quantized)
    assert all(not v.name.startswith("quant") for v in model.variables)


def test_n_step_returns_stop_at_terminal_and_bootstrap_at_truncation():
    buf = NStepReplay(10, (1,), n_step=3, gamma=0.5)
    # episode A: 3 steps, terminated; episode B: 2 steps, truncated; then 1 open step
    for i, (term, trunc) in enumerate([(0, 0), (0, 0), (1, 0), (0, 0), (0, 1), (0, 0)]):
        buf.add([i], 0, 1.0, [i + 1], bool(term), bool(trunc))
    ret, boot, disc = buf.returns(np.arange(6))
    np.testing.assert_allclose(ret, [1.75, 1.5, 1.0, 1.5, 1.0, 1.0])
    np.testing.assert_allclose(disc, [0.0, 0.0, 0.0, 0.25, 0.5, 0.5])  # terminal: no bootstrap
    np.testing.assert_array_equal(boot[:, 0], [3, 3, 3, 5, 5, 6])


def test_qat_errors(run_dir, tmp_path):
    with pytest.raises(QuarlError, match="unknown qat option.*steps"):
        quantize(run_dir, "qat-int8", calib_size=50, qat={"stepz": 1})
    meta = json.loads((run_dir / "run.json").read_text())
    other = tmp_path / "ppo"
    other.mkdir()
    (other / "run.json").write_text(json.dumps({**meta, "algo": "ppo"}))
    shutil.copy(run_dir / "qnet.keras", other / "qnet.keras")
    with pytest.raises(QuarlError, match="dqn only"):
        quantize(other, "qat-int8", calib_size=50)
