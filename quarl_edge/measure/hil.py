"""Hardware-in-the-loop evaluation: Gymnasium runs on the host, the board chooses every action.

The same episodes (same seeds) are also played by the same model on tflite-runtime (the host
reference) and by the fp32 Keras network, so the board's return can be compared exactly.

A model with state (variable tensors: a recurrent policy's LSTM h and c, kept in the board's
arena between INFERs) has it zeroed at each episode's start on every side: RESET on the board
(protocol v4), reset() on tflite-runtime and TF Lite Micro, a zero state for the fp32 network
(rl/recurrent.py). The board is also RESET after each episode: its reply's boot id shows a
restart that went unannounced during the episode, which is then played again. The board's
actions are compared with the reference's step by step (`actions_equal_reference`)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np

from .. import tflite_host
from ..errors import BoardReset, QuarlError, missing_extra
from ..link.runner import RESET_REPLAYS, latency_summary
from ..link.session import BoardSession
from ..rl.envs import default_head, make_gym, play_batched
from ..rl.envs import output_to_action as to_action
from ..run import keras_call, load_keras, load_run, tflite_path
from ..targets.boards import Board
from ..files import locked, own, remove_stale, write_atomic
from .reference import TFLiteRuntime, has_state, host_reference, micro_reference


def play(env_id: str, act: Callable[[np.ndarray], object], seeds: list[int],
         on_episode: Callable[[int, float, int], None] | None = None,
         on_start: Callable[[], None] | None = None, on_end: Callable[[], None] | None = None):
    """Play one episode per seed; returns (returns, visited observations, actions taken).
    `on_start()` runs before each episode's first action (a recurrent policy's state reset),
    `on_end()` after its last step, before the episode is counted. Each seed is played in a
    new env, so that an episode depends on its seed alone: the board (one call per seed) and
    the references (one call for all) then play the same episodes, also where reset(seed)
    does not rebuild everything (Gymnasium's BipedalWalker keeps its Box2D world)."""
    returns, observations, actions = [], [], []
    for seed in seeds:
        env = gym.make(env_id)
        try:
            obs, _ = env.reset(seed=seed)
            if on_start:
                on_start()
            total, done, steps = 0.0, False, 0
            while not done:
                a = act(obs)
                observations.append(obs)
                actions.append(a)
                obs, r, terminated, truncated, _ = env.step(a)
                total += float(r)
                steps += 1
                done = terminated or truncated
        finally:
            env.close()
        if on_end:
            on_end()
        returns.append(total)
        if on_episode:
            on_episode(seed, total, steps)
    return returns, np.asarray(observations, dtype=np.float32), actions


def dequantized(y: np.ndarray, spec) -> np.ndarray:
    if spec.dtype == "float32":
        return y.astype(np.float32)
    return (y.astype(np.float32) - spec.zero_point) * spec.scale


def run_hil(run_dir: Path, scheme: str, board: Board, episodes: int, seed: int = 0,
            port: str | None = None, progress: bool = False, flasher: str | None = None,
            drive: str | None = None, results_dir: Path | None = None,
            build_dir: Path | None = None, env_id: str | None = None,
            head: str | None = None) -> dict:
    """Play `episodes` episodes of the run's env on seeds seed.. with the board choosing every
    action, then the same seeds with the same model on tflite-runtime, on TF Lite Micro (the
    reference the firmware is bit-exact with: board_equals_reference says whether the board's
    returns are its returns, episode by episode) and with the fp32 network. Writes results_dir
    (default RUN/results)/hil_<board>_<scheme>_seeds<first>-<last>.json and its per-episode log
    (.episodes.jsonl, named in the result) beside it, and copies both to
    hil_<board>_<scheme>.json / .episodes.jsonl (the latest); builds into build_dir (default RUN/build/<board>/<scheme>).
    `progress`: a bar per episode on stderr.

    `run_dir` may also be a bare MODEL.tflite: then `env_id` names the env, `scheme` is only
    the label of the results (MODEL's stem), there is no fp32 network to compare with
    (agreement is with tflite-runtime), and results go to MODEL's folder/results.
    `head`: how outputs become actions (envs.HEADS; default run.json's "action_head", else
    argmax for discrete actions and the output itself for Box actions)."""
    run_dir = Path(run_dir)
    if run_dir.suffix == ".tflite":
        if not run_dir.is_file():
            raise QuarlError(f"no model at {run_dir}")
        if env_id is None:
            raise QuarlError(f"{run_dir} is a bare model: say which env it plays with --env ID")
        meta, mpath, home = None, run_dir, run_dir.parent
    else:
        meta = load_run(run_dir)
        if env_id is not None and env_id != meta["env"]:
            raise QuarlError(f"{run_dir} was made for {meta['env']}, not {env_id}")
        env_id, mpath, home = meta["env"], tflite_path(run_dir, scheme), run_dir
        head = head or meta.get("action_head")
    seeds = list(range(seed, seed + episodes))
    env = make_gym(env_id)
    space = env.action_space
    head = head or default_head(space)
    _check_model_fits_env(mpath, env, head, run_dir / "run.json" if meta else mpath)
    env.close()
    stateful = has_state(mpath)
    # the run's fp32 network before any episode: a run whose Keras file is refused stops here
    fp32 = fp32_policy(run_dir) if meta is not None else None
    results_dir = Path(results_dir) if results_dir is not None else home / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    remove_stale(results_dir)
    # one result per board, model and seeds (two runs at once keep both: files.py), and the
    # latest of the board and model under the plain name hil_<board>_<model>.json
    key = f"hil_{board.id}_{scheme}_seeds{seed}-{seed + episodes - 1}"
    log_path = results_dir / f"{key}.episodes.jsonl"
    # written as episodes finish, renamed to log_path with the results: a failed run keeps the
    # previous results and log (and removes its own partial log)
    partial_log = own(log_path, "partial")
    from tqdm import tqdm
    bar = tqdm(total=4 * episodes, desc=f"hil {scheme} on {board.id}", unit="episode",
               disable=not progress, leave=False)
    log = partial_log.open("w")
    try:

        def log_episode(tag):
            def f(s, ret, steps):
                log.write(json.dumps({"who": tag, "seed": s, "return": ret, "steps": steps})
                          + "\n")
                log.flush()
                bar.set_postfix_str(f"{tag} seed {s}: {ret:.1f}")
                bar.update(1)
            return f

        costs: list[int] = []
        build_dir = Path(build_dir) if build_dir is not None else home / "build" / board.id / scheme
        with BoardSession(mpath, board, build_dir, port=port,
                          flasher=flasher, drive=drive) as s:
            in_spec, out_spec = s.info.inputs[0], s.info.outputs[0]
            if in_spec.dtype != "float32":
                raise QuarlError("HIL needs a model with float input (quantize with float I/O)")

            def board_act(obs):
                (y,), cost = s.link.infer([obs.reshape(in_spec.shape)])
                costs.append(cost)
                return to_action(dequantized(y, out_spec), space, head)

            replayed = 0
            reset = s.link.reset_state if stateful else None

            def board_episode(sd):   # an episode a board reset interrupted is played again
                nonlocal replayed
                for replay in range(RESET_REPLAYS + 1):
                    mark = len(costs)
                    try:
                        return play(env_id, board_act, [sd], log_episode("board"), on_start=reset,
                                    on_end=reset)
                    except BoardReset:
                        del costs[mark:]
                        if replay == RESET_REPLAYS:
                            raise
                        replayed += 1

            t0 = time.perf_counter()
            episodes_played = [board_episode(sd) for sd in seeds]
            wall = time.perf_counter() - t0
            returns = [r for e in episodes_played for r in e[0]]
            board_actions = [a for e in episodes_played for a in e[2]]
            memory = s.memory()
            unit = s.info.cost_unit
            link = {**s.link.report(), "replayed_episodes": replayed}

        host = host_reference(mpath)   # tflite-runtime (int8-acc: the head's accumulator readout)
        host_returns, _, host_actions = play(env_id,
                                             lambda o: to_action(host.run([o])[0], space, head),
                                             seeds, log_episode("tflite-runtime"),
                                             on_start=host.reset if stateful else None)
        # TF Lite Micro's reference kernels, which the firmware is bit-exact with: tflite-runtime's
        # own int8 kernels differ from them in places (int8 TANH and LOGISTIC round differently), so
        # the board's return must equal this one; TFLM cannot run fp16 and hybrid models (None).
        micro, micro_returns = micro_reference(mpath), None
        if micro is None:
            bar.update(episodes)
        else:
            micro_returns, _, micro_actions = play(
                env_id, lambda o: to_action(micro.run([o])[0], space, head), seeds,
                log_episode("tflm"), on_start=micro.reset if stateful else None)
        ref_actions = host_actions if micro is None else micro_actions

        episodes_obs = [e[1] for e in episodes_played]
        if meta is not None:
            # feed-forward: every seed's episode in lockstep, one batch a step
            if fp32.layers is None:
                fp32_returns = list(play_batched(env_id, fp32.fn, seeds, head=head,
                                                 on_episode=log_episode("fp32"))[0])
            else:                     # recurrent: stepped with its state, reset per episode
                fp32_returns, _, _ = play(env_id, lambda o: to_action(fp32(o), space, head),
                                          seeds, log_episode("fp32"), on_start=fp32.reset)
            fp32_actions = [to_action(q, space, head) for q in fp32.outputs(episodes_obs)]
        else:   # a bare model: the reference for agreement is the same model on tflite-runtime
            fp32_returns = None
            fp32_actions = []
            for obs_k in episodes_obs:
                if stateful:
                    host.reset()
                fp32_actions += [to_action(host.run([o])[0], space, head) for o in obs_k]
        if isinstance(space, gym.spaces.Discrete):
            agreement = float(np.mean([a == b for a, b in zip(board_actions, fp32_actions)]))
        else:  # continuous: 1 - mean normalised distance
            span = np.asarray(space.high - space.low, dtype=np.float64)
            dist = np.abs(np.asarray(board_actions) - np.asarray(fp32_actions)) / span
            agreement = float(1.0 - dist.mean())
        log.close()
        bar.close()
        out_path = results_dir / f"{key}.json"

        result = {
            "board": board.id,
            "model": scheme,
            "env": env_id,
            "episodes": episodes,
            "seeds": seeds,
            "returns": returns,
            "mean_return": float(np.mean(returns)),
            "std_return": float(np.std(returns)),
            "host_interpreter": tflite_host.runtime_version(),    # e.g. "litert 2.3.0"
            "host_mean_return": float(np.mean(host_returns)),
            "host_std_return": float(np.std(host_returns)),
            "micro_mean_return": None if micro_returns is None else float(np.mean(micro_returns)),
            "micro_std_return": None if micro_returns is None else float(np.std(micro_returns)),
            "board_equals_reference": returns == (micro_returns if micro_returns is not None
                                                  else host_returns),
            # the same action at every step of every episode (the reference's: TFLM, else
            # tflite-runtime), not only the same returns
            "actions_equal_reference": len(board_actions) == len(ref_actions) and all(
                np.array_equal(a, b) for a, b in zip(board_actions, ref_actions)),
            "stateful": stateful,
            "fp32_mean_return": None if fp32_returns is None else float(np.mean(fp32_returns)),
            "fp32_std_return": None if fp32_returns is None else float(np.std(fp32_returns)),
            "agreement": agreement,
            "agreement_with": "fp32" if fp32_returns is not None else "tflite-runtime",
            "action_head": head,
            "latency": latency_summary(costs, unit),
            "steps_per_s": len(board_actions) / wall if wall > 0 else None,
            "memory": memory,
            "link": link,      # what the link survived: retries, resyncs, bad frames, resets
            "results": str(out_path),
        "episodes_log": str(log_path),
        }
        text = json.dumps(result, indent=2) + "\n"
        write_atomic(out_path, text)
        partial_log.replace(log_path)
        with locked(results_dir):     # the latest pair (summary, log) comes from one run
            write_atomic(results_dir / f"hil_{board.id}_{scheme}.episodes.jsonl",
                         log_path.read_text())
            write_atomic(results_dir / f"hil_{board.id}_{scheme}.json", text)
        return result
    finally:
        bar.close()                  # (an error is then printed on a line of its own)
        log.close()
        partial_log.unlink(missing_ok=True)     # gone unless the run failed


def fp32_policy(run_dir: Path) -> "Fp32Policy":
    """The run's fp32 network: its Keras model (needs TensorFlow), or, in the core install
    without TensorFlow, its models/fp32.tflite on the host interpreter (float32 like the Keras
    model, to float rounding) when the run has one and keeps no state."""
    try:
        return Fp32Policy(load_keras(run_dir))
    except ImportError as e:
        model = Path(run_dir) / "models" / "fp32.tflite"
        if missing_extra(e) is None or not model.is_file() or has_state(model):
            raise
        return Fp32Policy(None, tflite=TFLiteRuntime(model))


class Fp32Policy:
    """A run's fp32 network as a policy: call it with one observation for the outputs.
    A recurrent run's one-step model (rl/recurrent.py) is stepped in numpy with its state, zero
    after reset(); a feed-forward network has no state (reset does nothing)."""

    def __init__(self, model, tflite: "TFLiteRuntime | None" = None):
        self.state = None
        if tflite is not None:          # a stateless fp32 .tflite (fp32_policy)
            self.layers = None
            self.fn = lambda x: np.stack([tflite.run([row])[0].reshape(-1) for row in x])
            return
        from ..rl.recurrent import is_one_step, layers_from_keras
        self.layers = layers_from_keras(model) if is_one_step(model) else None
        self.fn = None if self.layers is not None else keras_call(model)
        self.reset()

    def reset(self) -> None:
        if self.layers is not None:
            self.state = self.layers.zero_state()

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self.layers is None:
            return self.fn(np.asarray(obs)[None])[0]
        out, self.state = self.layers.step(np.asarray(obs)[None], self.state)
        return out[0]

    def outputs(self, episodes: list[np.ndarray]) -> np.ndarray:
        """The outputs on each episode's observations (the state reset at each episode)."""
        if self.layers is None:
            return self.fn(np.concatenate(episodes))
        out = []
        for obs in episodes:
            self.reset()
            out += [self(o) for o in obs]
        return np.stack(out)


def _check_model_fits_env(model: Path, env, head: str, where) -> None:
    """The model's input against the env's observations and its outputs against the action
    head, before any board is built; a mismatch names both shapes."""
    from .reference import check_env_fits_model, tflite_runtime_interpreter
    check_env_fits_model(env.spec.id, model, where)
    outputs = tflite_runtime_interpreter(model).get_output_details()
    if len(outputs) != 1:
        raise QuarlError(f"{model}: HIL needs one output (the actions), the model has "
                         f"{len(outputs)}")
    n_out = int(np.prod(outputs[0]["shape"]))
    space = env.action_space
    want = int(space.n) if hasattr(space, "n") else int(np.prod(space.shape))
    if n_out != want:
        kind = f"{want} discrete actions" if hasattr(space, "n") else \
            f"actions of shape {tuple(space.shape)}"
        raise QuarlError(f"{model} gives {n_out} outputs; {env.spec.id} has {kind} "
                         f"(head {head})")
