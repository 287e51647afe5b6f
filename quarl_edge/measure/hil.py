"""Hardware-in-the-loop evaluation: Gymnasium runs on the host, the board chooses every action.

The same episodes (same seeds) are also played by the same model on tflite-runtime (the host
reference) and by the fp32 Keras network, so the board's return can be compared exactly."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np

from ..errors import BoardReset, QuarlError
from ..link.runner import RESET_REPLAYS, latency_summary
from ..link.session import BoardSession
from ..rl.envs import output_to_action as to_action
from ..run import load_keras, load_run, tflite_path
from ..targets.boards import Board
from .reference import host_reference


def play(env_id: str, act: Callable[[np.ndarray], object], seeds: list[int],
         on_episode: Callable[[int, float, int], None] | None = None):
    """Play one episode per seed; returns (returns, visited observations, actions taken)."""
    env = gym.make(env_id)
    returns, observations, actions = [], [], []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            total, done, steps = 0.0, False, 0
            while not done:
                a = act(obs)
                observations.append(obs)
                actions.append(a)
                obs, r, terminated, truncated, _ = env.step(a)
                total += float(r)
                steps += 1
                done = terminated or truncated
            returns.append(total)
            if on_episode:
                on_episode(seed, total, steps)
    finally:
        env.close()
    return returns, np.asarray(observations, dtype=np.float32), actions


def dequantized(y: np.ndarray, spec) -> np.ndarray:
    if spec.dtype == "float32":
        return y.astype(np.float32)
    return (y.astype(np.float32) - spec.zero_point) * spec.scale


def run_hil(run_dir: Path, scheme: str, board: Board, episodes: int, seed: int = 0,
            port: str | None = None, progress: bool = False, flasher: str | None = None,
            drive: str | None = None, results_dir: Path | None = None,
            build_dir: Path | None = None) -> dict:
    """Play `episodes` episodes of the run's env on seeds seed.. with the board choosing every
    action, then the same seeds with the same model on tflite-runtime and with the fp32
    network. Writes results_dir (default RUN/results)/hil_<board>_<scheme>.json and the
    per-episode log beside it; builds into build_dir (default RUN/build/<board>/<scheme>).
    `progress`: a bar per episode on stderr."""
    run_dir = Path(run_dir)
    meta = load_run(run_dir)
    env_id = meta["env"]
    mpath = tflite_path(run_dir, scheme)
    seeds = list(range(seed, seed + episodes))
    space = gym.make(env_id).action_space
    results_dir = Path(results_dir) if results_dir is not None else run_dir / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    log_path = results_dir / f"hil_{board.id}_{scheme}.episodes.jsonl"
    log = log_path.open("w")
    from tqdm import tqdm
    bar = tqdm(total=3 * episodes, desc=f"hil {scheme} on {board.id}", unit="episode",
               disable=not progress, leave=False)

    def log_episode(tag):
        def f(s, ret, steps):
            log.write(json.dumps({"who": tag, "seed": s, "return": ret, "steps": steps}) + "\n")
            log.flush()
            bar.set_postfix_str(f"{tag} seed {s}: {ret:.1f}")
            bar.update(1)
        return f

    costs: list[int] = []
    build_dir = Path(build_dir) if build_dir is not None else run_dir / "build" / board.id / scheme
    with BoardSession(mpath, board, build_dir, port=port,
                      flasher=flasher, drive=drive) as s:
        in_spec, out_spec = s.info.inputs[0], s.info.outputs[0]
        if in_spec.dtype != "float32":
            raise QuarlError("HIL needs a model with float input (quantize with float I/O)")

        def board_act(obs):
            (y,), cost = s.link.infer([obs.reshape(in_spec.shape)])
            costs.append(cost)
            return to_action(dequantized(y, out_spec), space)

        replayed = 0

        def board_episode(sd):   # an episode a board reset interrupted is played again
            nonlocal replayed
            for replay in range(RESET_REPLAYS + 1):
                mark = len(costs)
                try:
                    return play(env_id, board_act, [sd], log_episode("board"))
                except BoardReset:
                    del costs[mark:]
                    if replay == RESET_REPLAYS:
                        raise
                    replayed += 1

        t0 = time.perf_counter()
        episodes_played = [board_episode(sd) for sd in seeds]
        wall = time.perf_counter() - t0
        returns = [r for e in episodes_played for r in e[0]]
        visited = np.concatenate([e[1] for e in episodes_played])
        board_actions = [a for e in episodes_played for a in e[2]]
        memory = s.memory()
        unit = s.info.cost_unit
        link = {**s.link.report(), "replayed_episodes": replayed}

    host = host_reference(mpath)   # tflite-runtime (int8-acc: the head's accumulator readout)
    host_returns, _, _ = play(env_id, lambda o: to_action(host.run([o])[0], space), seeds,
                              log_episode("tflite-runtime"))

    keras_model = load_keras(run_dir)
    fp32_fn = _batched(keras_model)
    fp32_returns, _, _ = play(env_id, lambda o: to_action(fp32_fn(o[None])[0], space), seeds,
                              log_episode("fp32"))
    fp32_actions = [to_action(q, space) for q in fp32_fn(visited)]
    if isinstance(space, gym.spaces.Discrete):
        agreement = float(np.mean([a == b for a, b in zip(board_actions, fp32_actions)]))
    else:  # continuous: 1 - mean normalised distance
        span = np.asarray(space.high - space.low, dtype=np.float64)
        dist = np.abs(np.asarray(board_actions) - np.asarray(fp32_actions)) / span
        agreement = float(1.0 - dist.mean())
    log.close()
    bar.close()
    out_path = results_dir / f"hil_{board.id}_{scheme}.json"

    result = {
        "board": board.id,
        "model": scheme,
        "env": env_id,
        "episodes": episodes,
        "seeds": seeds,
        "returns": returns,
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "host_mean_return": float(np.mean(host_returns)),
        "host_std_return": float(np.std(host_returns)),
        "fp32_mean_return": float(np.mean(fp32_returns)),
        "fp32_std_return": float(np.std(fp32_returns)),
        "agreement": agreement,
        "latency": latency_summary(costs, unit),
        "steps_per_s": len(board_actions) / wall if wall > 0 else None,
        "memory": memory,
        "link": link,      # what the link survived: retries, resyncs, bad frames, resets
        "results": str(out_path),
    }
    tmp = out_path.with_name(out_path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out_path)
    return result


def _batched(keras_model):
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def f(x):
        return keras_model(x, training=False)

    return lambda x: f(tf.convert_to_tensor(np.asarray(x, dtype=np.float32))).numpy()
