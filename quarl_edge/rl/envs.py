"""Gymnasium environments and policies as network outputs, without TF-Agents: making an env
(with install hints for the optional ones), turning a policy network's outputs into actions,
comparing two policies' outputs, and playing many seeded episodes in lockstep (`play_batched`).
The TF-Agents adapter the training loops step is rl/tf_env.py."""
from __future__ import annotations

from typing import Callable

import gymnasium as gym
import numpy as np

from ..errors import QuarlError


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


def compare_outputs(ref: np.ndarray, out: np.ndarray, space) -> dict:
    """Agreement (and ties, for discrete spaces) of outputs `out` with reference outputs `ref`."""
    a_ref, a = outputs_to_actions(ref, space), outputs_to_actions(out, space)
    if hasattr(space, "n"):
        top2 = np.sort(out, axis=1)[:, -2:] if out.shape[1] > 1 else None
        ties = float(np.mean(top2[:, 1] == top2[:, 0])) if top2 is not None else 0.0
        return {"agreement": float(np.mean(a == a_ref)), "ties": ties}
    span = np.asarray(space.high, np.float64) - np.asarray(space.low, np.float64)
    dist = np.abs(a.astype(np.float64) - a_ref) / span
    return {"agreement": float(1.0 - dist.mean()), "ties": None}


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
