"""The numpy collect policies (quarl_edge/rl/collect.py) against the TF-Agents policies they
stand in for: the same distribution parameters from the same weights, the PolicyStep the replay
buffer expects, samples from that distribution; and SAC's and PPO's runs stay reproducible."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from quarl_edge.rl.train import train  # noqa: E402


def _ppo_agent(env_id: str):
    import tensorflow as tf
    from quarl_edge.rl import ppo
    tf.keras.utils.set_random_seed(0)
    cfg = ppo.PPOConfig(hidden=(16, 16))
    env, _ = ppo._envs(env_id, 0, cfg)
    actor_net, value_net, _ = ppo._make_nets(env_id, 0, env, cfg)
    return env, actor_net, ppo._make_agent(env, actor_net, value_net, cfg)


def _observations(env, n: int, seed: int = 1) -> np.ndarray:
    spec = env.observation_spec()
    low, high = np.maximum(spec.minimum, -2), np.minimum(spec.maximum, 2)
    return np.random.default_rng(seed).uniform(low, high, (n, *spec.shape)).astype(np.float32)


def test_categorical_sampler_gives_ppos_logits_policy_step_and_distribution():
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts
    from quarl_edge.rl.collect import CategoricalSampler

    env, actor_net, agent = _ppo_agent("CartPole-v1")
    # make the two actions clearly unequal, so that a swapped or shifted sampler shows
    dense = [layer for layer in actor_net.submodules if isinstance(layer, tf.keras.layers.Dense)]
    kernel, bias = dense[-1].get_weights()
    dense[-1].set_weights([kernel, bias + np.array([1.2, -0.3], np.float32)])
    obs = _observations(env, 8)
    step = ts.restart(tf.constant(obs), batch_size=len(obs))
    theirs = agent.collect_policy.action(step, ())
    sampler = CategoricalSampler(actor_net, np.random.default_rng(0), env.action_spec().dtype)
    ours = sampler(ts.restart(obs, batch_size=len(obs)))

    tf.nest.assert_same_structure(ours, tf.nest.map_structure(np.asarray, theirs))
    assert ours.action.dtype == theirs.action.numpy().dtype and ours.action.shape == (8,)
    np.testing.assert_allclose(ours.info["dist_params"]["logits"],
                               theirs.info["dist_params"]["logits"].numpy(), atol=1e-5)

    one = np.repeat(obs[:1], 40_000, axis=0)
    draws = sampler(ts.restart(one, batch_size=len(one))).action
    logits = ours.info["dist_params"]["logits"][0].astype(np.float64)
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    freq = np.bincount(draws, minlength=2) / len(draws)
    assert probs[0] > 0.7
    np.testing.assert_allclose(freq, probs, atol=0.01)   # 4 sigma is 0.009 at p = 0.75


def test_categorical_sampler_reads_new_weights_on_refresh_only():
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts
    from quarl_edge.rl.collect import CategoricalSampler

    env, actor_net, _ = _ppo_agent("CartPole-v1")
    obs = ts.restart(_observations(env, 4), batch_size=4)
    sampler = CategoricalSampler(actor_net, np.random.default_rng(0))
    before = sampler(obs).info["dist_params"]["logits"]
    dense = [layer for layer in actor_net.submodules if isinstance(layer, tf.keras.layers.Dense)]
    kernel, bias = dense[-1].get_weights()
    dense[-1].set_weights([kernel, bias + 1.0])
    np.testing.assert_array_equal(sampler(obs).info["dist_params"]["logits"], before)
    sampler.refresh()
    np.testing.assert_allclose(sampler(obs).info["dist_params"]["logits"], before + 1.0,
                               atol=1e-6)


def test_sac_sampler_is_the_tanh_normal_of_sacs_actor():
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts
    from quarl_edge.rl.collect import SacSampler
    from quarl_edge.rl.common import _agent_env
    from quarl_edge.rl.off_policy import OffPolicyConfig, _make_agent

    tf.keras.utils.set_random_seed(0)
    env = _agent_env("Pendulum-v1", 0, "sac", continuous_only=True)
    agent, actor_net = _make_agent("sac", env, OffPolicyConfig(hidden=(16, 16)))
    obs = _observations(env, 6)
    dist, _ = actor_net(tf.constant(obs), step_type=(), network_state=())
    sampler = SacSampler(actor_net, env.action_spec(), np.random.default_rng(0))
    mean, std = sampler.params(obs)
    normal = dist.input_distribution
    np.testing.assert_allclose(mean, normal.loc.numpy(), atol=1e-5)
    np.testing.assert_allclose(std, normal.stddev().numpy(), rtol=1e-5)
    x = np.linspace(-4, 4, 17, dtype=np.float32)[:, None]
    bijector = dist._squashed_distribution.bijector   # SquashToSpecNormal's tanh, then scale
    np.testing.assert_allclose(sampler.squash(x), bijector.forward(x).numpy(), atol=1e-5)

    # samples: within the bounds, and the squashed draws of N(mean, std)
    one = np.repeat(obs[:1], 20_000, axis=0)
    draws = np.stack([sampler(ts.restart(one[k:k + 1], batch_size=1)) for k in range(4000)])
    assert draws.shape == (4000, 1) and draws.dtype == np.float32
    assert np.all(np.abs(draws) <= 2.0)
    theirs = agent.collect_policy.action(ts.restart(tf.constant(one), batch_size=len(one)), ())
    theirs = theirs.action.numpy()
    # same distribution: the quantiles of our 4,000 draws and of TF's 20,000
    q = np.linspace(0.1, 0.9, 9)
    np.testing.assert_allclose(np.quantile(draws, q), np.quantile(theirs, q), atol=0.08)


@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_noisy_actor_sampler_is_the_actor_plus_td3s_or_ddpgs_noise(algo):
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts
    from quarl_edge.rl.collect import NoisyActorSampler
    from quarl_edge.rl.common import _agent_env
    from quarl_edge.rl.off_policy import DDPG_OU_DAMPING, OffPolicyConfig, _make_agent

    tf.keras.utils.set_random_seed(0)
    env = _agent_env("Pendulum-v1", 0, algo, continuous_only=True)
    agent, actor_net = _make_agent(algo, env, OffPolicyConfig(hidden=(16, 16)))
    obs = _observations(env, 6)
    kind = "gaussian" if algo == "td3" else "ou"
    sampler = NoisyActorSampler(actor_net, env.action_spec(), np.random.default_rng(0), kind,
                                0.3, damping=DDPG_OU_DAMPING)
    theirs = agent.policy.action(ts.restart(tf.constant(obs), batch_size=len(obs)), ()).action
    np.testing.assert_allclose(sampler.greedy(obs), theirs.numpy(), atol=1e-5)

    # the noise: a mid-range action (zero weights: the actor says 0), then the actions' series
    actor_net.set_weights([np.zeros_like(w) for w in actor_net.get_weights()])
    sampler.refresh()
    one = ts.restart(obs[:1], batch_size=1)
    noise = np.array([sampler(one)[0] for _ in range(20_000)], np.float64)
    lag1 = np.corrcoef(noise[:-1], noise[1:])[0, 1]
    if kind == "gaussian":
        assert abs(noise.std() - 0.3) < 0.01 and abs(lag1) < 0.03
    else:   # AR(1): correlation 1 - damping, stationary std 0.3 / sqrt(1 - (1 - damping)^2)
        assert abs(lag1 - (1 - DDPG_OU_DAMPING)) < 0.02
        assert abs(noise.std() - 0.3 / np.sqrt(1 - (1 - DDPG_OU_DAMPING) ** 2)) < 0.06


@pytest.mark.parametrize("algo,env_id,tiny", [
    ("sac", "Pendulum-v1", dict(learning_starts=50, train_every=50, updates_per_train=5,
                                batch_size=16, eval_every=100, eval_episodes=1, hidden=(8, 8),
                                critic_hidden=(8, 8))),
    ("ppo", "CartPole-v1", dict(collect_steps=100, epochs=1, eval_episodes=1, hidden=(8, 8)))])
def test_a_seed_gives_the_same_run_with_the_numpy_collect_policies(tmp_path, algo, env_id, tiny):
    """The samplers draw from a Generator seeded by the run's seed, and SAC's gradient rounds
    run in one traced loop: a seed still gives the same curve, another seed another one."""
    curves = []
    for seed, name in ((0, "a"), (0, "b"), (1, "c")):
        train(env_id, algo, 200, seed, tmp_path / name, progress=False, **tiny)
        curves.append((tmp_path / name / "train_curve.csv").read_text())
    assert curves[0] == curves[1]
    assert curves[0] != curves[2]
