"""How much a quantized policy differs from its float network: return, action agreement, ties.

evaluate_models(run_dir, schemes, seeds) plays the greedy (deterministic) policy of each
RUN/models/<scheme>.tflite on tflite-runtime, one episode per test seed, and compares each with
the fp32 Keras network on the states the fp32 policy visits on those seeds:

  agreement  discrete: share of those states where the model picks fp32's action;
             continuous: 1 - mean |a - a_fp32| / (high - low)
  ties       discrete: share of states where the model's two best outputs are exactly equal
             (int8 Q-values can tie after output quantization; argmax then takes the first)
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

TEST_SEEDS = tuple(range(20))


def batch_runner(run1: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A per-observation runner (quantize.tflite_runner) -> a batch runner."""
    return lambda x: np.stack([run1(o) for o in x])


def keras_runner(model) -> Callable[[np.ndarray], np.ndarray]:
    """A Keras model as a batch runner (numpy in, numpy out), in numpy for plain MLPs."""
    from .train import mlp_forward, mlp_layers
    layers = mlp_layers(model)
    return lambda x: mlp_forward(layers, x)


def compare_outputs(ref: np.ndarray, out: np.ndarray, space) -> dict:
    """Agreement (and ties, for discrete spaces) of outputs `out` with reference outputs `ref`."""
    from .envs import outputs_to_actions
    a_ref, a = outputs_to_actions(ref, space), outputs_to_actions(out, space)
    if hasattr(space, "n"):
        top2 = np.sort(out, axis=1)[:, -2:] if out.shape[1] > 1 else None
        ties = float(np.mean(top2[:, 1] == top2[:, 0])) if top2 is not None else 0.0
        return {"agreement": float(np.mean(a == a_ref)), "ties": ties}
    span = np.asarray(space.high, np.float64) - np.asarray(space.low, np.float64)
    dist = np.abs(a.astype(np.float64) - a_ref) / span
    return {"agreement": float(1.0 - dist.mean()), "ties": None}


def evaluate_runner(env_id: str, runner: Callable[[np.ndarray], np.ndarray], seeds=TEST_SEEDS,
                    reference: Callable[[np.ndarray], np.ndarray] | None = None,
                    states: np.ndarray | None = None) -> dict:
    """Greedy return of a batch runner over `seeds`; with `reference` and `states` (the states the
    reference policy visits), also agreement and ties on those states."""
    from .envs import make_gym, play_batched
    returns, _ = play_batched(env_id, runner, seeds)
    res = {"returns": [float(r) for r in returns], "mean_return": float(np.mean(returns)),
           "std_return": float(np.std(returns)), "min_return": float(np.min(returns))}
    if reference is not None and states is not None:
        space = make_gym(env_id).action_space
        res.update(compare_outputs(reference(states), runner(states), space))
    return res


def evaluate_models(run_dir: Path, schemes, seeds=TEST_SEEDS) -> dict:
    """{"fp32-keras": ..., scheme: {...}} for each RUN/models/<scheme>.tflite, plus the action gap
    of the fp32 network on the visited states ("states", "gap_median" for discrete spaces)."""
    from .envs import make_gym, play_batched
    from .quantize import tflite_runner
    from .train import load_keras, load_run

    run_dir = Path(run_dir)
    env_id = load_run(run_dir)["env"]
    reference = keras_runner(load_keras(run_dir))
    ref_returns, states = play_batched(env_id, reference, seeds, record=True)
    out = {"env": env_id, "seeds": list(seeds), "states": int(len(states)),
           "fp32-keras": {"returns": [float(r) for r in ref_returns],
                          "mean_return": float(np.mean(ref_returns)),
                          "std_return": float(np.std(ref_returns)),
                          "min_return": float(np.min(ref_returns))}}
    space = make_gym(env_id).action_space
    q = reference(states)
    if hasattr(space, "n") and q.shape[1] > 1:
        top2 = np.sort(q, axis=1)[:, -2:]
        out["gap_median"] = float(np.median(top2[:, 1] - top2[:, 0]))
        out["output_range"] = [float(q.min()), float(q.max())]
    for scheme in schemes:
        path = run_dir / "models" / f"{scheme}.tflite"
        res = evaluate_runner(env_id, batch_runner(tflite_runner(path)), seeds, reference, states)
        res["size"] = path.stat().st_size
        out[scheme] = res
    return out
