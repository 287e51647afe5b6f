"""Episodes of a policy on a board and on its references: the one evaluation path of `hil`,
`bench --episodes` and the study's board cells.

Gymnasium runs on the host; an actor chooses every action. The actors are the board (through a
BoardSession: `BoardPlayer`, which also keeps the cost of every inference and plays an episode
again when a board reset interrupted it), the same model on the host interpreters
(tflite-runtime's optimized and reference kernels, TF Lite Micro: `reference_episodes`) and the
run's fp32 network (`Fp32Policy`, `Fp32Episodes`). Every actor plays the same seeds, one new env
per seed, so their returns can be compared exactly (`same_returns`), and the board's actions are
compared with a reference's on the states the board visited (`agreement`, the one formula).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np

from ..core.errors import BoardReset, missing_extra
from ..link.runner import RESET_REPLAYS
from ..core.envs import make_gym, output_to_action
from ..core.nets import keras_call
from ..core.run import Run, load_keras
from .reference import TFLiteRuntime, has_state, host_reference, micro_reference
from ..rl.recurrent import is_one_step, layers_from_keras

EpisodeHook = Callable[[int, float, int], None]    # (seed, return, steps) after each episode


def play(env_id: str, act: Callable[[np.ndarray], object], seeds: list[int],
         on_episode: EpisodeHook | None = None,
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
    """A board's output tensor as float32 (int8/int16 outputs through their scale and zero
    point)."""
    if spec.dtype == "float32":
        return y.astype(np.float32)
    return (y.astype(np.float32) - spec.zero_point) * spec.scale


def agreement(space, actions: list, reference: list) -> float:
    """How far `actions` agree with `reference`'s actions on the same states: for discrete
    actions the share that are equal, for continuous ones 1 - mean |a - a_ref| / action range."""
    if isinstance(space, gym.spaces.Discrete) or hasattr(space, "n"):
        return float(np.mean([a == b for a, b in zip(actions, reference)]))
    span = np.asarray(space.high - space.low, dtype=np.float64)
    return float(1.0 - (np.abs(np.asarray(actions) - np.asarray(reference)) / span).mean())


def same_returns(returns: list, reference: list | None) -> bool:
    """The reference check: every episode's return equal to the reference's on the same seed."""
    return bool(returns == reference)


def actions_equal(actions: list, reference: list) -> bool:
    """The same action at every step of every episode, not only the same returns."""
    return len(actions) == len(reference) and all(
        np.array_equal(a, b) for a, b in zip(actions, reference))


def mean_std(returns: list | None) -> tuple[float | None, float | None]:
    """(mean, std) of returns as floats; (None, None) for no returns."""
    if returns is None:
        return None, None
    return float(np.mean(returns)), float(np.std(returns))


class BoardPlayer:
    """The board of a BoardSession choosing every action: each inference's cost is kept
    (`costs`, in the board's unit), a model with state is RESET at each episode's start and
    end, and an episode a board reset interrupted is played again (`replayed` counts them)."""

    def __init__(self, session, space, head: str, stateful: bool = False):
        self.session, self.space, self.head = session, space, head
        self.in_spec, self.out_spec = session.info.inputs[0], session.info.outputs[0]
        self.reset = session.link.reset_state if stateful else None
        self.costs: list[int] = []
        self.replayed = 0

    def act(self, obs):
        (y,), cost = self.session.link.infer([obs.reshape(self.in_spec.shape)])
        self.costs.append(cost)
        return output_to_action(dequantized(y, self.out_spec), self.space, self.head)

    def episode(self, env_id: str, seed: int, on_episode: EpisodeHook | None = None):
        """One seed's episode as play() returns it, replayed after a board reset."""
        for replay in range(RESET_REPLAYS + 1):
            mark = len(self.costs)
            try:
                return play(env_id, self.act, [seed], on_episode, on_start=self.reset,
                            on_end=self.reset)
            except BoardReset:
                del self.costs[mark:]
                if replay == RESET_REPLAYS:
                    raise
                self.replayed += 1

    def episodes(self, env_id: str, seeds: list[int], on_episode: EpisodeHook | None = None):
        """(returns, the visited observations per episode, actions) over `seeds`."""
        played = [self.episode(env_id, sd, on_episode) for sd in seeds]
        return ([r for e in played for r in e[0]], [e[1] for e in played],
                [a for e in played for a in e[2]])


def interpreter_episodes(ref, env_id: str, seeds: list[int], space, head: str,
                         stateful: bool = False, on_episode: EpisodeHook | None = None):
    """The same model on a host interpreter (host_reference, micro_reference) choosing every
    action on `seeds`, its state reset per episode: (returns, actions)."""
    returns, _, actions = play(env_id, lambda o: output_to_action(ref.run([o])[0], space, head),
                               seeds, on_episode, on_start=ref.reset if stateful else None)
    return returns, actions


def reference_episodes(model: Path, env_id: str, seeds: list[int], space, head: str,
                       kernels: tuple[str, ...] = ("tflite", "micro"),
                       on_episode: Callable[[str], EpisodeHook] | None = None) -> dict:
    """{name: (returns, actions)} of `model` on the host references named in `kernels`:
    "tflite" (tflite-runtime's optimized kernels), "tflite_ref" (its reference kernels) and
    "micro" (TF Lite Micro, the kernels the firmware is bit-exact with; None when TFLM cannot
    run the model: fp16, hybrid). `on_episode(name)` gives each one's episode hook."""
    stateful = has_state(model)
    makers = {"tflite": lambda: host_reference(model),
              "tflite_ref": lambda: host_reference(model, kernels="reference"),
              "micro": lambda: micro_reference(model)}
    tags = {"tflite": "tflite-runtime", "tflite_ref": "tflite-runtime-ref", "micro": "tflm"}
    out = {}
    for name in kernels:
        ref = makers[name]()
        hook = on_episode(tags[name]) if on_episode else None
        out[name] = None if ref is None else interpreter_episodes(
            ref, env_id, seeds, space, head, stateful, hook)
    return out


def fp32_policy(run_dir: Path) -> "Fp32Policy":
    """The run's fp32 network: its Keras model (needs TensorFlow), or, in the core install
    without TensorFlow, its models/fp32.tflite on the host interpreter (float32 like the Keras
    model, to float rounding) when the run has one and keeps no state."""
    try:
        return Fp32Policy(load_keras(run_dir))
    except ImportError as e:
        model = Run(run_dir).model_path("fp32")
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


class Fp32Episodes:
    """The reference network on a bench's seeds, played once per bench: its returns, and its
    actions on any states (for the agreement of a board's actions with it). For a run the
    reference is its fp32 network; for a bare .tflite (no run) the same model on TF Lite Micro
    (`for_model`)."""

    def __init__(self, forward, env_id: str, head: str, seeds: list[int], name: str = "fp32"):
        self.space = make_gym(env_id).action_space
        self.head, self.forward, self.name = head, forward, name
        self.returns, _, _ = play(env_id, lambda o: self.action(self.forward(o[None])[0]), seeds)

    @classmethod
    def for_run(cls, run_dir: Path, env_id: str, head: str, seeds: list[int]):
        return cls(fp32_policy(run_dir).fn, env_id, head, seeds)

    @classmethod
    def for_model(cls, model: Path, env_id: str, head: str, seeds: list[int]):
        ref = micro_reference(model) or host_reference(model)
        name = "tflm" if micro_reference(model) is not None else "tflite-runtime"
        return cls(lambda x: np.stack([np.asarray(ref.run([o])[0]).reshape(-1) for o in x]),
                   env_id, head, seeds, name)

    def action(self, output):
        return output_to_action(output, self.space, self.head)

    def agreement(self, states: np.ndarray, actions: list) -> float:
        return agreement(self.space, actions, [self.action(y) for y in self.forward(states)])


def board_episodes(session, model: Path, env_id: str, seeds: list[int],
                   fp32: Fp32Episodes) -> dict:
    """The episode columns of a bench row (and a study board cell): the board choosing every
    action on `seeds`, then the same model on tflite-runtime's optimized and reference kernels
    and on TF Lite Micro (the check: equal returns on every seed), and the agreement with
    `fp32`'s actions on the board's states."""
    board = BoardPlayer(session, fp32.space, fp32.head, stateful=has_state(model))
    returns, visited, actions = board.episodes(env_id, seeds)
    refs = reference_episodes(model, env_id, seeds, fp32.space, fp32.head,
                              kernels=("tflite", "tflite_ref", "micro"))
    host_returns, ref_returns = refs["tflite"][0], refs["tflite_ref"][0]
    micro_returns = refs["micro"][0] if refs["micro"] is not None else None
    mean, std = mean_std(returns)
    fp32_returns = fp32.returns if fp32.name == "fp32" else None
    return {"episodes": len(seeds), "seeds": list(seeds), "returns": returns,
            "mean_return": mean, "std_return": std, "action_head": fp32.head,
            "tflite_ref_returns": ref_returns,
            "tflite_ref_mean_return": mean_std(ref_returns)[0],
            "matches_tflite_ref": same_returns(returns, ref_returns),
            "tflite_returns": host_returns, "tflite_mean_return": mean_std(host_returns)[0],
            "matches_tflite": same_returns(returns, host_returns),
            "micro_returns": micro_returns, "micro_mean_return": mean_std(micro_returns)[0],
            "matches_reference": same_returns(returns, host_returns if micro_returns is None
                                              else micro_returns),
            "fp32_returns": fp32_returns, "fp32_mean_return": mean_std(fp32_returns)[0],
            "agreement": fp32.agreement(np.concatenate(visited), actions),
            "agreement_with": fp32.name}
