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
    """0-based ranks; ties share their mean rank, (first + last) / 2 of their run in sorted
    order (the mean of consecutive integers, exact). Without a loop over the values: the
    report's bootstraps rank 4,000 resamples per interval."""
    order = np.argsort(a, kind="mergesort")
    s = a[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])   # each NaN is a run of its own
    ends = np.r_[starts[1:], len(a)]
    ranks = np.empty(len(a))
    ranks[order] = np.repeat((starts + ends - 1) / 2.0, ends - starts)
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


# --- how sure we are: a bootstrap over training seeds, and the verdict an interval gives ----------

BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0      # fixed: the same rows give the same intervals, so the report reproduces
LEVEL = 0.95


def seed_bootstrap(groups, statistic=None, n_boot: int = BOOTSTRAP_RESAMPLES,
                   seed: int = BOOTSTRAP_SEED, level: float = LEVEL) -> dict:
    """A percentile bootstrap interval over training seeds.

    `groups`: one list per task of that task's per-seed items (a training seed is the unit
    that is resampled, never an episode). Each resample draws, within every task, as many seeds
    as it has, with replacement, and applies `statistic` to all drawn items (default: the mean
    of numbers). Returns {"effect": the statistic of the data, "ci": [lo, hi] or None,
    "n_seeds": items over all tasks, "seeds_per_task": [per task], "note": why no interval}.

    No interval when a task has a single seed (its seed-to-seed spread is unknown, and the
    interval would pretend it is zero) or the statistic is undefined in more than 5 % of the
    resamples (e.g. Spearman's rho when the drawn seeds are all the same run)."""
    statistic = statistic or (lambda items: float(np.mean(items)))
    groups = [list(g) for g in groups if len(g)]
    per_task = [len(g) for g in groups]
    out = {"effect": None, "ci": None, "n_seeds": sum(per_task), "seeds_per_task": per_task,
           "note": ""}
    if not groups:
        out["note"] = "no data"
        return out
    out["effect"] = statistic([x for g in groups for x in g])
    if min(per_task) < 2:
        out["note"] = "one training seed" + (" in a task" if len(groups) > 1 else "") + \
                      ": no interval"
        return out
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_boot):
        drawn = [g[i] for g in groups for i in rng.integers(0, len(g), len(g))]
        v = statistic(drawn)
        if v is not None and np.isfinite(v):
            values.append(v)
    if len(values) < level * n_boot:   # dropping that many resamples would bias the interval
        out["note"] = (f"the statistic is undefined in more than {1 - level:.0%} of the "
                       "resamples: no interval")
        return out
    a = (1 - level) / 2
    lo, hi = np.quantile(values, [a, 1 - a])
    out["ci"] = [float(lo), float(hi)]
    return out


def interval_verdict(ci, bound: float, agree: str) -> str:
    """The verdict an interval gives against `bound`: with agree="below", "agree" when the whole
    interval is below the bound, "disagree" when it is wholly above; agree="above" the other way
    round; "inconclusive" when the interval straddles the bound or there is no interval."""
    if ci is None:
        return "inconclusive"
    lo, hi = ci
    below, above = hi < bound, lo > bound
    if agree == "below":
        return "agree" if below else "disagree" if above else "inconclusive"
    if agree == "above":
        return "agree" if above else "disagree" if below else "inconclusive"
    raise ValueError(f"agree must be 'below' or 'above', not {agree!r}")
