"""The Gymnasium -> TF-Agents adapter: specs, seeding, termination vs truncation, auto reset."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from tf_agents.environments import utils as env_utils  # noqa: E402
from tf_agents.trajectories import time_step as ts  # noqa: E402

from quarl_edge.rl.tf_env import GymnasiumEnv, make_env, run_episode  # noqa: E402
from quarl_edge.core.errors import QuarlError  # noqa: E402


class Countdown(gym.Env):
    """Terminates at step `terminate_at` (if set); actions in Discrete(3, start=-1)."""

    def __init__(self, terminate_at: int | None = None):
        self.observation_space = gym.spaces.Box(-10.0, 10.0, shape=(2, 3), dtype=np.float64)
        self.action_space = gym.spaces.Discrete(3, start=-1)
        self.terminate_at, self.t, self.actions = terminate_at, 0, []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, size=(2, 3)), {}

    def step(self, action):
        self.actions.append(action)
        self.t += 1
        obs = np.full((2, 3), float(self.t))
        return obs, 2.0, self.t == self.terminate_at, False, {}


def test_cartpole_specs():
    env = make_env("CartPole-v1")
    obs, act = env.observation_spec(), env.action_spec()
    assert obs.shape == (4,) and obs.dtype == np.float32
    assert np.all(np.isfinite(obs.minimum)) and np.all(np.isfinite(obs.maximum))
    assert obs.maximum[0] == pytest.approx(4.8) and obs.minimum[2] == pytest.approx(-0.41887903)
    assert act.shape == () and act.dtype == np.int64
    assert (act.minimum, act.maximum) == (0, 1)
    step = env.reset()
    assert step.observation.dtype == np.float32 and step.observation.shape == (4,)
    assert step.step_type == ts.StepType.FIRST


def test_box_actions_and_discrete_start():
    pend = make_env("Pendulum-v1")
    assert pend.action_spec().shape == (1,) and pend.action_spec().dtype == np.float32
    assert float(pend.action_spec().maximum[0]) == pytest.approx(2.0)
    pend.reset()
    assert pend.step(np.array([0.5], np.float32)).step_type == ts.StepType.MID

    inner = Countdown()
    env = GymnasiumEnv(inner)
    assert env.observation_spec().shape == (2, 3) and env.observation_spec().dtype == np.float32
    assert (env.action_spec().minimum, env.action_spec().maximum) == (-1, 1)
    env.reset()
    step = env.step(np.int64(-1))
    assert inner.actions == [-1] and isinstance(inner.actions[0], int)
    assert step.observation.dtype == np.float32


def test_tf_agents_validates_the_adapter():
    env_utils.validate_py_environment(make_env("CartPole-v1", seed=1), episodes=3)


def test_unsupported_space_and_unknown_env():
    with pytest.raises(QuarlError, match="Blackjack|Tuple"):
        make_env("Blackjack-v1")
    with pytest.raises(QuarlError, match="NoSuchEnv-v0"):
        make_env("NoSuchEnv-v0")
    with pytest.raises(QuarlError, match="CartPole-v77"):
        make_env("CartPole-v77")


def _first_observations(env, episodes=3):
    firsts = []
    step = env.reset()
    for _ in range(episodes):
        firsts.append(step.observation)
        while not step.is_last():
            step = env.step(np.int64(0))
        step = env.step(np.int64(0))  # auto reset
    return np.stack(firsts)


def test_seeded_reset_is_reproducible():
    a = _first_observations(make_env("CartPole-v1", seed=7))
    b = _first_observations(make_env("CartPole-v1", seed=7))
    c = _first_observations(make_env("CartPole-v1", seed=8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a[0], a[1])  # later episodes continue the seeded stream

    env = make_env("CartPole-v1")
    first = env.reset_with_seed(123).observation
    env.step(np.int64(1))
    again = env.reset_with_seed(123).observation
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, gym.make("CartPole-v1").reset(seed=123)[0])


def test_termination_has_discount_zero_and_auto_resets():
    env = make_env("CartPole-v1", seed=0)
    step = env.reset()
    n = 0
    while not step.is_last():
        step = env.step(np.int64(1))  # always push right: the pole falls within ~10-60 steps
        n += 1
        if not step.is_last():
            assert step.step_type == ts.StepType.MID and step.discount == 1.0
    assert n < 200
    assert step.discount == 0.0 and step.reward == 1.0
    after = env.step(np.int64(1))
    assert after.step_type == ts.StepType.FIRST and after.reward == 0.0 and after.discount == 1.0


def test_truncation_keeps_discount_and_bootstraps():
    env = make_env("CartPole-v1", seed=0, max_episode_steps=4, discount=0.97)
    env.reset()
    steps = [env.step(np.int64(k % 2)) for k in range(4)]  # alternating: never falls in 4 steps
    assert [int(s.step_type) for s in steps] == [1, 1, 1, 2]
    assert steps[-1].discount == pytest.approx(0.97) and steps[-1].reward == 1.0
    assert all(s.discount == pytest.approx(0.97) for s in steps[:-1])
    assert env.step(np.int64(0)).step_type == ts.StepType.FIRST


def test_custom_env_termination_and_run_episode():
    env = GymnasiumEnv(Countdown(terminate_at=5), seed=3)
    ret, obs = run_episode(env, lambda o: 0, seed=3)
    assert ret == 10.0 and obs.shape == (5, 2, 3) and obs.dtype == np.float32
    assert env.current_time_step().discount == 0.0
    ret2, obs2 = run_episode(env, lambda o: 1, seed=3)
    np.testing.assert_array_equal(obs[0], obs2[0])  # same seed, same start


def test_play_batched_is_play_in_lockstep_with_its_head_and_episode_log():
    """hil's fp32 replay (issue 13: one batched call a step instead of one call per step): the
    same returns and steps as playing each seed alone, every episode logged once."""
    import numpy as np
    from quarl_edge.measure.episodes import play
    from quarl_edge.core.envs import make_gym, output_to_action, play_batched
    w = np.random.default_rng(0).normal(size=(3, 1))          # a linear actor for Pendulum
    policy = lambda x: np.tanh(x @ w)                          # noqa: E731
    space = make_gym("Pendulum-v1").action_space
    seeds = [3, 1, 4, 1, 5]
    alone, obs, _ = play("Pendulum-v1", lambda o: output_to_action(policy(o[None])[0], space,
                                                                   "scale"), seeds)
    log = []
    batched, _ = play_batched("Pendulum-v1", policy, seeds, head="scale",
                              on_episode=lambda s, r, n: log.append((s, r, n)))
    assert list(batched) == alone
    assert sorted(log) == sorted(zip(seeds, alone, [200] * 5)) and len(obs) == 1000
    identity, _ = play_batched("Pendulum-v1", policy, seeds, head="identity")
    assert list(identity) != alone                             # the head is applied


def test_an_episode_depends_on_its_seed_alone():
    """hil plays the board one seed per call and the references all seeds in one call: each
    seed gets a new env, since Gymnasium's BipedalWalker keeps its Box2D world across
    reset(seed), so seed 1 after seed 0 in one env is another episode than seed 1 alone."""
    import numpy as np
    from quarl_edge.measure.episodes import play

    def still(obs):          # no torque: measured, seed 2 after 0 and 1 returns -91.79 in
        return np.zeros(4, np.float32)    # one env and -91.85 in a new one
    together, _, _ = play("BipedalWalker-v3", still, [0, 1, 2])
    alone = [play("BipedalWalker-v3", still, [s])[0][0] for s in (0, 1, 2)]
    assert together == alone
