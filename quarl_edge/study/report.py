"""A study's results as a report: Markdown and self-contained HTML (no external CSS or script;
the figures are PNG files next to it), with a verdict on each of QuaRL's claims computed from
the rows.

    quarl-edge report RESULTS.jsonl [--out DIR] [--tolerance 0.05]

Writes DIR/report.md, DIR/report.html and the figures (matplotlib, Agg backend):

    return_vs_precision.png  greedy return per scheme for each (algo, env), one point per seed
    return_vs_bits.png       the n-bit sweep: return vs bits per mode
    weight_histograms.png    the kernels' weight distribution per algorithm (pooled over runs)
    model_size.png           .tflite size per scheme for each (algo, env)

Normalised return loss. A quantized policy's loss is measured against the fp32 network on the
same evaluation seeds, in units of what training gained over a uniformly random policy:

    loss = (R_fp32 - R_q) / |R_fp32 - R_random|

so 0 is no loss, 1 means the quantized policy is as bad as random, and the measure works for
negative returns (Pendulum) and for any reward scale. Runs whose fp32 return does not beat the
random policy are "not learned" and left out of the claims. A loss <= --tolerance counts as no
loss.

The claims (Krishnan et al., Quantized Reinforcement Learning):
  1. 6-8 bit policies lose no reward: int8 / dyn-int8 / qat-int8 / qat-distill-int8 cells and
     sweep points with 6..8 bits. Agree if >= 90 % of them are within the tolerance, disagree
     if < 50 %.
  2. QAT >= PTQ (and often >= fp32), for two QAT methods, each counted on its own: RL-loop QAT
     (qat-int8, DQN) and QAT by on-policy distillation from the fp32 network
     (qat-distill-int8, every algorithm), each vs int8 of the same run. The verdict is the
     RL-loop method's (QuaRL fine-tunes in the RL loop): agree if qat-int8 is within the
     tolerance of int8 or better in >= 90 % of the runs, disagree if < 50 %; the evidence gives
     the distillation method's counts and its own verdict. Without any RL-loop pair, the
     verdict is the distillation method's, and the evidence says so.
  3. Wider weight distributions quantize worse: Spearman rank correlation, over learned runs,
     between the kernels' weight range and the loss (int8 cells; separately the mean loss over
     the sweep's points), with a permutation p-value. Agree if rho > 0 with p < 0.05, disagree
     if rho < 0 with p < 0.05, otherwise inconclusive; fewer than 4 runs, or no variation in
     the loss, is insufficient data.

Tie remedies (quarl_edge/quant/remedies.py) for argmax heads: per task, int8 against int8-centred,
int8-acc and int8-i16head (mean return over seeds, ties, agreement); the winner is the highest
mean return (several when equal; "all equal" when no scheme differs).
"""
from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..errors import QuarlError
from .grid import latest_rows, read_results

SCHEME_ORDER = ["fp32", "fp16", "dyn-int8", "int8", "int16x8", "qat-int8", "qat-distill-int8",
                "int8-centred", "int8-acc", "int8-centred-acc", "int8-i16head"]
REMEDIES = ("int8-centred", "int8-acc", "int8-centred-acc", "int8-i16head")   # quarl_edge/quant/remedies.py
EIGHT_BIT = ("int8", "dyn-int8", "qat-int8", "qat-distill-int8")
QAT_METHODS = {"qat-int8": "RL-loop QAT", "qat-distill-int8": "distillation QAT"}
AGREE_SHARE, DISAGREE_SHARE = 0.9, 0.5


# ------------------------------------------------------------------------------ the numbers
def _task(r: dict) -> tuple[str, str]:
    return r["algo"], r["env"]


def _task_name(t: tuple[str, str]) -> str:
    return f"{t[0].upper()} {t[1]}"


def reward_threshold(env_id: str) -> float | None:
    """The return at which Gymnasium calls `env_id` solved (its registered reward_threshold);
    None when the env has none (Pendulum-v1) or is not registered here."""
    import gymnasium as gym
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


class Results:
    """The rows of a results file, deduplicated (last row per key), grouped for the report."""

    def __init__(self, rows: list[dict]):
        latest = latest_rows(rows)
        self.all = list(latest.values())
        self.runs = {(r["algo"], r["env"], r["seed"]): r for r in self.all
                     if r["kind"] == "run" and r.get("status") == "ok"}
        self.cells = [r for r in self.all if r["kind"] == "cell"]
        self.ok_cells = [r for r in self.cells if r.get("status") == "ok"]
        self.sweep = [r for r in self.all if r["kind"] == "sweep" and r.get("status") == "ok"]
        self.other = [r for r in self.all if r.get("status") not in ("ok",)]
        self.study = next((r.get("study") for r in self.all if r.get("study")), None)
        tasks = {_task(r) for r in self.all if r["kind"] in ("run", "cell", "sweep")}
        self.tasks = sorted(tasks)

    def run_of(self, r: dict) -> dict | None:
        return self.runs.get((r["algo"], r["env"], r["seed"]))

    def loss(self, r: dict) -> float | None:
        run = self.run_of(r)
        if run is None or run.get("eval_seeds") != r.get("eval_seeds"):
            # a sweep may use other seeds: its own fp32 row is then the reference
            ref = r.get("fp32_return")
            if r["kind"] == "sweep":
                ref = self._sweep_fp32(r)
            return normalised_loss(ref, r.get("mean_return"), run and run.get("random_return"))
        return normalised_loss(run["fp32_return"], r.get("mean_return"), run.get("random_return"))

    def _sweep_fp32(self, r: dict) -> float | None:
        for s in self.sweep:
            if (s["algo"], s["env"], s["seed"], s["mode"]) == (r["algo"], r["env"], r["seed"], "fp32"):
                return s["mean_return"]
        return r.get("fp32_return")

    def learned(self, r: dict) -> bool:
        run = self.run_of(r)
        return bool(run and run.get("random_return") is not None
                    and run["fp32_return"] > run["random_return"])


def _fmt(x, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    return f"{x:,.{digits}f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def _share_verdict(ok: int, n: int) -> str:
    if n == 0:
        return "insufficient data"
    share = ok / n
    if share >= AGREE_SHARE:
        return "agree"
    if share < DISAGREE_SHARE:
        return "disagree"
    return "partly agree"


def _qat_pairs(res: Results, by_run: dict, scheme: str) -> list[tuple]:
    """(run key, (R_qat - R_int8) / gain, loss of the QAT cell) for each learned run with both."""
    pairs = []
    for key, cells in sorted(by_run.items()):
        if scheme in cells and "int8" in cells and res.learned(cells["int8"]):
            run = res.runs[key]
            gain = abs(run["fp32_return"] - run["random_return"])
            diff = (cells[scheme]["mean_return"] - cells["int8"]["mean_return"]) / gain
            pairs.append((key, diff, res.loss(cells[scheme])))
    return pairs


def _qat_evidence(scheme: str, pairs: list[tuple], tolerance: float, label: str) -> list[str]:
    ok = sum(d >= -tolerance for _, d, _ in pairs)
    diffs = np.array([d for _, d, _ in pairs])
    ge_fp32 = sum(loss is not None and loss <= 0 for _, _, loss in pairs)
    return [f"{label}: {scheme} is at least as good as int8 (within "
            f"{tolerance:.0%}) in {ok} of {len(pairs)} runs; strictly better in "
            f"{int(np.sum(diffs > 0))}, equal in {int(np.sum(diffs == 0))}; mean difference "
            f"{_pct(float(diffs.mean()))} of the fp32-over-random gain.",
            f"{scheme} >= fp32 in {ge_fp32} of {len(pairs)} runs.",
            f"Runs ({scheme}): " + "; ".join(f"{_task_name(k[:2])} seed {k[2]}: {_pct(d)}"
                                             for k, d, _ in pairs) + "."]


def claims(res: Results, tolerance: float) -> list[dict]:
    """QuaRL's three claims, each {"claim", "verdict", "evidence": [text], "n"}; computed."""
    out = []

    # 1. 6-8 bits lose no reward
    items = []
    for r in res.ok_cells:
        if r["scheme"] in EIGHT_BIT and res.learned(r):
            items.append((f"{_task_name(_task(r))} seed {r['seed']} {r['scheme']}", res.loss(r)))
    for r in res.sweep:
        if r["mode"] != "fp32" and 6 <= r["bits"] <= 8 and res.learned(r):
            items.append((f"{_task_name(_task(r))} seed {r['seed']} {r['bits']}-bit "
                          f"{r['mode']}", res.loss(r)))
    items = [(k, v) for k, v in items if v is not None]
    within = [v <= tolerance for _, v in items]
    ev = []
    if items:
        losses = np.array([v for _, v in items])
        worst = max(items, key=lambda kv: kv[1])
        ev.append(f"{sum(within)} of {len(items)} policies at 6-8 bits are within "
                  f"{tolerance:.0%} of their fp32 return (normalised loss: median {_pct(np.median(losses))}, "
                  f"worst {_pct(worst[1])} for {worst[0]}).")
        by_bits = defaultdict(list)
        for k, v in items:
            m = re.search(r"(\d+)-bit", k)
            by_bits[f"{m.group(1)}-bit sweep" if m else k.rsplit(" ", 1)[-1]].append(v)
        ev.append("Per setting (mean normalised loss): " + "; ".join(
            f"{k}: {_pct(float(np.mean(v)))} over {len(v)}" for k, v in sorted(by_bits.items())) + ".")
    else:
        ev.append(f"No learned run has an 8-bit scheme ({', '.join(EIGHT_BIT)}) or a 6-8 bit "
                  "sweep point.")
    out.append({"claim": "6-8 bit policies lose no reward", "n": len(items),
                "verdict": _share_verdict(sum(within), len(items)), "evidence": ev})

    # 2. QAT >= PTQ (and often >= fp32): RL-loop QAT and distillation QAT, counted apart
    by_run = defaultdict(dict)
    for r in res.ok_cells:
        by_run[(r["algo"], r["env"], r["seed"])][r["scheme"]] = r
    pairs = {m: _qat_pairs(res, by_run, m) for m in QAT_METHODS}
    rl, dist = pairs["qat-int8"], pairs["qat-distill-int8"]
    ev = []
    if rl:
        ev += _qat_evidence("qat-int8", rl, tolerance, "RL-loop QAT")
    else:
        skipped = [r for r in res.cells if r["scheme"] == "qat-int8" and r.get("status") == "skipped"]
        ev.append("No learned run has both qat-int8 and int8 cells"
                  + (f" ({len(skipped)} qat-int8 cells skipped: {skipped[0].get('reason')})"
                     if skipped else "") + ".")
    if dist:
        ok_d = sum(d >= -tolerance for _, d, _ in dist)
        text = _qat_evidence("qat-distill-int8", dist, tolerance,
                             "Distillation QAT (on-policy distillation from the fp32 network, "
                             "all algorithms), counted separately")
        text.insert(1, f"Verdict on distillation QAT alone: {_share_verdict(ok_d, len(dist))}"
                       + ("; the claim's verdict is RL-loop QAT's." if rl else
                          "; with no RL-loop QAT pair, it is the claim's verdict."))
        both = {k: d for k, d, _ in dist}, {k: d for k, d, _ in rl}
        common = sorted(set(both[0]) & set(both[1]))
        if common:
            wins = sum(both[0][k] >= both[1][k] for k in common)
            text.insert(2, f"Where both methods ran ({len(common)} runs), qat-distill-int8 >= "
                           f"qat-int8 in {wins}.")
        ev += text
    main = rl or dist
    by_method = {}
    for m, p in pairs.items():
        n_ok = sum(d >= -tolerance for _, d, _ in p)
        by_method[m] = {"n": len(p), "ok": n_ok, "verdict": _share_verdict(n_ok, len(p))}
    out.append({"claim": "QAT >= PTQ (and often >= fp32)", "n": len(main),
                "verdict": _share_verdict(sum(d >= -tolerance for _, d, _ in main), len(main)),
                "evidence": ev, "method": "qat-distill-int8" if dist and not rl else "qat-int8",
                "by_method": by_method})

    # 3. wider weight distributions quantize worse
    ev, verdicts = [], []
    int8 = [(res.runs[(r["algo"], r["env"], r["seed"])], res.loss(r)) for r in res.ok_cells
            if r["scheme"] == "int8" and res.learned(r)]
    sweep_loss = defaultdict(list)
    for r in res.sweep:
        if r["mode"] != "fp32" and res.learned(r) and res.loss(r) is not None:
            sweep_loss[(r["algo"], r["env"], r["seed"])].append(res.loss(r))
    sweeps = [(res.runs[k], float(np.mean(v))) for k, v in sweep_loss.items()]
    n_total = 0
    for label, pts in (("int8 loss", int8), ("mean n-bit sweep loss", sweeps)):
        pts = [(run, v) for run, v in pts if v is not None]
        n_total = max(n_total, len(pts))
        if len(pts) < 4:
            ev.append(f"Weight range vs {label}: {len(pts)} learned run(s), fewer than 4: "
                      "insufficient data.")
            verdicts.append("insufficient data")
            continue
        x = [run["weights"]["all"]["range"] for run, _ in pts]
        y = [v for _, v in pts]
        rho = spearman(x, y)
        if rho is None:
            ev.append(f"Weight range vs {label} over {len(pts)} runs: no variation in "
                      f"{'the loss' if np.std(y) == 0 else 'the range'} (all "
                      f"{_pct(y[0]) if np.std(y) == 0 else _fmt(x[0], 3)}): insufficient data.")
            verdicts.append("insufficient data")
            continue
        p = permutation_p(x, y, rho)
        v = ("agree" if rho > 0 and p < 0.05 else "disagree" if rho < 0 and p < 0.05
             else "inconclusive")
        verdicts.append(v)
        ev.append(f"Weight range vs {label} over {len(pts)} learned runs: Spearman rho = "
                  f"{rho:+.2f} (permutation p = {p:.3f}) -> {v}.")
    per_algo = defaultdict(list)
    for run in res.runs.values():
        per_algo[run["algo"]].append(run["weights"]["all"])
    if per_algo:
        ev.append("Weight range per algorithm (mean over runs): " + "; ".join(
            f"{a.upper()} {np.mean([s['range'] for s in v]):.2f} (kurtosis "
            f"{np.mean([s['kurtosis'] for s in v]):.1f}, {len(v)} runs)"
            for a, v in sorted(per_algo.items())) + ".")
    decided = [v for v in verdicts if v != "insufficient data"]
    verdict = ("insufficient data" if not decided else decided[0] if len(set(decided)) == 1
               else "mixed: " + ", ".join(decided))
    out.append({"claim": "wider weight distributions quantize worse", "n": n_total,
                "verdict": verdict, "evidence": ev})
    return out


def remedy_table(res: Results) -> list[dict]:
    """Per task with an argmax head: int8 and each tie remedy (mean return, ties, agreement over
    the seeds that have all of them), and which wins."""
    out = []
    for t in res.tasks:
        cells = [r for r in res.ok_cells if _task(r) == t and r["scheme"] in ("int8", *REMEDIES)]
        if not any(r["scheme"] in REMEDIES for r in cells):
            continue
        rows = {}
        for s in ("int8", *REMEDIES):
            cs = [r for r in cells if r["scheme"] == s]
            if not cs:
                continue
            losses = [v for v in (res.loss(r) for r in cs) if v is not None]
            rows[s] = {"seeds": sorted(r["seed"] for r in cs),
                       "mean_return": float(np.mean([r["mean_return"] for r in cs])),
                       "std_return": float(np.std([r["mean_return"] for r in cs])),
                       "loss": float(np.mean(losses)) if losses else None,
                       "ties": float(np.mean([r.get("ties") or 0.0 for r in cs])),
                       "agreement": float(np.mean([r["agreement"] for r in cs]))}
        best = max(rows.values(), key=lambda v: v["mean_return"])["mean_return"]
        top = [s for s, v in rows.items() if v["mean_return"] >= best - 1e-9]
        winner = "all equal" if len(top) == len(rows) > 1 else " = ".join(top)
        out.append({"task": _task_name(t), "schemes": rows, "winner": winner})
    return out


# ------------------------------------------------------------------------------- figures
def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _grid(n: int):
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    return rows, cols


def _schemes(cells) -> list[str]:
    present = {r["scheme"] for r in cells}
    return [s for s in SCHEME_ORDER if s in present] + sorted(present - set(SCHEME_ORDER))


def fig_return_vs_precision(res: Results, path: Path) -> bool:
    tasks = [t for t in res.tasks if any(_task(r) == t for r in res.ok_cells)]
    if not tasks:
        return False
    plt = _plt()
    rows, cols = _grid(len(tasks))
    fig, axes = plt.subplots(rows, cols, figsize=(max(6.5, 4.6 * cols), 3.4 * rows), squeeze=False)
    for ax, t in zip(axes.flat, tasks):
        cells = [r for r in res.ok_cells if _task(r) == t]
        schemes = _schemes(cells)
        for i, s in enumerate(schemes):
            ys = [r["mean_return"] for r in cells if r["scheme"] == s]
            ax.scatter([i] * len(ys), ys, color="tab:blue", alpha=0.6, s=18)
            ax.scatter([i], [np.mean(ys)], color="black", marker="_", s=300)
        runs = [r for k, r in res.runs.items() if k[:2] == t]
        if runs:
            ax.axhline(np.mean([r["fp32_return"] for r in runs]), color="tab:green", ls="--",
                       lw=1, label="fp32 (Keras)")
            rnd = [r["random_return"] for r in runs if r.get("random_return") is not None]
            if rnd:
                ax.axhline(np.mean(rnd), color="tab:red", ls=":", lw=1, label="random policy")
        ax.set_xticks(range(len(schemes)), schemes, rotation=30)
        ax.set_title(_task_name(t), fontsize=10)
        ax.set_ylabel("greedy return")
        ax.legend(fontsize=7, loc="best")
    return _save(fig, path, axes, len(tasks), "Return per precision (dots: seeds, bar: mean)")


def _save(fig, path: Path, axes=None, used: int = 0, title: str | None = None) -> bool:
    """Hide a grid's unused panels, title, lay out, write the PNG and free the figure."""
    if axes is not None:
        for ax in list(axes.flat)[used:]:
            ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return True


def fig_return_vs_bits(res: Results, path: Path) -> bool:
    tasks = sorted({_task(r) for r in res.sweep})
    if not tasks:
        return False
    plt = _plt()
    rows, cols = _grid(len(tasks))
    fig, axes = plt.subplots(rows, cols, figsize=(max(6.5, 4.6 * cols), 3.4 * rows), squeeze=False)
    for ax, t in zip(axes.flat, tasks):
        pts = [r for r in res.sweep if _task(r) == t]
        for mode in sorted({r["mode"] for r in pts} - {"fp32"}):
            bits = sorted({r["bits"] for r in pts if r["mode"] == mode})
            per = [[r["mean_return"] for r in pts if r["mode"] == mode and r["bits"] == b]
                   for b in bits]
            ax.errorbar(bits, [np.mean(v) for v in per], yerr=[np.std(v) for v in per],
                        marker="o", capsize=3, label=mode)
        fp = [r["mean_return"] for r in pts if r["mode"] == "fp32"]
        if fp:
            ax.axhline(np.mean(fp), color="tab:green", ls="--", lw=1, label="fp32")
        ax.set_xlabel("bits")
        ax.set_ylabel("greedy return")
        ax.set_title(_task_name(t), fontsize=10)
        ax.legend(fontsize=7)
    return _save(fig, path, axes, len(tasks), "n-bit sweep: return vs bits (mean ± std over seeds)")


def fig_weight_histograms(res: Results, path: Path) -> bool:
    by_algo = defaultdict(list)
    for run in res.runs.values():
        if run.get("weight_quantiles"):
            by_algo[run["algo"]].append(run)
    if not by_algo:
        return False
    plt = _plt()
    algos = sorted(by_algo)
    rows, cols = _grid(len(algos))
    fig, axes = plt.subplots(rows, cols, figsize=(max(6.5, 4.6 * cols), 3.2 * rows), squeeze=False)
    grid = np.linspace(0, 1, 2001)
    for ax, algo in zip(axes.flat, algos):
        runs = by_algo[algo]
        # inverse-CDF samples from each run's quantiles, equally many per run (pooled)
        samples = np.concatenate([np.interp(grid, np.linspace(0, 1, len(r["weight_quantiles"])),
                                            r["weight_quantiles"]) for r in runs])
        ax.hist(samples, bins=80, color="tab:blue", alpha=0.8, density=True)
        rng_ = np.mean([r["weights"]["all"]["range"] for r in runs])
        kurt = np.mean([r["weights"]["all"]["kurtosis"] for r in runs])
        envs = sorted({r["env"] for r in runs})
        ax.set_title(f"{algo.upper()} ({len(runs)} runs: {', '.join(envs)})", fontsize=8)
        ax.text(0.02, 0.95, f"range {rng_:.2f}\nkurtosis {kurt:.1f}", transform=ax.transAxes,
                va="top", fontsize=8)
        ax.set_xlabel("kernel weight")
    return _save(fig, path, axes, len(algos), "Kernel weights per algorithm (pooled over runs)")


def fig_model_size(res: Results, path: Path) -> bool:
    cells = [r for r in res.ok_cells if r.get("size_bytes")]
    if not cells:
        return False
    plt = _plt()
    tasks = sorted({_task(r) for r in cells})
    schemes = _schemes(cells)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(tasks) * len(schemes) / 3 + 3), 3.6))
    width = 0.8 / len(schemes)
    for j, s in enumerate(schemes):
        ys = [np.mean([r["size_bytes"] for r in cells if _task(r) == t and r["scheme"] == s] or [0])
              / 1024 for t in tasks]
        ax.bar(np.arange(len(tasks)) + j * width - 0.4 + width / 2, ys, width, label=s)
    ax.set_xticks(range(len(tasks)), [_task_name(t) for t in tasks], rotation=20, fontsize=8,
                  ha="right")
    ax.set_ylabel(".tflite size (KiB)")
    ax.legend(fontsize=7, ncol=min(len(schemes), 6))
    ax.set_title("Model size per scheme")
    return _save(fig, path)


# ------------------------------------------------------------------------------ the document
def _blocks(res: Results, tolerance: float, figures: dict[str, bool], source: Path) -> list:
    B = []
    title = f"QuaRL study report: {res.study or source.stem}"
    B.append(("h", 1, title))
    n = defaultdict(int)
    for r in res.all:
        n[(r["kind"], r.get("status"))] += 1
    B.append(("p", f"Source: `{source}`. Rows (last per key): "
                   + ", ".join(f"{v} {k[0]} {k[1]}" for k, v in sorted(n.items(), key=str)) + "."))
    seeds = sorted({r["seed"] for r in res.runs.values()})
    eval_n = sorted({len(r.get("eval_seeds") or []) for r in res.runs.values()})
    B.append(("p", f"{len(res.tasks)} task(s), training seeds {seeds}, greedy evaluation on "
                   f"{'/'.join(map(str, eval_n)) or '?'} fixed test seeds per policy "
                   "(tflite-runtime for the .tflite models). Normalised loss = (R_fp32 - R_q) / "
                   "|R_fp32 - R_random|: 0 is no loss, 100 % is as bad as a random policy; "
                   f"a loss of at most {tolerance:.0%} counts as no loss."))

    B.append(("h", 2, "QuaRL's claims against these measurements"))
    rows = []
    for c in claims(res, tolerance):
        rows.append([c["claim"], f"**{c['verdict']}**", str(c["n"]), " ".join(c["evidence"])])
    B.append(("table", ["claim", "our data", "n", "evidence"], rows))

    B.append(("h", 2, "Training runs"))
    rows, unsolved = [], []
    solved_at = {env: reward_threshold(env) for _, env, _ in res.runs}
    for k, r in sorted(res.runs.items()):
        w, threshold = r["weights"]["all"], solved_at[k[1]]
        rows.append([_task_name(k[:2]), str(k[2]), f"{r.get('steps') or '-'}",
                     _fmt(r.get("train_seconds"), 0), _fmt(r.get("best_validation_return")),
                     _fmt(r["fp32_return"]), _fmt(r.get("random_return")), _fmt(threshold),
                     f"{w['range']:.3f}", f"{w['std']:.3f}", f"{w['kurtosis']:.2f}"])
        if threshold is not None and r["fp32_return"] < threshold:
            unsolved.append(f"{_task_name(k[:2])} seed {k[2]} ({_fmt(r['fp32_return'])} < "
                            f"{_fmt(threshold)})")
    B.append(("table", ["task", "seed", "steps", "train s", "validation", "fp32 return",
                        "random", "solved at", "weight range", "std", "kurtosis"], rows))
    if unsolved:
        B.append(("p", f"Below Gymnasium's reward threshold (\"solved at\"; fp32 return on the "
                       f"test seeds): {'; '.join(unsolved)}. The claims use every run whose fp32 "
                       "policy beats the random one, these included; the normalised loss "
                       "measures against what each run did learn."))
    per_layer = []
    for k, r in sorted(res.runs.items()):
        for layer in r["weights"]["layers"]:
            per_layer.append([_task_name(k[:2]), str(k[2]), str(layer["layer"]),
                              "x".join(map(str, layer["shape"])), f"{layer['min']:.3f}",
                              f"{layer['max']:.3f}", f"{layer['range']:.3f}",
                              f"{layer['std']:.3f}", f"{layer['kurtosis']:.2f}"])
    if per_layer:
        B.append(("details", "Per-layer kernel statistics",
                  ("table", ["task", "seed", "layer", "shape", "min", "max", "range", "std",
                             "kurtosis"], per_layer)))

    B.append(("h", 2, "Return per precision"))
    if figures.get("return_vs_precision"):
        B.append(("img", "return_vs_precision.png", "return per precision"))
    rows = []
    for t in res.tasks:
        cells = [r for r in res.ok_cells if _task(r) == t]
        for s in _schemes(cells):
            cs = [r for r in cells if r["scheme"] == s]
            ret = [r["mean_return"] for r in cs]
            losses = [res.loss(r) for r in cs]
            losses = [v for v in losses if v is not None]
            agree = [r["agreement"] for r in cs if r.get("agreement") is not None]
            kl = [r["kl"] for r in cs if r.get("kl") is not None]
            rows.append([_task_name(t), s, str(len(cs)),
                         f"{np.mean(ret):,.1f} ± {np.std(ret):,.1f}",
                         _pct(float(np.mean(losses))) if losses else "-",
                         f"{np.mean(agree):.3f}" if agree else "-",
                         f"{np.mean(kl):.2e}" if kl else "-",
                         f"{int(np.mean([r['size_bytes'] for r in cs])):,}"])
    B.append(("table", ["task", "scheme", "seeds", "return (mean ± std over seeds)",
                        "normalised loss", "agreement", "KL(fp32‖q)", "size (B)"], rows))
    B.append(("p", "Agreement: share of the states visited by the fp32 policy where the model "
                   "picks the same action (continuous: 1 - mean |a - a_fp32| / action range). "
                   "KL: mean KL divergence of the action distributions over those states, "
                   "for PPO: softmax of the logits (discrete), or the Gaussian around the "
                   "network's action with the policy's own std (continuous; the std is not "
                   "quantized). DQN, SAC, TD3 and DDPG deploy a deterministic action: no KL."))

    table = remedy_table(res)
    if table:
        B.append(("h", 2, "Tie remedies for argmax heads (DQN, discrete PPO)"))
        B.append(("p", "int8 rounds Q-values (logits) to 256 levels across their whole range, so "
                       "actions whose values differ by less than one step tie and argmax takes "
                       "the first. int8-centred folds Q - mean(Q) into the last layer before "
                       "conversion (a real .tflite); int8-acc takes argmax over the last layer's "
                       "int32 accumulators of the int8 model (exact integer readout); "
                       "int8-i16head requantizes those accumulators to int16 (numpy emulation: "
                       "no TFLite op does int8 -> int16)."))
        rows = []
        for item in table:
            for s, v in item["schemes"].items():
                rows.append([item["task"], s, ",".join(map(str, v["seeds"])),
                             f"{v['mean_return']:,.1f} ± {v['std_return']:,.1f}",
                             _pct(v["loss"]), f"{v['ties']:.3f}", f"{v['agreement']:.3f}",
                             item["winner"] if s == "int8" else ""])
        B.append(("table", ["task", "scheme", "seeds", "return (mean ± std over seeds)",
                            "normalised loss", "ties", "agreement", "winner"], rows))

    B.append(("h", 2, "n-bit sweep"))
    if figures.get("return_vs_bits"):
        B.append(("img", "return_vs_bits.png", "return vs bits"))
        rows = []
        for t in sorted({_task(r) for r in res.sweep}):
            pts = [r for r in res.sweep if _task(r) == t]
            for mode in ["fp32"] + sorted({r["mode"] for r in pts} - {"fp32"}):
                for b in sorted({r["bits"] for r in pts if r["mode"] == mode}):
                    rs = [r for r in pts if r["mode"] == mode and r["bits"] == b]
                    losses = [v for v in (res.loss(r) for r in rs) if v is not None]
                    rows.append([_task_name(t), mode, str(b), str(len(rs)),
                                 _fmt(float(np.mean([r["mean_return"] for r in rs]))),
                                 _pct(float(np.mean(losses))) if losses else "-",
                                 f"{np.mean([r['agreement'] for r in rs]):.3f}"])
        B.append(("table", ["task", "mode", "bits", "seeds", "return", "normalised loss",
                            "agreement"], rows))
    else:
        B.append(("p", "No sweep rows in the results."))

    B.append(("h", 2, "Weight distributions"))
    if figures.get("weight_histograms"):
        B.append(("img", "weight_histograms.png", "weight histograms per algorithm"))
    else:
        B.append(("p", "No training runs in the results."))

    B.append(("h", 2, "Model size"))
    if figures.get("model_size"):
        B.append(("img", "model_size.png", "model size per scheme"))
    else:
        B.append(("p", "No quantized models in the results."))

    if res.other:
        B.append(("h", 2, "Skipped and failed"))
        grouped = defaultdict(list)   # one line per (kind, task, what, status, reason): its seeds
        for r in res.other:
            what = str(r.get("scheme") or (f"{r.get('mode')} {r.get('bits')}"
                                           if r["kind"] == "sweep" else ""))
            grouped[(r["kind"], _task_name(_task(r)), what, str(r.get("status")),
                     str(r.get("reason", "")))].append(str(r.get("seed")))
        rows = [[k[0], k[1], ",".join(seeds), k[2], k[3], k[4]] for k, seeds in grouped.items()]
        B.append(("table", ["kind", "task", "seeds", "what", "status", "reason"], rows))
    return B


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks) -> str:
    out = []
    for b in blocks:
        if b[0] == "h":
            out.append("#" * b[1] + " " + b[2])
        elif b[0] == "p":
            out.append(b[1])
        elif b[0] == "img":
            out.append(f"![{b[2]}]({b[1]})")
        elif b[0] == "table":
            out.append("| " + " | ".join(b[1]) + " |")
            out.append("|" + "|".join("---" for _ in b[1]) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b[2])
        elif b[0] == "details":
            out.append(f"<details><summary>{b[1]}</summary>\n")
            out.append(to_markdown([b[2]]).rstrip())
            out.append("\n</details>")
        out.append("")
    return "\n".join(out)


def _inline(s: str) -> str:
    s = html.escape(str(s))
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", s)


CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid
#ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f2f2f2}img{max-width:100%}
code{background:#f4f4f4;padding:0 3px}"""


def to_html(blocks, title: str) -> str:
    body = []
    for b in blocks:
        if b[0] == "h":
            body.append(f"<h{b[1]}>{_inline(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            body.append(f"<p>{_inline(b[1])}</p>")
        elif b[0] == "img":
            body.append(f'<p><img src="{html.escape(b[1])}" alt="{html.escape(b[2])}"></p>')
        elif b[0] == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                           for row in b[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif b[0] == "details":
            body.append(f"<details><summary>{_inline(b[1])}</summary>"
                        f"{to_html([b[2]], title).split('<body>')[1].split('</body>')[0]}</details>")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n")


def write_report(results: Path, out: Path | None = None, tolerance: float = 0.05) -> dict:
    """Write report.md, report.html and the figures for the results file; returns their paths."""
    results = Path(results)
    if not results.is_file():
        raise QuarlError(f"no results file {results}")
    rows = read_results(results)
    if not rows:
        raise QuarlError(f"{results} holds no rows")
    bad = [r for r in rows if r.get("kind") not in ("run", "cell", "sweep")]
    if bad:
        raise QuarlError(f"{results}: rows of unknown kind {bad[0].get('kind')!r}: not a study's "
                         "results file")
    if not 0 <= tolerance < 1:
        raise QuarlError(f"--tolerance must be in [0, 1), got {tolerance}")
    out = Path(out) if out else results.parent
    out.mkdir(parents=True, exist_ok=True)
    res = Results(rows)
    figures = {
        "return_vs_precision": fig_return_vs_precision(res, out / "return_vs_precision.png"),
        "return_vs_bits": fig_return_vs_bits(res, out / "return_vs_bits.png"),
        "weight_histograms": fig_weight_histograms(res, out / "weight_histograms.png"),
        "model_size": fig_model_size(res, out / "model_size.png"),
    }
    blocks = _blocks(res, tolerance, figures, results)
    md = out / "report.md"
    md.write_text(to_markdown(blocks))
    page = out / "report.html"
    page.write_text(to_html(blocks, blocks[0][2]))
    (out / "claims.json").write_text(json.dumps(claims(res, tolerance), indent=2) + "\n")
    (out / "remedies.json").write_text(json.dumps(remedy_table(res), indent=2) + "\n")
    return {"markdown": md, "html": page, "claims": out / "claims.json",
            "remedies": out / "remedies.json",
            "figures": [out / f"{k}.png" for k, v in figures.items() if v]}
