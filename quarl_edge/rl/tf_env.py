"""Gymnasium environments as TF-Agents PyEnvironments (what the training loops step).

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

from ..core.errors import QuarlError
from ..core.envs import make_gym


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

