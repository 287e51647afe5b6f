"""qat-distill-int8: QAT by on-policy distillation from the fp32 network, for every algorithm.

Real short runs: a copy of the shipped DQN CartPole run, and a tiny TD3 Pendulum run trained
here. Each becomes a real .tflite from the real converter, run in tflite-runtime: full integer
(int8 FULLY_CONNECTED, float I/O), close to its fp32 teacher, with its distillation log. The
study runs the scheme for every algorithm (no skip) with its own distill_steps."""
from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers_models import copy_example_run  # noqa: E402
from quarl_edge.core.errors import QuarlError  # noqa: E402
from quarl_edge.rl.qat import QAT_DISTILL_SEED_BASE, TANH_PRE_RANGE  # noqa: E402
from quarl_edge.measure.reference import model_ops, model_tensors, tflite_runner  # noqa: E402
from quarl_edge.quant.schemes import quantize  # noqa: E402
from quarl_edge.rl.train import train  # noqa: E402
from quarl_edge.core.run import load_keras  # noqa: E402

FAST = {"steps": 1000, "episodes_per_round": 1, "updates_per_round": 50, "eval_episodes": 2}
OFF_TINY = dict(learning_starts=50, train_every=50, updates_per_train=5, batch_size=16,
                eval_every=100, eval_episodes=1, hidden=(8, 8), critic_hidden=(8, 8))


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    """The example run, laid out as a study's cached run (OUT/runs/<name>/)."""
    return copy_example_run(tmp_path_factory.mktemp("study") / "runs" / "dqn-CartPole-v1-s0")


@pytest.fixture(scope="module")
def dqn_model(dqn_run):
    return quantize(dqn_run, "qat-distill-int8", calib_size=300, distill=FAST)


@pytest.fixture(scope="module")
def td3_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("td3")
    train("Pendulum-v1", "td3", 200, 1, run, progress=False, **OFF_TINY)
    return run


def _full_int8(path):
    """Integer FULLY_CONNECTED: int8 weights and activations, int32 biases, float32 I/O."""
    run = tflite_runner(path)
    assert run.input_details["dtype"] == np.float32 and run.output_details["dtype"] == np.float32
    io = {run.input_details["index"], run.output_details["index"]}
    inner = [t for t in model_tensors(path) if t["index"] not in io]
    weights = [t for t in inner if len(t["shape"]) == 2 and t["shape"][0] != 1]
    biases = [t for t in inner if len(t["shape"]) == 1 and t["shape"][0] >= 1
              and t["dtype"] != np.float32]
    acts = [t for t in inner if len(t["shape"]) == 2 and t["shape"][0] == 1]
    assert weights and all(t["dtype"] == np.int8 for t in weights)
    assert all(t["quantization_parameters"]["zero_points"][0] == 0 for t in weights)
    assert biases and all(t["dtype"] == np.int32 for t in biases)
    assert acts and all(t["dtype"] == np.int8 for t in acts)
    return run, acts


def _log(run_dir):
    return json.loads((run_dir / "qat-distill.json").read_text())


def test_dqn_is_full_int8_and_close_to_its_teacher(dqn_run, dqn_model):
    assert model_ops(dqn_model) == ["QUANTIZE"] + ["FULLY_CONNECTED"] * 3 + ["DEQUANTIZE"]
    run, _ = _full_int8(dqn_model)
    calib = np.load(dqn_run / "calibration.npy")[:200]
    out = np.stack([run(x) for x in calib])
    q = load_keras(dqn_run)(calib).numpy()
    err = np.abs(out - q) / np.abs(q).max()
    assert q.max() > 20 and err.max() < 6e-2 and np.median(err) < 1e-2
    # the greedy action is the teacher's where the teacher's choice is clear (gap > 1, about
    # two output steps of int8)
    clear = np.abs(q[:, 0] - q[:, 1]) > 1.0
    assert clear.sum() > 20 and np.array_equal(out[clear].argmax(1), q[clear].argmax(1))


def test_dqn_distillation_log(dqn_run, dqn_model):
    log = _log(dqn_run)
    assert log["config"]["steps"] == 1000 and log["loss"] == "mse" and log["output"] == "q_values"
    assert log["env_steps"] >= 1000 and log["rounds"] == len(log["curve"]) - 1 >= 2
    assert log["gradient_steps"] == 50 * log["rounds"]
    assert log["states"] == 300 + log["env_steps"]  # calibration + the student's own states
    assert log["rollout_seeds"][0] == QAT_DISTILL_SEED_BASE
    curve = log["curve"]
    assert [c["round"] for c in curve] == list(range(log["rounds"] + 1))
    assert curve[0]["loss"] is None and all(c["loss"] is not None for c in curve[1:])
    # the best checkpoint by greedy validation return (ties: the later) is the one kept
    returns = [c["greedy_return"] for c in curve]
    best = max(i for i, r in enumerate(returns) if r == max(returns))
    assert log["best_round"] == best and log["best_validation_return"] == max(returns) >= 400
    assert log["teacher_validation_return"] >= 400
    # fitting the teacher's outputs moves the fake-quantized student towards them
    assert min(c["calibration_mse"] for c in curve[1:]) < 0.8 * curve[0]["calibration_mse"]


def test_td3_actor_is_full_int8_and_close_to_its_teacher(td3_run):
    path = quantize(td3_run, "qat-distill-int8", calib_size=200,
                    distill={**FAST, "steps": 400})
    assert model_ops(path) == ["QUANTIZE"] + ["FULLY_CONNECTED"] * 3 + [
        "TANH", "FULLY_CONNECTED", "DEQUANTIZE"]
    run, acts = _full_int8(path)
    # the tanh input's range is the calibrated pre-activation range, at most +-TANH_PRE_RANGE
    tanh_in = [t for t in acts if "Tanh" not in t["name"] and t["shape"][1] == 1]
    scale = max(t["quantization_parameters"]["scales"][0] for t in tanh_in)
    assert scale * 255 <= 2 * TANH_PRE_RANGE + 1e-3
    calib = np.load(td3_run / "calibration.npy")
    out = np.stack([run(x) for x in calib])
    ref = load_keras(td3_run)(calib).numpy()
    assert np.abs(out).max() <= 2.0 + 1e-5
    assert np.abs(out - ref).max() < 0.1 and np.abs(out - ref).mean() < 0.02  # Pendulum: [-2, 2]
    log = _log(td3_run)
    assert log["output"] == "action" and log["loss"] == "mse" and log["env_steps"] >= 400
    assert log["rounds"] == 2 and len(log["curve"]) == 3  # two 200-step episodes
    assert np.isfinite(log["best_validation_return"])


def test_td3_actor_at_4_bits_is_int8x4_and_bit_exact_with_tflm(td3_run, tmp_path):
    """qat-distill-int8x4, the 4-bit QAT for actor-critic runs (the RL-loop one is DQN's): the
    student's Dense kernels fake-quantized to 4 bits, converted as qat-int8x4: INT4 weights per
    tensor, int8 activations, float I/O; the generated C equals TF Lite Micro bit for bit; its
    own log, the 8-bit one untouched."""
    from quarl_edge.converters import tflite_model
    from test_kernels_golden import _compare
    before = (td3_run / "qat-distill.json").read_bytes() \
        if (td3_run / "qat-distill.json").exists() else None
    path = quantize(td3_run, "qat-distill-int8x4", calib_size=200,
                    distill={**FAST, "steps": 400})
    assert path.name == "qat-distill-int8x4.tflite"
    m = tflite_model.load(path)
    w4 = [t for t in m.tensors if t.dtype == "int4"]
    assert len(w4) == 4 and all(not t.quantization.per_channel for t in w4)   # 3 + 8 + 8 + 1 wide
    assert not [t for t in m.tensors if t.is_constant and t.dtype == "int8"]
    log = json.loads((td3_run / "qat-distill-int8x4.json").read_text())
    assert log["config"]["weight_bits"] == 4 and log["output"] == "action" and log["rounds"] == 2
    assert ((td3_run / "qat-distill.json").read_bytes() if before is not None else None) == before
    calib = np.load(td3_run / "calibration.npy")
    r = _compare(path.read_bytes(), calib[:, None], tmp_path / "c", "qat-distill-int8x4 TD3")
    assert r["gm"].ops == ["QUANTIZE"] + ["FULLY_CONNECTED"] * 3 + [
        "TANH", "FULLY_CONNECTED", "DEQUANTIZE"]
    ref = load_keras(td3_run)(calib).numpy()
    assert np.abs(r["got"].reshape(ref.shape) - ref).max() < 0.5   # 4-bit weights: coarser


def test_errors(dqn_run, td3_run):
    with pytest.raises(QuarlError, match="unknown qat-distill option.*episodes_per_round"):
        quantize(dqn_run, "qat-distill-int8", calib_size=50, distill={"stepz": 1})
    with pytest.raises(QuarlError, match="unknown distill loss"):
        quantize(dqn_run, "qat-distill-int8", calib_size=50, distill={"loss": "l1"})
    with pytest.raises(QuarlError, match="argmax heads"):
        quantize(td3_run, "qat-distill-int8", calib_size=50,
                 distill={"loss": "centred", "steps": 0})
    with pytest.raises(QuarlError, match="weight_bits must be 8 or 4"):
        quantize(dqn_run, "qat-distill-int8", calib_size=50, distill={"weight_bits": 2})
    # the RL-loop QAT refuses an actor-critic run and names the scheme that does it
    with pytest.raises(QuarlError, match="dqn only; this run is 'td3'.*qat-distill-int8x4"):
        quantize(td3_run, "qat-int8x4", calib_size=50, qat={"steps": 0})


def test_study_runs_the_scheme_for_every_algorithm(dqn_run, tmp_path):
    from quarl_edge.study.cells import _train_spec, run_group
    from quarl_edge.study.config import load_study
    from quarl_edge.study.plan import plan
    config = tmp_path / "s.toml"
    config.write_text('''
[study]
schemes = ["qat-int8", "qat-distill-int8"]
distill_steps = 500
episodes = 2

[[task]]
algo = "dqn"
env = "CartPole-v1"
[task.distill]
episodes_per_round = 1
updates_per_round = 20
eval_episodes = 1

[[task]]
algo = "td3"
env = "Pendulum-v1"
distill_steps = 300
''')
    study = load_study(config)
    dqn, td3 = plan(study)
    assert dqn.task.distill_steps == 500 and td3.task.distill_steps == 300
    assert dqn.task.distill == {"episodes_per_round": 1, "updates_per_round": 20,
                                "eval_episodes": 1} and td3.task.distill == {}
    assert ("cell", "td3", "Pendulum-v1", 0, "qat-distill-int8") in td3.keys
    bad = config.read_text().replace("eval_episodes = 1", "eval_episodez = 1")
    (tmp_path / "bad.toml").write_text(bad)
    with pytest.raises(QuarlError, match="unknown distill option.*eval_episodez"):
        load_study(tmp_path / "bad.toml")
    (tmp_path / "bad2.toml").write_text(config.read_text().replace(
        "eval_episodes = 1", 'loss = "huber"'))
    with pytest.raises(QuarlError, match="invalid distill options.*unknown distill loss"):
        load_study(tmp_path / "bad2.toml")

    # the DQN group on the example run (cached: its training spec matches)
    out = dqn_run.parent.parent
    (dqn_run / "study-train.json").write_text(json.dumps(_train_spec(dqn)) + "\n")
    rows = []
    done = {("run", "dqn", "CartPole-v1", 0), ("cell", "dqn", "CartPole-v1", 0, "qat-int8")}
    run_group(dqn, out, done, rows.append)
    (row,) = rows
    assert row["scheme"] == "qat-distill-int8" and row["status"] == "ok", row
    assert row["distill"]["env_steps"] >= 500 and row["distill"]["loss"] == "mse"
    assert row["mean_return"] >= 400 and len(row["returns"]) == 2
    assert _log(dqn_run)["config"]["updates_per_round"] == 20
