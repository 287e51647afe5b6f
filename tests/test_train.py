"""DQN training: a tiny real run writes every artefact; the Keras twin equals the agent's net."""
from __future__ import annotations

import csv
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from quarl_edge.core.errors import QuarlError  # noqa: E402
from quarl_edge.rl.train import DQNConfig, train  # noqa: E402
from quarl_edge.measure.selection import int8_judge  # noqa: E402
from quarl_edge.core.nets import mlp_q_values  # noqa: E402
from quarl_edge.core.run import load_keras  # noqa: E402

TINY = dict(learning_starts=100, eval_every=100, eval_episodes=2, log_every=50, batch_size=32,
            train_every=50, updates_per_train=10,
            hidden=(16, 8), target_update_period=50)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    info = train("CartPole-v1", "dqn", 300, 3, out, progress=False, judge=int8_judge, **TINY)
    return out, info


def test_tiny_run_writes_every_artefact(tiny_run):
    out, info = tiny_run
    assert (out / "policy" / "saved_model.pb").is_file()
    assert (out / "qnet.keras").is_file()
    saved = json.loads((out / "run.json").read_text())
    assert saved == info
    assert saved["env"] == "CartPole-v1" and saved["algo"] == "dqn" and saved["seed"] == 3
    assert saved["steps"] == 300 and saved["train_seconds"] > 0
    assert saved["obs_shape"] == [4] and saved["n_actions"] == 2
    assert saved["network"]["hidden"] == [16, 8]
    assert saved["hyperparameters"]["batch_size"] == 32
    assert saved["hyperparameters"]["double"] is True
    assert saved["best_step"] in (100, 200, 300)
    assert saved["versions"]["tf-agents"] == "0.19.0"

    rows = list(csv.DictReader((out / "train_curve.csv").open()))
    assert list(rows[0]) == ["step", "train_return", "greedy_return", "loss"]
    assert [int(r["step"]) for r in rows] == [50, 100, 150, 200, 250, 300]
    greedy = [float(r["greedy_return"]) for r in rows if r["greedy_return"]]
    assert len(greedy) == 3 and max(greedy) == saved["best_greedy_return"]
    assert rows[0]["loss"] == "" and rows[-1]["loss"] != ""  # training starts at step 100
    assert float(rows[-1]["train_return"]) > 0


def test_keras_twin_equals_the_saved_agent_network(tiny_run):
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts

    out, _ = tiny_run
    model = load_keras(out)
    assert model.input_shape == (None, 4) and model.output_shape == (None, 2)
    assert model.inputs[0].dtype == tf.float32

    rng = np.random.default_rng(0)
    obs = rng.normal(scale=[1.0, 2.0, 0.1, 2.0], size=(500, 4)).astype(np.float32)
    q = model(obs).numpy()
    np.testing.assert_allclose(q, mlp_q_values(model.get_weights(), obs), rtol=1e-5, atol=1e-5)

    policy = tf.saved_model.load(str(out / "policy"))
    # the SavedModel's variables are the Q-network's (the target network is not exported)
    saved = sorted((v.numpy() for v in policy.model_variables), key=lambda a: (a.shape, a.sum()))
    ours = sorted(model.get_weights(), key=lambda a: (a.shape, a.sum()))
    assert len(saved) == len(ours)
    for a, b in zip(saved, ours):
        np.testing.assert_array_equal(a, b)

    step = ts.restart(tf.constant(obs), batch_size=len(obs))
    actions = policy.action(step, ()).action.numpy()
    gap = np.abs(q[:, 0] - q[:, 1])
    clear = gap > 1e-4  # exact near-ties may resolve either way
    np.testing.assert_array_equal(actions[clear], q.argmax(axis=1)[clear])


def test_same_seed_trains_the_same_network(tiny_run, tmp_path):
    """DQN is deterministic for a fixed seed: a second run of the tiny config gives the same
    train_curve.csv (losses and validation returns) and the same weights."""
    out, info = tiny_run
    again = train("CartPole-v1", "dqn", 300, 3, tmp_path, progress=False, judge=int8_judge,
                  **TINY)
    assert (tmp_path / "train_curve.csv").read_text() == (out / "train_curve.csv").read_text()
    assert again["best_step"] == info["best_step"]
    assert again["best_int8_validation_return"] == info["best_int8_validation_return"]
    for a, b in zip(load_keras(tmp_path).get_weights(), load_keras(out).get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("batch", [1, 3])
def test_staged_replay_leaves_the_buffer_as_add_batch_does(batch):
    """StagedReplay's one traced call per round leaves the same rows, ids and last id as
    add_batch called once per step, rounds of any length (an episode's end adds a step)."""
    import tensorflow as tf
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import policy_step, trajectory
    from tf_agents.trajectories import time_step as ts

    from quarl_edge.rl.common import StagedReplay

    obs_spec = tensor_spec.TensorSpec((3,), tf.float32)
    spec = trajectory.from_transition(
        ts.time_step_spec(obs_spec),
        policy_step.PolicyStep(tensor_spec.TensorSpec((), tf.int64), (), ()),
        ts.time_step_spec(obs_spec))
    one = tf_uniform_replay_buffer.TFUniformReplayBuffer(spec, batch_size=batch, max_length=7)
    staged_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(spec, batch_size=batch,
                                                                   max_length=7)
    staged = StagedReplay(staged_buffer)
    rng = np.random.default_rng(0)
    for round_len in (3, 5, 1, 9, 4):   # 22 steps through a 7-row ring, 9 in one flush
        for _ in range(round_len):
            first, last = (ts.restart(rng.normal(size=(batch, 3)).astype(np.float32),
                                      batch_size=batch) for _ in range(2))
            traj = trajectory.from_transition(
                first, policy_step.PolicyStep(rng.integers(2, size=batch).astype(np.int64), (), ()),
                ts.termination(last.observation, rng.normal(size=batch).astype(np.float32)))
            item = tf.nest.map_structure(np.asarray, traj)
            one.add_batch(item)
            staged.add(item)
        staged.flush()
        assert int(staged_buffer._get_last_id()) == int(one._get_last_id())
        for a, b in zip(tf.nest.flatten(staged_buffer.gather_all()),
                        tf.nest.flatten(one.gather_all())):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_batched_validation_and_judge_return_what_one_episode_at_a_time_does(tiny_run):
    """Validation plays every seed in lockstep with one batched forward a step, the int8 judge
    with one batched invoke: per seed, the returns of episodes played one at a time."""
    from quarl_edge.measure.reference import tflite_runner
    from quarl_edge.quant.calibration import rollout_observations
    from quarl_edge.quant.schemes import convert_keras
    from quarl_edge.rl.dqn import validation_return
    from quarl_edge.rl.tf_env import make_env, run_episode
    from quarl_edge.core.nets import keras_runner
    from quarl_edge.core.run import VALIDATION_SEED_BASE

    out, _ = tiny_run
    model = load_keras(out)
    weights = model.get_weights()
    env = make_env("CartPole-v1")
    seeds = [VALIDATION_SEED_BASE + k for k in range(6)]

    def one_at_a_time(act):
        return [run_episode(env, lambda o: int(np.argmax(act(o))), s)[0] for s in seeds]

    fp32 = one_at_a_time(lambda o: mlp_q_values(weights, o[None])[0])
    assert validation_return("CartPole-v1", lambda x: mlp_q_values(weights, x), 6) == \
        pytest.approx(np.mean(fp32), abs=1e-9)

    path = out / "judge-check-int8.tflite"
    path.write_bytes(convert_keras(model, "int8", rollout_observations(
        "CartPole-v1", keras_runner(model), 2)))
    int8 = one_at_a_time(tflite_runner(path))
    assert int8_judge("CartPole-v1", env, model, 2, 6, out) == pytest.approx(np.mean(int8),
                                                                             abs=1e-9)
    path.unlink()
    env.close()


def test_unknown_algo_env_and_option():
    with pytest.raises(QuarlError, match="known: dqn"):
        train("CartPole-v1", "a3c", 10, 0, "/nonexistent/never-written")
    with pytest.raises(QuarlError, match="NoSuchEnv-v3"):
        train("NoSuchEnv-v3", "dqn", 10, 0, "/nonexistent/never-written")
    with pytest.raises(QuarlError, match="learnig_rate"):
        train("CartPole-v1", "dqn", 10, 0, "/nonexistent/never-written", learnig_rate=1e-3)
    with pytest.raises(QuarlError, match="steps"):
        DQNConfig(steps=0)


def test_dqn_int8_selection_needs_a_judge(tmp_path):
    """Training imports no converter: the int8 checkpoint ranking is handed in (select_int8)."""
    with pytest.raises(QuarlError, match="judge=quarl_edge.measure.selection.int8_judge"):
        train("CartPole-v1", "dqn", 10, 0, tmp_path, progress=False)
    assert not (tmp_path / "run.json").exists()


def test_dqn_refuses_continuous_actions(tmp_path):
    with pytest.raises(QuarlError, match="Discrete"):
        train("Pendulum-v1", "dqn", 10, 0, tmp_path, progress=False)


def test_load_keras_without_a_run(tmp_path):
    with pytest.raises(QuarlError, match="no trained model"):
        load_keras(tmp_path)


@pytest.mark.slow
def test_default_cartpole_training_reaches_450(tmp_path):
    info = train("CartPole-v1", "dqn", None, 1, tmp_path, progress=False, judge=int8_judge)
    assert info["best_greedy_return"] >= 450, info
