"""Gymnasium environments as TF-Agents PyEnvironments.

tf-agents 0.19 only wraps the old 4-tuple `gym` API, so this module adapts the Gymnasium API:

- specs come from the spaces: a `Box` becomes a float32 array spec, a `Discrete(n)` a scalar
  int64 spec with bounds [start, start + n - 1];
- `terminated` becomes `ts.termination` (discount 0: no bootstrapping past the end),
  `truncated` becomes `ts.truncation` (discount 1: the value of the cut-off state still counts);
- a step after a LAST time step resets the environment (the action is ignored), as TF-Agents'
  drivers expect;
- `seed(s)` makes the next reset call `env.reset(seed=s)`. Later resets continue Gymnasium's
  random stream, so `make_env(id, seed=s)` gives a reproducible sequence of episodes, and
  evaluation can call `seed(k)` before episode k for a fixed set of start states.
"""
from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

from .errors import QuarlError


def _space_to_spec(space: gym.Space, name: str) -> array_spec.BoundedArraySpec:
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return array_spec.BoundedArraySpec((), np.int64, minimum=start,
                                           maximum=start + int(space.n) - 1, name=name)
    if isinstance(space, gym.spaces.Box):
        f32 = np.finfo(np.float32)
        low = np.clip(np.asarray(space.low, np.float64), f32.min, f32.max).astype(np.float32)
        high = np.clip(np.asarray(space.high, np.float64), f32.min, f32.max).astype(np.float32)
        return array_spec.BoundedArraySpec(space.shape, np.float32, minimum=low, maximum=high,
                                           name=name)
    raise QuarlError(f"unsupported {name} space {space}: only Box and Discrete are supported")


class GymnasiumEnv(py_environment.PyEnvironment):
    """A Gymnasium `Env` seen as a TF-Agents `PyEnvironment` (unbatched)."""

    def __init__(self, env: gym.Env, seed: int | None = None, discount: float = 1.0):
        super().__init__(handle_auto_reset=True)
        self.gym_env = env
        self._discount = np.float32(discount)
        self._observation_spec = _space_to_spec(env.observation_space, "observation")
        self._action_spec = _space_to_spec(env.action_space, "action")
        self._discrete = isinstance(env.action_space, gym.spaces.Discrete)
        self._next_seed = seed
        if seed is not None:
            env.action_space.seed(seed)

    # -- specs
    def observation_spec(self) -> array_spec.BoundedArraySpec:
        return self._observation_spec

    def action_spec(self) -> array_spec.BoundedArraySpec:
        return self._action_spec

    # -- seeding
    def seed(self, seed: int | None) -> None:
        """The next reset starts from `env.reset(seed=seed)`."""
        self._next_seed = None if seed is None else int(seed)

    def reset_with_seed(self, seed: int) -> ts.TimeStep:
        """Start an episode from `env.reset(seed=seed)` (for reproducible evaluation)."""
        self.seed(seed)
        return self.reset()

    # -- dynamics
    def _obs(self, obs: Any) -> np.ndarray:
        return np.asarray(obs, dtype=self._observation_spec.dtype)

    def _reset(self) -> ts.TimeStep:
        seed, self._next_seed = self._next_seed, None
        obs, _info = self.gym_env.reset(seed=seed)
        return ts.restart(self._obs(obs))

    def _step(self, action) -> ts.TimeStep:
        action = np.asarray(action)
        action = int(action) if self._discrete else action.astype(self.gym_env.action_space.dtype)
        obs, reward, terminated, truncated, _info = self.gym_env.step(action)
        obs, reward = self._obs(obs), np.float32(reward)
        if terminated:
            return ts.termination(obs, reward)
        if truncated:
            return ts.truncation(obs, reward, self._discount)
        return ts.transition(obs, reward, self._discount)

    def render(self, mode: str = "rgb_array"):
        return self.gym_env.render()

    def close(self) -> None:
        self.gym_env.close()


# The environments of the classic study (studies/classic.toml); LunarLander needs box2d.
KNOWN_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3", "Pendulum-v1",
              "MountainCarContinuous-v0", "LunarLanderContinuous-v3")
# The MuJoCo tasks (studies/mujoco.toml, SAC and TD3 defaults in train.DEFAULTS): they need the
# optional `mujoco` extra of pyproject.toml (scripts/setup.sh installs it).
MUJOCO_ENVS = ("HalfCheetah-v5", "Hopper-v5")
MUJOCO_INSTALL = "pip install -e '.[mujoco]' (or: pip install mujoco==3.17.0 imageio==2.38.1)"
BOX2D_INSTALL = "pip install box2d==2.3.10"


def install_hint(env_id: str) -> str:
    """How to install what the Gymnasium environment `env_id` needs beyond the default
    dependencies ("" if nothing known), from its registered entry point; no import of the env."""
    try:
        entry = str(gym.spec(env_id).entry_point)
    except gym.error.Error:
        return ""
    if entry.startswith("gymnasium.envs.mujoco"):
        return f"MuJoCo environments need the mujoco extra: {MUJOCO_INSTALL}"
    if entry.startswith("gymnasium.envs.box2d"):
        return f"Box2D environments: {BOX2D_INSTALL}"
    return ""


def missing_dependency_error(env_id: str, e: BaseException) -> QuarlError:
    hint = install_hint(env_id)
    return QuarlError(f"Gymnasium environment {env_id!r} needs a package that is not installed "
                      f"({e})" + (f"; {hint}" if hint else ""))


def make_gym(env_id: str, **kwargs) -> gym.Env:
    """`gymnasium.make` with unknown ids turned into a QuarlError naming the id, and missing
    optional packages (mujoco, imageio, box2d) into one saying what to install."""
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as e:  # e.g. MuJoCo envs without the mujoco wheel
        raise missing_dependency_error(env_id, e) from None
    except ImportError as e:  # e.g. mujoco installed but imageio missing (mujoco_rendering)
        raise missing_dependency_error(env_id, e) from None
    except gym.error.Error as e:  # NameNotFound, VersionNotFound, NamespaceNotFound, ...
        raise QuarlError(f"unknown Gymnasium environment {env_id!r}: {e}; known (with tuned "
                         f"defaults): {', '.join(KNOWN_ENVS + MUJOCO_ENVS)}; any registered "
                         "Gymnasium id works") from None


def make_env(env_id: str, seed: int | None = None, discount: float = 1.0,
             **kwargs) -> GymnasiumEnv:
    """A TF-Agents PyEnvironment for Gymnasium `env_id`; its first reset uses `seed`."""
    return GymnasiumEnv(make_gym(env_id, **kwargs), seed=seed, discount=discount)


def run_episode(env: GymnasiumEnv, act: Callable[[np.ndarray], int], seed: int,
                max_steps: int = 100_000) -> tuple[float, np.ndarray]:
    """One episode from `env.reset(seed=seed)` choosing actions with `act(observation)`.

    Returns the undiscounted return and the observations acted on, [steps, *obs_shape]."""
    step = env.reset_with_seed(seed)
    total, observations = 0.0, []
    for _ in range(max_steps):
        observations.append(step.observation)
        step = env.step(np.asarray(act(step.observation), dtype=env.action_spec().dtype))
        total += float(step.reward)
        if step.is_last():
            break
    return total, np.stack(observations)


# ----------------------------------------------------------------- policies as network outputs
def output_to_action(output: np.ndarray, space: gym.Space):
    """A policy network's output -> an environment action.

    Discrete spaces: argmax of the outputs (Q-values or logits), shifted by the space's start.
    Box spaces: the output is the action itself (a deterministic actor), clipped to the bounds."""
    out = np.asarray(output, dtype=np.float64).reshape(-1)
    if isinstance(space, gym.spaces.Discrete):
        return int(np.argmax(out)) + int(space.start)
    return np.clip(out.reshape(space.shape), space.low, space.high).astype(space.dtype)


def outputs_to_actions(outputs: np.ndarray, space: gym.Space) -> np.ndarray:
    """output_to_action over a batch [k, n_out] -> [k] ints or [k, *shape] floats."""
    outputs = np.asarray(outputs, dtype=np.float64)
    if isinstance(space, gym.spaces.Discrete):
        return outputs.argmax(axis=1) + int(space.start)
    return np.clip(outputs.reshape((-1, *space.shape)), space.low, space.high).astype(space.dtype)


def play_batched(env_id: str, policy: Callable[[np.ndarray], np.ndarray], seeds,
                 record: bool = False, max_steps: int = 100_000):
    """One episode per seed, all in lockstep: `policy` maps a batch of observations [k, *obs]
    to a batch of network outputs [k, n_out] (turned into actions by `outputs_to_actions`).

    Returns the undiscounted returns (float64 [len(seeds)]) and, with `record`, the visited
    observations [n, *obs] (episode after episode, in seed order)."""
    seeds = list(seeds)
    envs = [make_gym(env_id) for _ in seeds]
    space = envs[0].action_space
    obs = [np.asarray(e.reset(seed=int(s))[0], dtype=np.float32) for e, s in zip(envs, seeds)]
    returns = np.zeros(len(seeds))
    alive = list(range(len(seeds)))
    visited: list[list[np.ndarray]] = [[] for _ in seeds]
    try:
        for _ in range(max_steps):
            if not alive:
                break
            batch = np.stack([obs[i] for i in alive])
            actions = outputs_to_actions(policy(batch), space)
            still = []
            for i, a in zip(alive, actions):
                if record:
                    visited[i].append(obs[i])
                o, r, terminated, truncated, _ = envs[i].step(a.item() if np.ndim(a) == 0 else a)
                returns[i] += float(r)
                obs[i] = np.asarray(o, dtype=np.float32)
                if not (terminated or truncated):
                    still.append(i)
            alive = still
    finally:
        for e in envs:
            e.close()
    if not record:
        return returns, None
    flat = [o for v in visited for o in v]
    return returns, np.stack(flat).astype(np.float32)
