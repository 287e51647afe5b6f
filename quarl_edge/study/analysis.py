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

from ..measure.reference import tflite_runner
from ..core.envs import compare_outputs, make_gym, play_batched
from ..core.nets import keras_runner
from ..core.run import Run, load_keras, load_run

TEST_SEEDS = tuple(range(20))


def batch_runner(run1: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A per-observation runner (quantize.tflite_runner) -> a batch runner."""
    return lambda x: np.stack([run1(o) for o in x])


def evaluate_runner(env_id: str, runner: Callable[[np.ndarray], np.ndarray], seeds=TEST_SEEDS,
                    reference: Callable[[np.ndarray], np.ndarray] | None = None,
                    states: np.ndarray | None = None) -> dict:
    """Greedy return of a batch runner over `seeds`; with `reference` and `states` (the states the
    reference policy visits), also agreement and ties on those states."""
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
        path = Run(run_dir).model_path(scheme)
        res = evaluate_runner(env_id, batch_runner(tflite_runner(path)), seeds, reference, states)
        res["size"] = path.stat().st_size
        out[scheme] = res
    return out


# ------------------------------------------------------------------- weights and distributions
def _moments(w: np.ndarray) -> dict:
    """min, max, range, std and excess kurtosis (Fisher: 0 for a normal distribution)."""
    w = np.asarray(w, np.float64).reshape(-1)
    std = float(w.std())
    kurt = float(np.mean((w - w.mean()) ** 4) / std ** 4 - 3.0) if std > 0 else 0.0
    return {"n": int(w.size), "min": float(w.min()), "max": float(w.max()),
            "range": float(w.max() - w.min()), "std": std, "kurtosis": kurt,
            "abs_max": float(np.abs(w).max())}


def weight_stats(layers) -> dict:
    """Per-layer statistics of the kernels (weights) of an MLP given as train.mlp_layers
    (kernel, bias, activation) tuples or as a list of kernels, and of all kernels together:
    {"layers": [{"layer": i, "shape": [...], "min", "max", "range", "std", "kurtosis",
    "abs_max", "n", "bias_abs_max"}, ...], "all": {...}}. Biases are left out of the moments
    (QuaRL's weight distributions are the kernels'), their largest magnitude is given."""
    out = []
    kernels = []
    for i, layer in enumerate(layers):
        kernel, bias = (layer[0], layer[1]) if isinstance(layer, (tuple, list)) else (layer, None)
        kernel = np.asarray(kernel)
        kernels.append(kernel.reshape(-1))
        row = {"layer": i, "shape": list(kernel.shape), **_moments(kernel)}
        if bias is not None and np.size(bias):
            row["bias_abs_max"] = float(np.abs(bias).max())
        out.append(row)
    return {"layers": out, "all": _moments(np.concatenate(kernels))}


def weight_quantiles(layers, n: int = 101) -> list[float]:
    """`n` evenly spaced quantiles (0..100 %) of all kernel weights of an MLP: a compact,
    poolable description of the weight distribution (the report draws histograms from it)."""
    w = np.concatenate([np.asarray(layer[0] if isinstance(layer, (tuple, list)) else layer)
                        .reshape(-1) for layer in layers]).astype(np.float64)
    return [float(q) for q in np.quantile(w, np.linspace(0.0, 1.0, n))]


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def policy_kl(ref_logits: np.ndarray, logits: np.ndarray) -> float:
    """Mean KL(pi_fp32 || pi_quantized) in nats over a batch of states, for policies whose
    exported network gives the logits of a categorical distribution (discrete PPO). The
    quantized probabilities are floored at 1e-12 so that a probability quantized to exactly 0
    gives a large, finite divergence."""
    p = softmax(ref_logits)
    log_p = np.log(np.maximum(p, 1e-300))
    log_q = np.log(np.maximum(softmax(logits), 1e-12))
    return float(np.mean(np.sum(p * (log_p - log_q), axis=-1)))


def gaussian_policy_kl(ref_means: np.ndarray, means: np.ndarray, std: np.ndarray) -> float:
    """Mean KL(pi_fp32 || pi_quantized) in nats over a batch of states, for Gaussian policies
    with a state-independent std (continuous PPO): both are N(mean(s), diag(std^2)) with the
    same std, since only the mean is computed by the deployed network, so the divergence is
    sum_i (mean_fp32_i - mean_q_i)^2 / (2 std_i^2)."""
    diff = np.asarray(ref_means, np.float64) - np.asarray(means, np.float64)
    var = np.square(np.asarray(std, np.float64)).reshape(1, -1)
    return float(np.mean(np.sum(diff.reshape(len(diff), -1) ** 2 / (2 * var), axis=-1)))


def random_policy_return(env_id: str, seeds=TEST_SEEDS, rng_seed: int = 0) -> float:
    """Mean return of the uniformly random policy on `seeds` (the floor a trained policy's
    return is normalised against: (R - R_random) / (R_fp32 - R_random))."""
    space = make_gym(env_id).action_space
    rng = np.random.default_rng(rng_seed)
    if hasattr(space, "n"):
        policy = lambda x: rng.random((len(x), int(space.n)))  # noqa: E731  argmax: uniform
    else:
        low = np.asarray(space.low, np.float32).reshape(-1)
        high = np.asarray(space.high, np.float32).reshape(-1)
        policy = lambda x: rng.uniform(low, high, size=(len(x), low.size))  # noqa: E731
    returns, _ = play_batched(env_id, policy, seeds)
    return float(np.mean(returns))
