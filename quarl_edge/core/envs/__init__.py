"""Gymnasium environments and policies as network outputs, without TF-Agents: making an env
(with install hints for the optional ones), turning a policy network's outputs into actions,
comparing two policies' outputs, and playing many seeded episodes in lockstep (`play_batched`).
The TF-Agents adapter the training loops step is rl/tf_env.py."""
from __future__ import annotations

from typing import Callable

import gymnasium as gym
import numpy as np

from ..errors import QuarlError
from ..names import HEADS
from . import catch  # noqa: F401  (registers QuarlEdge/Catch-v0, a small pixel task)
from . import masked  # noqa: F401  (registers QuarlEdge/CartPoleNoVel-v0, velocities masked)
from . import minatar  # noqa: F401  (registers QuarlEdge/MinAtar-<Game>-v0; needs `minatar`)


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
    if env_id in minatar.ENV_IDS:
        return f"MinAtar environments: {minatar.INSTALL}"
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


def space_info(space: gym.Space) -> dict:
    """An action space as run.json's "action_space": discrete n and start, or a box's shape
    and bounds."""
    if hasattr(space, "n"):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    return {"type": "box", "shape": list(space.shape), "low": np.asarray(space.low).tolist(),
            "high": np.asarray(space.high).tolist()}


# ----------------------------------------------------------------- policies as network outputs


def default_head(space: gym.Space) -> str:
    """How a network's outputs become actions when nothing says otherwise: argmax for discrete
    actions, the output itself (clipped to the bounds) for Box actions."""
    return "argmax" if isinstance(space, gym.spaces.Discrete) else "identity"


def output_to_action(output: np.ndarray, space: gym.Space, head: str | None = None):
    """A policy network's output -> an environment action, by `head` (default_head(space)):

    argmax    the index of the largest output (Q-values or logits), shifted by the space's start
    identity  the output is the action (a deterministic actor), clipped to the bounds
    scale     the output is in [-1, 1] (a tanh actor) and is rescaled to [low, high]"""
    action = outputs_to_actions(np.asarray(output)[None], space, head)[0]
    return int(action) if isinstance(space, gym.spaces.Discrete) else action


def outputs_to_actions(outputs: np.ndarray, space: gym.Space, head: str | None = None):
    """output_to_action over a batch [k, n_out] -> [k] ints or [k, *shape] floats."""
    head = head or default_head(space)
    outputs = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    if head == "argmax":
        if not isinstance(space, gym.spaces.Discrete):
            raise QuarlError(f"the argmax head needs discrete actions; the env has {space}")
        return outputs.argmax(axis=1) + int(space.start)
    if isinstance(space, gym.spaces.Discrete):
        raise QuarlError(f"the {head} head needs Box actions; the env has {space}")
    x = outputs.reshape((-1, *space.shape))
    if head == "scale":
        x = space.low + 0.5 * (np.clip(x, -1.0, 1.0) + 1.0) * (space.high - space.low)
    elif head != "identity":
        raise QuarlError(f"unknown action head {head!r}; known: {', '.join(HEADS)}")
    return np.clip(x, space.low, space.high).astype(space.dtype)


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
                 record: bool = False, max_steps: int = 100_000, head: str | None = None,
                 on_episode: Callable[[int, float, int], None] | None = None):
    """One episode per seed, all in lockstep: `policy` maps a batch of observations [k, *obs]
    to a batch of network outputs [k, n_out] (turned into actions by `outputs_to_actions` with
    `head`). `on_episode(seed, return, steps)` as each episode ends (in the order they end).

    Returns the undiscounted returns (float64 [len(seeds)]) and, with `record`, the visited
    observations [n, *obs] (episode after episode, in seed order)."""
    seeds = list(seeds)
    envs = [make_gym(env_id) for _ in seeds]
    space = envs[0].action_space
    obs = [np.asarray(e.reset(seed=int(s))[0], dtype=np.float32) for e, s in zip(envs, seeds)]
    returns = np.zeros(len(seeds))
    steps = [0] * len(seeds)
    alive = list(range(len(seeds)))
    visited: list[list[np.ndarray]] = [[] for _ in seeds]
    try:
        for _ in range(max_steps):
            if not alive:
                break
            batch = np.stack([obs[i] for i in alive])
            actions = outputs_to_actions(policy(batch), space, head)
            still = []
            for i, a in zip(alive, actions):
                if record:
                    visited[i].append(obs[i])
                o, r, terminated, truncated, _ = envs[i].step(a.item() if np.ndim(a) == 0 else a)
                returns[i] += float(r)
                steps[i] += 1
                obs[i] = np.asarray(o, dtype=np.float32)
                if not (terminated or truncated):
                    still.append(i)
                elif on_episode:
                    on_episode(seeds[i], float(returns[i]), steps[i])
            alive = still
    finally:
        for e in envs:
            e.close()
    if not record:
        return returns, None
    flat = [o for v in visited for o in v]
    return returns, np.stack(flat).astype(np.float32)
