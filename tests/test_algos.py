"""PPO, SAC, TD3, DDPG: tiny real runs through the Gymnasium adapter; each exports a plain Keras
policy network (policy.keras) equal to the agent's greedy policy, which quantize converts."""
from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from quarl_edge.core.errors import QuarlError  # noqa: E402
from quarl_edge.rl.train import ALGOS, DEFAULTS, train  # noqa: E402
from quarl_edge.core.run import MODEL_FILES, load_keras  # noqa: E402

PPO_TINY = dict(collect_steps=100, epochs=1, eval_episodes=1, hidden=(8, 8))
OFF_TINY = dict(learning_starts=50, train_every=50, updates_per_train=5, batch_size=16,
                eval_every=100, eval_episodes=1, hidden=(8, 8), critic_hidden=(8, 8))
# default suite: one discrete (PPO, categorical logits) and one continuous actor (SAC, tanh);
# the other actor heads (PPO's Normal projection, the TD3/DDPG ActorNetwork) under slow
CASES = [("ppo", "CartPole-v1", PPO_TINY), ("sac", "Pendulum-v1", OFF_TINY),
         pytest.param("ppo", "Pendulum-v1", PPO_TINY, marks=pytest.mark.slow),
         pytest.param("td3", "Pendulum-v1", OFF_TINY, marks=pytest.mark.slow),
         pytest.param("ddpg", "Pendulum-v1", OFF_TINY, marks=pytest.mark.slow)]


def _greedy_actions(run, obs):
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts
    policy = tf.saved_model.load(str(run / "policy"))
    return policy.action(ts.restart(tf.constant(obs), batch_size=len(obs)), ()).action.numpy()


@pytest.mark.parametrize("algo,env_id,tiny", CASES)
def test_tiny_run_exports_the_greedy_policy_as_keras(tmp_path, algo, env_id, tiny):
    info = train(env_id, algo, 200, 1, tmp_path, progress=False, **tiny)
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved == info and saved["algo"] == algo and saved["env"] == env_id
    assert saved["model_file"] == "policy.keras" == MODEL_FILES[algo]
    assert saved["steps"] == 200 and np.isfinite(saved["best_greedy_return"])
    assert (tmp_path / "train_curve.csv").is_file()
    model = load_keras(tmp_path)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, size=(64, *saved["obs_shape"])).astype(np.float32)
    out = model(obs).numpy()
    actions = _greedy_actions(tmp_path, obs)
    if saved["action_space"]["type"] == "discrete":
        assert saved["n_actions"] == 2 and out.shape == (64, 2)
        assert saved["network"]["head"] == "linear"  # logits; action = argmax
        top2 = np.sort(out, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 1e-4
        np.testing.assert_array_equal(out.argmax(1)[clear], actions[clear])
    else:  # deterministic actor: tanh, then the diagonal layer scaling to [-2, 2]
        assert out.shape == (64, 1) and np.all(np.abs(out) <= 2.0 + 1e-5)
        np.testing.assert_allclose(out, actions, rtol=1e-4, atol=1e-4)
        assert [layer.get_config()["activation"] for layer in model.layers[1:]][-2:] == [
            "tanh", "linear"]
        _check_quantized_continuous_actor(tmp_path)


def _check_quantized_continuous_actor(tmp_path):
    from quarl_edge.measure.reference import model_ops, tflite_runner
    from quarl_edge.quant.schemes import quantize
    path = quantize(tmp_path, "int8", calib_size=100)
    assert model_ops(path) == ["QUANTIZE"] + ["FULLY_CONNECTED"] * 3 + [
        "TANH", "FULLY_CONNECTED", "DEQUANTIZE"]
    calib = np.load(tmp_path / "calibration.npy")
    assert calib.shape == (100, 3)
    run = tflite_runner(path)
    q = np.stack([run(x) for x in calib[:50]])
    ref = load_keras(tmp_path)(calib[:50]).numpy()
    assert np.abs(q - ref).max() < 0.1  # action units; Pendulum's range is [-2, 2]


def test_errors_list_the_known_algorithms_and_envs(tmp_path):
    with pytest.raises(QuarlError, match="known: dqn, ppo, sac, td3, ddpg"):
        train("CartPole-v1", "a2c", 10, 0, tmp_path)
    with pytest.raises(QuarlError, match="NoSuchEnv-v0.*Pendulum-v1"):
        train("NoSuchEnv-v0", "sac", 10, 0, tmp_path)
    with pytest.raises(QuarlError, match="Box"):
        train("CartPole-v1", "sac", 10, 0, tmp_path, progress=False)
    with pytest.raises(QuarlError, match="unknown ppo option"):
        train("CartPole-v1", "ppo", 10, 0, tmp_path, learning_rat=1.0)


def test_defaults_per_algo_and_env_are_valid_options():
    from dataclasses import fields
    assert list(ALGOS) == ["dqn", "ppo", "sac", "td3", "ddpg"]
    for (algo, env_id), options in DEFAULTS.items():
        known = {f.name for f in fields(ALGOS[algo][0])}
        assert set(options) <= known, (algo, env_id)
        ALGOS[algo][0](**options)


def test_boundary_weights_drop_the_pairs_between_episodes():
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts
    from tf_agents.trajectories import trajectory

    from quarl_edge.rl.off_policy import boundary_weights
    from quarl_edge.rl.train import OffPolicyConfig
    F, M, L = ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST
    step_type = tf.constant([[M, M], [M, L], [L, F], [F, M]], tf.int32)  # [B, 2] sampled pairs
    next_type = tf.constant([[M, L], [L, F], [F, M], [M, M]], tf.int32)
    zeros = tf.zeros((4, 2))
    batch = trajectory.Trajectory(step_type, zeros, zeros, (), next_type, zeros, tf.ones((4, 2)))
    # only the pair that starts at the LAST step (the episode's end -> the next one's start)
    np.testing.assert_array_equal(boundary_weights(batch).numpy(), [1, 1, 0, 1])
    assert OffPolicyConfig().mask_boundaries is False  # opt-in (the MuJoCo TD3 defaults)
    with pytest.raises(QuarlError, match="critic_loss"):
        OffPolicyConfig(critic_loss="l1")


def test_ppo_collects_from_side_by_side_envs_and_trains_on_minibatches_of_rows(tmp_path):
    """num_envs envs fill one batch row each; every real transition counts toward `steps` (the
    LAST -> FIRST auto-reset pairs do not), so 4 envs x 125 steps reach 500 per iteration and each
    env finishes one 200-step Pendulum episode in the second iteration."""
    import csv
    info = train("Pendulum-v1", "ppo", 1000, 3, tmp_path, progress=False, collect_steps=500,
                 num_envs=4, minibatches=2, epochs=2, eval_episodes=1, hidden=(8, 8))
    assert info["hyperparameters"]["num_envs"] == 4 and info["steps"] == 1000
    rows = list(csv.DictReader((tmp_path / "train_curve.csv").open()))
    assert [int(r["step"]) for r in rows] == [500, 1000]
    assert rows[0]["train_return"] == ""                     # no env has finished an episode yet
    assert -16.3 * 200 <= float(rows[1]["train_return"]) < 0   # Pendulum: -16.27 <= r <= 0
    assert np.isfinite(float(rows[1]["loss"]))
    # the policy's std, read back from policy/ the way the study does, is the one it trained
    from quarl_edge.core.nets import ppo_action_std
    std = info["action_std"]
    assert len(std) == 1 and 0 < std[0] < 2
    np.testing.assert_allclose(ppo_action_std(tmp_path), std, rtol=1e-6)
    assert abs(std[0] - 0.35) > 1e-4        # moved from TF-Agents' initial std (0.35 here)
    from quarl_edge.rl.train import PPOConfig
    with pytest.raises(QuarlError, match="minibatches .3. must divide num_envs .4."):
        PPOConfig(num_envs=4, minibatches=3)


def test_warmup_noise_uniform_is_independent_and_ou_persists_within_the_bounds():
    from quarl_edge.rl.off_policy import WarmupNoise
    from quarl_edge.rl.train import OffPolicyConfig
    low, high = np.array([-1.0, 0.0]), np.array([1.0, 4.0])

    def draws(kind):
        noise = WarmupNoise(kind, low, high, np.random.default_rng(0))
        return np.array([noise.next() for _ in range(20_000)])

    def lag1(x):
        return np.corrcoef(x[:-1], x[1:])[0, 1]

    for kind in ("uniform", "ou"):
        a = draws(kind)
        assert np.all(a >= low) and np.all(a <= high), kind
    uni, ou = draws("uniform"), draws("ou")
    assert abs(lag1(uni[:, 0])) < 0.05 and abs(uni[:, 1].mean() - 2.0) < 0.05
    # OU: each step keeps 85 % of the last (theta 0.15), around the middle with std 0.3 of the
    # half range (1 and 2 here)
    assert 0.8 < lag1(ou[:, 0]) < 0.9 and 0.8 < lag1(ou[:, 1]) < 0.9
    assert abs(ou[:, 1].mean() - 2.0) < 0.15 and 0.22 < ou[:, 0].std() < 0.38
    assert 0.44 < ou[:, 1].std() < 0.76
    with pytest.raises(QuarlError, match="warmup_noise"):
        OffPolicyConfig(warmup_noise="pink")


def test_config_changes_treat_fields_a_run_predates_as_their_defaults():
    from quarl_edge.rl.train import config_changes, PPOConfig, resolve_config
    cfg = resolve_config("ppo", "Pendulum-v1")
    assert cfg.num_envs == 16 and cfg.gamma == 0.9 and cfg.steps == 200_000
    assert resolve_config("ppo", "Pendulum-v1", 1000, gamma=0.5).gamma == 0.5
    saved = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(cfg).items()}
    assert config_changes(saved, cfg) == {}
    old = {k: v for k, v in saved.items() if k not in ("num_envs", "minibatches")}
    # a run from before num_envs existed was trained with one env: the default, 1
    assert config_changes(old, PPOConfig(**{**vars(cfg), "num_envs": 1, "minibatches": 1})) == {}
    assert config_changes(old, cfg) == {"num_envs": (1, 16), "minibatches": (1, 8)}
    assert config_changes({**saved, "hidden": [64, 32]}, cfg) == {"hidden": ([64, 32], [64, 64])}


@pytest.mark.parametrize("weighted", [False, True])
def test_a_gradient_round_makes_the_updates_of_single_train_calls(weighted):
    """GradientRounds runs k `agent.train` steps in one graph loop: on DDPG, whose update draws
    no random numbers, the weights after a round of 4 equal those after 4 single calls on the
    same batches (with per-sample loss weights, if given)."""
    import tensorflow as tf
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
    from tf_agents.trajectories import policy_step, trajectory

    from quarl_edge.rl.common import GradientRounds, _agent_env
    from quarl_edge.rl.off_policy import OffPolicyConfig, _make_agent

    cfg = OffPolicyConfig(hidden=(8, 8), critic_hidden=(8, 8), batch_size=16)
    agents = []
    for _ in range(2):
        tf.keras.utils.set_random_seed(0)
        env = _agent_env("Pendulum-v1", 0, "ddpg", continuous_only=True)
        agents.append(_make_agent("ddpg", env, cfg)[0])
    for a, b in zip(agents[0].trainable_variables, agents[1].trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    replay = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agents[0].collect_data_spec, batch_size=1, max_length=500)
    rng = np.random.default_rng(0)
    batch = lambda x: tf.nest.map_structure(lambda v: np.asarray(v)[None], x)  # noqa: E731
    time_step = env.reset()
    for _ in range(300):   # Pendulum's 200-step episodes: one boundary pair among them
        action = rng.uniform(-2, 2, 1).astype(np.float32)
        nxt = env.step(action)
        replay.add_batch(trajectory.from_transition(
            batch(time_step), policy_step.PolicyStep(action[None], (), ()), batch(nxt)))
        time_step = nxt
    batches = [replay.get_next(sample_batch_size=16, num_steps=2)[0] for _ in range(4)]
    # per-sample loss weights, uneven so that dropping them would show (boundary_weights is
    # such a function, but 64 samples may miss Pendulum's one boundary pair)
    weights = (lambda _e: tf.linspace(0.0, 2.0, 16)) if weighted else None   # noqa: E731

    before = [v.numpy() for v in agents[0].trainable_variables]
    samples = iter(tf.data.Dataset.from_tensor_slices(
        (tf.nest.map_structure(lambda *x: tf.stack(x), *batches), tf.zeros(4))))
    GradientRounds(agents[0], samples, weights)(4)
    for experience in batches:
        agents[1].train(experience, weights=None if weights is None else weights(experience))
    for a, b in zip(agents[0].trainable_variables, agents[1].trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    # and they did train: the round moved the weights
    assert any(not np.array_equal(v.numpy(), w)
               for v, w in zip(agents[0].trainable_variables, before))
