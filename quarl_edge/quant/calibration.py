"""Calibration data for the integer schemes: observations from epsilon-greedy rollouts of the
run's own greedy policy (a little epsilon covers states just off the greedy path), on seeds
CALIBRATION_SEED_BASE + k, which are distinct from the test seeds 0..N and the training
validation seeds 10_000 + k."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.nets import keras_runner, mlp_q_values
from ..core.run import load_keras, load_run
from ..core.envs import make_gym, output_to_action, outputs_to_actions

CALIBRATION_SEED_BASE = 20_000
CALIBRATION_EPSILON = 0.05


def collect_calibration(run_dir: Path, size: int = 1000, episodes: int = 10, seed: int = 0,
                        epsilon: float = CALIBRATION_EPSILON) -> np.ndarray:
    """`size` observations from epsilon-greedy rollouts of the run's Q-network (see
    rollout_observations)."""
    run = load_run(run_dir)
    return rollout_observations(run["env"], keras_runner(load_keras(run_dir)),
                                run.get("n_actions"),
                                size, episodes, seed, epsilon)


def rollout_observations(env_id: str, weights, n_actions: int | None = None, size: int = 1000,
                         episodes: int = 10, seed: int = 0,
                         epsilon: float = CALIBRATION_EPSILON) -> np.ndarray:
    """`size` observations from epsilon-greedy rollouts of a policy network.

    `weights`: the [W1, b1, ...] of a relu MLP Q-network, or any callable observation batch ->
    network outputs (Q-values, logits or a deterministic actor's actions; see
    envs.output_to_action). With probability `epsilon` a uniformly random action is taken
    instead. Runs at least `episodes` episodes (more if they give fewer than `size`
    observations), on seeds CALIBRATION_SEED_BASE + 1000 * seed + k, then subsamples `size`."""

    if size <= 0 or episodes <= 0:
        raise QuarlError(f"calibration needs positive size and episodes, got {size} and {episodes}")
    forward = weights if callable(weights) else (lambda x: mlp_q_values(weights, x))
    rng = np.random.default_rng(seed)
    env = make_gym(env_id)
    space = env.action_space
    discrete = hasattr(space, "n")

    def act(obs: np.ndarray):
        if rng.random() < epsilon:
            if discrete:
                return int(space.start) + int(rng.integers(int(space.n)))
            return rng.uniform(space.low, space.high).astype(space.dtype)
        return output_to_action(forward(obs[None])[0], space)

    def episode(episode_seed: int) -> np.ndarray:
        """The observations acted on in one episode from env.reset(seed=episode_seed)."""
        obs, _ = env.reset(seed=episode_seed)
        seen = []
        for _ in range(100_000):
            obs = np.asarray(obs, np.float32)
            seen.append(obs)
            a = act(obs)
            a = int(a) if discrete else np.asarray(a, np.float32).astype(space.dtype)
            obs, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                break
        return np.stack(seen)

    chunks, count, k = [], 0, 0
    while k < episodes or count < size:
        obs = episode(CALIBRATION_SEED_BASE + 1000 * seed + k)
        chunks.append(obs)
        count += len(obs)
        k += 1
    env.close()
    observations = np.concatenate(chunks).astype(np.float32)
    pick = np.sort(rng.choice(len(observations), size=size, replace=False))
    return observations[pick]


def recurrent_calibration(env_id: str, layers, size: int, episodes: int,
                          seed: int, epsilon: float) -> np.ndarray:
    """Observations [size, *obs] for calibrating the one-step model: epsilon-greedy episodes of
    the recurrent policy (its state reset at each start), kept in order, so the converter's
    calibration, which steps one interpreter through them, sees the states an episode reaches.
    Seeds and epsilon as rollout_observations'; at least `episodes` episodes, then the first
    `size` observations. `layers`: rl.recurrent.RecurrentLayers."""
    if size <= 0 or episodes <= 0:
        raise QuarlError(f"calibration needs positive size and episodes, got {size} and {episodes}")
    rng = np.random.default_rng(seed)
    env = make_gym(env_id)
    space = env.action_space
    chunks, count, k = [], 0, 0
    try:
        while k < episodes or count < size:
            obs, _ = env.reset(seed=CALIBRATION_SEED_BASE + 1000 * seed + k)
            state, done, seen = layers.zero_state(), False, []
            while not done:
                obs = np.asarray(obs, np.float32)
                seen.append(obs)
                out, state = layers.step(obs[None], state)   # the state follows every step
                a = int(outputs_to_actions(out, space)[0])
                if rng.random() < epsilon:
                    a = int(space.start) + int(rng.integers(int(space.n)))
                obs, _, terminated, truncated, _ = env.step(a)
                done = terminated or truncated
            chunks.append(np.stack(seen))
            count += len(seen)
            k += 1
    finally:
        env.close()
    return np.concatenate(chunks)[:size].astype(np.float32)
