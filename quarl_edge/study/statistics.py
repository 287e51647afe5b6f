"""The statistics of the report: normalised return loss, Spearman's rank correlation and its
permutation p-value, and the return at which Gymnasium calls an environment solved.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np


def reward_threshold(env_id: str) -> float | None:
    """The return at which Gymnasium calls `env_id` solved (its registered reward_threshold);
    None when the env has none (Pendulum-v1) or is not registered here."""
    try:
        return gym.spec(env_id).reward_threshold
    except gym.error.Error:
        return None


def normalised_loss(r_fp32: float, r_q: float, r_random: float | None) -> float | None:
    """(R_fp32 - R_q) / |R_fp32 - R_random|; None when the run did not learn (fp32 <= random)."""
    if r_random is None or r_fp32 is None or r_q is None:
        return None
    gain = r_fp32 - r_random
    if not gain > 0:
        return None
    return float((r_fp32 - r_q) / abs(gain))


def spearman(x, y) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None if either is constant."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=float)
    for v in np.unique(a):  # ties share their mean rank
        m = a == v
        ranks[m] = ranks[m].mean()
    return ranks


def permutation_p(x, y, rho: float, n: int = 10_000, seed: int = 0) -> float:
    """Two-sided permutation p-value of a Spearman correlation `rho`."""
    rng = np.random.default_rng(seed)
    rx, ry = _ranks(np.asarray(x, float)), _ranks(np.asarray(y, float))
    count = 0
    for _ in range(n):
        r = np.corrcoef(rx, rng.permutation(ry))[0, 1]
        count += abs(r) >= abs(rho) - 1e-12
    return (count + 1) / (n + 1)
