"""A study's results as a report: Markdown and one self-contained HTML file (no external CSS,
script or image: the figures are embedded as data: URIs; the PNG files are also written next to
the Markdown), with a verdict on each of QuaRL's claims computed from the rows.

    quarl-edge report RESULTS.jsonl [--out DIR] [--tolerance 0.05] [--bench BENCH.jsonl ...]

Writes DIR/report.md, DIR/report.html and the figures (matplotlib, Agg backend; never wider
than MAX_WIDTH_PX, whatever the number of tasks):

    return_vs_precision.png  greedy return per scheme for each (algo, env), one point per seed;
                             the return axis spans the plotted returns (the random policy's
                             return is a note when it falls outside)
    return_vs_bits.png       the n-bit sweep: return vs bits per mode
    weight_histograms.png    the kernels' weight distribution per algorithm (pooled over runs)
    model_size.png           .tflite size per (algo, env) and scheme, as a grid
    pareto_<board>.png       per board: return vs cost per inference, marker area = flash

The claims are one table (claim, verdict, n, the key numbers), then the tables of numbers
behind each verdict. Cells skipped because their scheme does not apply to the task
(plan.not_applicable: qat-int8 outside DQN, the tie remedies for continuous actions) are said
once per rule; only other skipped or failed rows are listed.

On the board: a study's board cells (kind "board" rows: `boards = [...]` in its TOML) and the
JSON lines of `quarl-edge bench RUN --episodes N` given with --bench (OUT/bench.jsonl; the row
format is in quarl_edge/measure/bench.py) make a section "On the board": per task one table,
rows scheme × board, with the board's return (mean ± std over seeds), its normalised loss
against the fp32 network on those seeds, the agreement, whether TF Lite Micro returns the same,
whether validate found the outputs bit-exact, the cost per inference, its µs (measured on the
host, at the board's clock otherwise), flash, RAM, arena and stack; a scheme that does not fit
a board is a row saying so with its numbers. Per board a Pareto plot pareto_<board>.png
(return against cost per inference, marker area = flash, the non-dominated schemes joined),
and per task and board the line "int8 is N× faster and M× smaller than fp32 with a return loss
of L", computed from those rows (boards.json holds the same numbers). Bench rows without
episodes give the cost and memory only.

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

import base64
import html
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..errors import QuarlError
from .results import latest_rows, read_results

SCHEME_ORDER = ["fp32", "fp16", "dyn-int8", "int8", "int16x8", "qat-int8", "qat-distill-int8",
                "int8-centred", "int8-acc", "int8-centred-acc", "int8-i16head"]
REMEDIES = ("int8-centred", "int8-acc", "int8-centred-acc", "int8-i16head")   # quarl_edge/quant/remedies.py
EIGHT_BIT = ("int8", "dyn-int8", "qat-int8", "qat-distill-int8")
QAT_METHODS = {"qat-int8": "RL-loop QAT", "qat-distill-int8": "distillation QAT"}
AGREE_SHARE, DISAGREE_SHARE = 0.9, 0.5
FLOAT_SCHEMES = ("fp32", "fp16", "dyn-int8")   # float activations: compared up to libm's ulps


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

    def __init__(self, rows: list[dict], bench: list[dict] = ()):
        self.bench = list(bench)      # board rows (bench --episodes JSON lines), as they are
        latest = latest_rows(rows)
        self.all = list(latest.values())
        self.runs = {(r["algo"], r["env"], r["seed"]): r for r in self.all
                     if r["kind"] == "run" and r.get("status") == "ok"}
        self.cells = [r for r in self.all if r["kind"] == "cell"]
        self.ok_cells = [r for r in self.cells if r.get("status") == "ok"]
        self.sweep = [r for r in self.all if r["kind"] == "sweep" and r.get("status") == "ok"]
        self.other = [r for r in self.all if r.get("status") not in ("ok",)
                      and not (r["kind"] == "board" and r.get("status") in ("skipped", "does-not-fit"))]
        boards = [r for r in self.all if r["kind"] == "board"]
        self.board_ok = [{**r, "precision": r.get("precision", r["scheme"])} for r in boards
                         if r.get("status") == "ok"]
        self.board_no_fit = [r for r in boards if r.get("status") == "does-not-fit"]
        self.board_skipped = [r for r in boards if r.get("status") == "skipped"]
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
    """QuaRL's three claims, each {"claim", "verdict", "n", "evidence": [sentences], "summary":
    the key numbers in one line, "tables": [{"title", "columns", "rows" (display strings),
    "collapsed" (optional)}]: the numbers behind the verdict}; all computed from the rows."""
    out = []

    # 1. 6-8 bits lose no reward
    items = []   # (policy, setting, loss)
    for r in res.ok_cells:
        if r["scheme"] in EIGHT_BIT and res.learned(r):
            items.append((f"{_task_name(_task(r))} seed {r['seed']} {r['scheme']}", r["scheme"],
                          res.loss(r)))
    for r in res.sweep:
        if r["mode"] != "fp32" and 6 <= r["bits"] <= 8 and res.learned(r):
            items.append((f"{_task_name(_task(r))} seed {r['seed']} {r['bits']}-bit "
                          f"{r['mode']}", f"{r['bits']}-bit sweep", res.loss(r)))
    items = [it for it in items if it[2] is not None]
    within = [v <= tolerance for _, _, v in items]
    ev, summary, tables = [], "", []
    if items:
        losses = np.array([v for _, _, v in items])
        worst = max(items, key=lambda it: it[2])
        ev.append(f"{sum(within)} of {len(items)} policies at 6-8 bits are within "
                  f"{tolerance:.0%} of their fp32 return (normalised loss: median {_pct(np.median(losses))}, "
                  f"worst {_pct(worst[2])} for {worst[0]}).")
        by_setting = defaultdict(list)
        for it in items:
            by_setting[it[1]].append(it)
        ev.append("Per setting (mean normalised loss): " + "; ".join(
            f"{k}: {_pct(float(np.mean([v for _, _, v in its])))} over {len(its)}"
            for k, its in sorted(by_setting.items())) + ".")
        summary = (f"{sum(within)} of {len(items)} within {tolerance:.0%}; median loss "
                   f"{_pct(np.median(losses))}, worst {_pct(worst[2])} ({worst[0]})")
        rows = []
        for k, its in sorted(by_setting.items()):
            w = max(its, key=lambda it: it[2])
            rows.append([k, str(len(its)), str(sum(v <= tolerance for _, _, v in its)),
                         _pct(float(np.mean([v for _, _, v in its]))), _pct(w[2]),
                         w[0].removesuffix(f" {k}")])
        tables.append({"title": "Normalised loss per setting (learned runs)",
                       "columns": ["setting", "policies", f"within {tolerance:.0%}",
                                   "mean loss", "worst loss", "worst policy"], "rows": rows})
    else:
        ev.append(f"No learned run has an 8-bit scheme ({', '.join(EIGHT_BIT)}) or a 6-8 bit "
                  "sweep point.")
        summary = ev[-1]
    out.append({"claim": "6-8 bit policies lose no reward", "n": len(items),
                "verdict": _share_verdict(sum(within), len(items)), "evidence": ev,
                "summary": summary, "tables": tables})

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
    tables, parts = [], []
    method_rows = []
    for m, p in pairs.items():
        if not p:
            continue
        diffs = np.array([d for _, d, _ in p])
        ge_fp32 = sum(loss is not None and loss <= 0 for _, _, loss in p)
        method_rows.append([f"{m} ({QAT_METHODS[m]})", str(len(p)), str(by_method[m]["ok"]),
                            str(int(np.sum(diffs > 0))), str(int(np.sum(diffs == 0))),
                            _pct(float(diffs.mean())), str(ge_fp32), by_method[m]["verdict"]])
        parts.append(f"{m} >= int8 in {by_method[m]['ok']} of {len(p)} runs")
    if method_rows:
        tables.append({"title": "Each QAT method against int8 of the same run (differences in "
                                "% of the fp32-over-random gain)",
                       "columns": ["method", "runs", f"≥ int8 (within {tolerance:.0%})",
                                   "better", "equal", "mean difference", "≥ fp32", "verdict"],
                       "rows": method_rows})
        per_run = defaultdict(dict)
        for m, p in pairs.items():
            for k, d, _ in p:
                per_run[k][m] = d
        tables.append({"title": "Per run: QAT minus int8", "collapsed": True,
                       "columns": ["task", "seed", *(f"{m} − int8" for m in QAT_METHODS)],
                       "rows": [[_task_name(k[:2]), str(k[2]),
                                 *(_pct(per_run[k].get(m)) for m in QAT_METHODS)]
                                for k in sorted(per_run)]})
    summary = ("; ".join(parts) + (" (the verdict is RL-loop QAT's)" if rl and dist else
                                   " (no RL-loop QAT pair: the verdict is distillation's)"
                                   if dist else "")) if parts else ev[0]
    out.append({"claim": "QAT >= PTQ (and often >= fp32)", "n": len(main),
                "verdict": _share_verdict(sum(d >= -tolerance for _, d, _ in main), len(main)),
                "evidence": ev, "method": "qat-distill-int8" if dist and not rl else "qat-int8",
                "by_method": by_method, "summary": summary, "tables": tables})

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
    corr_rows, parts = [], []
    for label, pts in (("int8 loss", int8), ("mean n-bit sweep loss", sweeps)):
        pts = [(run, v) for run, v in pts if v is not None]
        n_total = max(n_total, len(pts))
        if len(pts) < 4:
            ev.append(f"Weight range vs {label}: {len(pts)} learned run(s), fewer than 4: "
                      "insufficient data.")
            verdicts.append("insufficient data")
            corr_rows.append([f"weight range vs {label}", str(len(pts)), "-", "-",
                              "insufficient data (fewer than 4 runs)"])
            continue
        x = [run["weights"]["all"]["range"] for run, _ in pts]
        y = [v for _, v in pts]
        rho = spearman(x, y)
        if rho is None:
            ev.append(f"Weight range vs {label} over {len(pts)} runs: no variation in "
                      f"{'the loss' if np.std(y) == 0 else 'the range'} (all "
                      f"{_pct(y[0]) if np.std(y) == 0 else _fmt(x[0], 3)}): insufficient data.")
            verdicts.append("insufficient data")
            corr_rows.append([f"weight range vs {label}", str(len(pts)), "-", "-",
                              "insufficient data (no variation)"])
            continue
        p = permutation_p(x, y, rho)
        v = ("agree" if rho > 0 and p < 0.05 else "disagree" if rho < 0 and p < 0.05
             else "inconclusive")
        verdicts.append(v)
        ev.append(f"Weight range vs {label} over {len(pts)} learned runs: Spearman rho = "
                  f"{rho:+.2f} (permutation p = {p:.3f}) -> {v}.")
        corr_rows.append([f"weight range vs {label}", str(len(pts)), f"{rho:+.2f}", f"{p:.3f}", v])
        parts.append(f"rho {rho:+.2f} (p {p:.3f}) vs {label} over {len(pts)} runs")
    per_algo = defaultdict(list)
    for run in res.runs.values():
        per_algo[run["algo"]].append(run["weights"]["all"])
    tables = [{"title": "Spearman rank correlation over learned runs (permutation p-value)",
               "columns": ["comparison", "runs", "rho", "p", "verdict"], "rows": corr_rows}]
    if per_algo:
        ev.append("Weight range per algorithm (mean over runs): " + "; ".join(
            f"{a.upper()} {np.mean([s['range'] for s in v]):.2f} (kurtosis "
            f"{np.mean([s['kurtosis'] for s in v]):.1f}, {len(v)} runs)"
            for a, v in sorted(per_algo.items())) + ".")
        tables.append({"title": "Kernel weights per algorithm (mean over runs)",
                       "columns": ["algorithm", "runs", "weight range", "kurtosis"],
                       "rows": [[a.upper(), str(len(v)),
                                 f"{np.mean([s['range'] for s in v]):.2f}",
                                 f"{np.mean([s['kurtosis'] for s in v]):.1f}"]
                                for a, v in sorted(per_algo.items())]})
    decided = [v for v in verdicts if v != "insufficient data"]
    verdict = ("insufficient data" if not decided else decided[0] if len(set(decided)) == 1
               else "mixed: " + ", ".join(decided))
    out.append({"claim": "wider weight distributions quantize worse", "n": n_total,
                "verdict": verdict, "evidence": ev,
                "summary": "; ".join(parts) or "fewer than 4 learned runs, or no variation",
                "tables": tables})
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


DPI = 110
MAX_WIDTH_PX = 1600      # a figure is never wider than this, whatever the number of tasks


def _figsize(width_in: float, height_in: float) -> tuple[float, float]:
    """A figure size in inches with its width capped at MAX_WIDTH_PX at the saved DPI."""
    return min(width_in, MAX_WIDTH_PX / DPI), height_in


def _schemes(cells) -> list[str]:
    present = {r["scheme"] for r in cells}
    return [s for s in SCHEME_ORDER if s in present] + sorted(present - set(SCHEME_ORDER))


def _data_limits(values, pad: float = 0.08) -> tuple[float, float]:
    """Axis limits around `values` with a margin (a flat set of values gets a small one)."""
    lo, hi = float(np.min(values)), float(np.max(values))
    margin = (hi - lo) * pad or max(abs(hi) * 0.02, 1.0)
    return lo - margin, hi + margin


def fig_return_vs_precision(res: Results, path: Path) -> bool:
    """One panel per task: the schemes down the side (horizontal, so long names stay
    readable), the greedy return across, its axis scaled to the plotted returns; the random
    policy's return is a line when it falls inside that range, else a note in the panel."""
    tasks = [t for t in res.tasks if any(_task(r) == t for r in res.ok_cells)]
    if not tasks:
        return False
    plt = _plt()
    rows, cols = _grid(len(tasks))
    n_schemes = max(len(_schemes([r for r in res.ok_cells if _task(r) == t])) for t in tasks)
    fig, axes = plt.subplots(rows, cols, squeeze=False,
                             figsize=_figsize(max(6.5, 4.8 * cols), (0.8 + 0.22 * n_schemes) * rows + 0.6))
    for ax, t in zip(axes.flat, tasks):
        cells = [r for r in res.ok_cells if _task(r) == t]
        schemes = _schemes(cells)
        shown = []
        for i, s in enumerate(schemes):
            ys = [r["mean_return"] for r in cells if r["scheme"] == s]
            shown += ys
            ax.scatter(ys, [i] * len(ys), color="tab:blue", alpha=0.6, s=16)
            ax.scatter([np.mean(ys)], [i], color="black", marker="|", s=200)
        runs = [r for k, r in res.runs.items() if k[:2] == t]
        lo, hi = _data_limits(shown + [np.mean([r["fp32_return"] for r in runs])] if runs else shown)
        xlabel = "greedy return"
        if runs:
            ax.axvline(np.mean([r["fp32_return"] for r in runs]), color="tab:green", ls="--",
                       lw=1, label="fp32 (Keras)")
            rnd = [r["random_return"] for r in runs if r.get("random_return") is not None]
            if rnd and lo <= np.mean(rnd) <= hi:
                ax.axvline(np.mean(rnd), color="tab:red", ls=":", lw=1, label="random policy")
            elif rnd:
                xlabel += (f" (random policy: {np.mean(rnd):,.1f}, off the axis to the "
                           f"{'left' if np.mean(rnd) < lo else 'right'})")
        ax.set_xlim(lo, hi)
        ax.set_yticks(range(len(schemes)), schemes, fontsize=8)
        ax.set_ylim(len(schemes) - 0.5, -0.5)          # fp32 at the top
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(_task_name(t), fontsize=10)
        ax.set_xlabel(xlabel, fontsize=8)
        if runs:
            ax.legend(fontsize=7, loc="upper left" if np.mean(shown) > (lo + hi) / 2 else "upper right")
    return _save(fig, path, axes, len(tasks), "Return per precision (dots: seeds, bar: mean)")


def _save(fig, path: Path, axes=None, used: int = 0, title: str | None = None) -> bool:
    """Hide a grid's unused panels, title, lay out, write the PNG and free the figure."""
    if axes is not None:
        for ax in list(axes.flat)[used:]:
            ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return True


def fig_return_vs_bits(res: Results, path: Path) -> bool:
    tasks = sorted({_task(r) for r in res.sweep})
    if not tasks:
        return False
    plt = _plt()
    rows, cols = _grid(len(tasks))
    fig, axes = plt.subplots(rows, cols, figsize=_figsize(max(6.5, 4.6 * cols), 3.4 * rows),
                             squeeze=False)
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
    fig, axes = plt.subplots(rows, cols, figsize=_figsize(max(6.5, 4.6 * cols), 3.2 * rows),
                             squeeze=False)
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
    """A grid of tasks x schemes: each cell the .tflite size (KiB, mean over seeds), coloured
    by its share of the task's fp32 size (its width does not grow with the number of tasks)."""
    cells = [r for r in res.ok_cells if r.get("size_bytes")]
    if not cells:
        return False
    plt = _plt()
    tasks = sorted({_task(r) for r in cells})
    schemes = _schemes(cells)
    kib = np.full((len(tasks), len(schemes)), np.nan)
    for i, t in enumerate(tasks):
        for j, s in enumerate(schemes):
            sizes = [r["size_bytes"] for r in cells if _task(r) == t and r["scheme"] == s]
            if sizes:
                kib[i, j] = np.mean(sizes) / 1024
    fp32 = kib[:, schemes.index("fp32")][:, None] if "fp32" in schemes else np.nanmax(kib, 1)[:, None]
    share = kib / fp32
    fig, ax = plt.subplots(figsize=_figsize(3.0 + 0.75 * len(schemes), 1.6 + 0.3 * len(tasks)))
    im = ax.imshow(share, cmap="Blues", vmin=0, vmax=max(1.0, float(np.nanmax(share))),
                   aspect="auto")
    for i in range(len(tasks)):
        for j in range(len(schemes)):
            if np.isfinite(kib[i, j]):
                ax.text(j, i, f"{kib[i, j]:.1f}", ha="center", va="center", fontsize=7,
                        color="white" if share[i, j] > 0.6 else "black")
    ax.set_xticks(range(len(schemes)), schemes, rotation=35, ha="left", fontsize=8,
                  rotation_mode="anchor")
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(tasks)), [_task_name(t) for t in tasks], fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02, label="share of fp32 size")
    ax.set_title(".tflite size per scheme (KiB, mean over seeds; blank: skipped)", fontsize=10)
    return _save(fig, path)


# ------------------------------------------------------------------------------ the document
def _blocks(res: Results, tolerance: float, figures: dict[str, bool], source: Path,
            bench: list[Path] = ()) -> list:
    B = []
    title = f"QuaRL study report: {res.study or source.stem}"
    B.append(("h", 1, title))
    n = defaultdict(int)
    for r in res.all:
        n[(r["kind"], r.get("status"))] += 1
    B.append(("p", f"Source: `{source}`. Rows (last per key): "
                   + ", ".join(f"{v} {k[0]} {k[1]}" for k, v in sorted(n.items(), key=str)) + "."
                   + (f" Board rows: {len(res.bench)} from " + ", ".join(f"`{p}`" for p in bench)
                      + "." if res.bench else "")))
    seeds = sorted({r["seed"] for r in res.runs.values()})
    eval_n = sorted({len(r.get("eval_seeds") or []) for r in res.runs.values()})
    B.append(("p", f"{len(res.tasks)} task(s), training seeds {seeds}, greedy evaluation on "
                   f"{'/'.join(map(str, eval_n)) or '?'} fixed test seeds per policy "
                   "(tflite-runtime for the .tflite models). Normalised loss = (R_fp32 - R_q) / "
                   "|R_fp32 - R_random|: 0 is no loss, 100 % is as bad as a random policy; "
                   f"a loss of at most {tolerance:.0%} counts as no loss."))

    B.append(("h", 2, "QuaRL's claims against these measurements"))
    found = claims(res, tolerance)
    B.append(("table", ["claim", "our data", "n", "the numbers"],
              [[c["claim"], f"**{c['verdict']}**", str(c["n"]), c["summary"]] for c in found]))
    for i, c in enumerate(found, 1):
        B.append(("h", 3, f"{i}. {c['claim']}: {c['verdict']}"))
        for t in c["tables"]:
            table = ("table", t["columns"], t["rows"])
            B.append(("details", t["title"], table) if t.get("collapsed") else ("p", f"{t['title']}:"))
            if not t.get("collapsed"):
                B.append(table)

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

    B += _board_blocks(res, figures)

    expected, unexpected = _skips(res)
    if expected or unexpected:
        B.append(("h", 2, "Skipped and failed"))
    if expected:
        B.append(("p", f"Schemes that do not apply to every task ({sum(len(v) for v in expected.values())} "
                       "cells recorded as skipped, as the study runner does by design):"))
        B.append(("table", ["schemes", "why", "not applicable to", "cells"],
                  [[", ".join(schemes), why, ", ".join(tasks), str(n)]
                   for (schemes, why), (tasks, n) in _merge_scopes(expected).items()]))
    if unexpected:
        grouped = defaultdict(list)   # one line per (kind, task, what, status, reason): its seeds
        for r in unexpected:
            what = str(r.get("scheme") or (f"{r.get('mode')} {r.get('bits')}"
                                           if r["kind"] == "sweep" else ""))
            if r["kind"] == "board":
                what += f" on {r.get('board')}"
            grouped[(r["kind"], _task_name(_task(r)), what, str(r.get("status")),
                     str(r.get("reason", "")))].append(str(r.get("seed")))
        rows = [[k[0], k[1], ",".join(seeds), k[2], k[3], k[4]] for k, seeds in grouped.items()]
        B.append(("p", "Other skipped or failed rows:"))
        B.append(("table", ["kind", "task", "seeds", "what", "status", "reason"], rows))
    elif expected:
        B.append(("p", "No other row was skipped or failed."))
    return B


def _us(r: dict) -> str:
    """A board row's cost per inference in µs: measured (ns on the host board) or estimated at
    the board's clock (cycles; instructions at one per cycle)."""
    from .results import us_per_inference
    us, basis = us_per_inference(r.get("cost_mean"), r.get("unit"), r.get("clock_hz"))
    if us is None:
        return "-"
    if basis == "measured":
        return f"{us:,.1f} (wall clock)"
    return f"~{us:,.1f}" + (" (estimate)" if r["unit"] == "instructions" else "")


def _random_return(res: "Results", r: dict, cache: dict) -> float | None:
    """The random policy's return on a board row's seeds: its run's (same seeds), else
    played here."""
    from .analysis import random_policy_return
    seeds = list(r.get("seeds") or [])
    run = res.run_of(r) if r.get("seed") is not None else None
    if run is not None and list(run.get("eval_seeds") or []) == seeds:
        return run.get("random_return")
    key = (r["env"], tuple(seeds))
    if key not in cache:
        cache[key] = random_policy_return(r["env"], seeds)
    return cache[key]


def board_table(res: "Results") -> list[dict]:
    """One item per board row that ran (bench rows without an error; study board rows with
    status ok): the row, the normalised loss of its board return against the fp32 network on
    the same seeds and its µs per inference."""
    cache: dict[tuple, float] = {}
    out = []
    for r in [*res.bench, *res.board_ok]:
        if "error" in r:
            continue
        loss = None
        if r.get("episodes") and r.get("env") and r.get("fp32_mean_return") is not None:
            loss = normalised_loss(r["fp32_mean_return"], r["mean_return"],
                                   _random_return(res, r, cache))
        out.append({"row": r, "loss": loss, "us": _us(r)})
    return out


def board_cells(res: "Results") -> list[dict]:
    """The board rows per (task, board, scheme), over the training seeds: return (mean over
    seeds of each seed's mean; ± the std over seeds, or over episodes for one seed),
    normalised loss, agreement, TF Lite Micro check, bit-exactness, cost, µs, flash, RAM,
    arena, stack; and the (task, board, scheme)s that did not fit, with their numbers."""
    from .results import us_per_inference
    groups: dict[tuple, list] = defaultdict(list)
    for it in board_table(res):
        r = it["row"]
        groups[((r.get("algo") or "?", r.get("env") or "?"), r["board"], r["precision"])].append(it)
    out = []
    for (task, board, scheme), items in groups.items():
        rows = [it["row"] for it in items]
        played = [r for r in rows if r.get("episodes")]
        rets = [r["mean_return"] for r in played]
        losses = [it["loss"] for it in items if it["loss"] is not None]
        cost = float(np.mean([r["cost_mean"] for r in rows]))
        us, basis = us_per_inference(cost, rows[0].get("unit"), rows[0].get("clock_hz"))

        def mean_of(k):
            v = [r[k] for r in rows if r.get(k) is not None]
            return float(np.mean(v)) if v else None
        out.append({
            "task": task, "board": board, "scheme": scheme, "fits": True, "n": len(rows),
            "cpu": rows[0].get("cpu"), "unit": rows[0].get("unit"),
            "episodes": sum(r.get("episodes") or 0 for r in rows),
            "return": float(np.mean(rets)) if rets else None,
            "return_std": (float(np.std(rets)) if len(rets) > 1 else
                           (played[0].get("std_return") if played else None)),
            "fp32_return": mean_of("fp32_mean_return"),
            "loss": float(np.mean(losses)) if losses else None,
            "agreement": mean_of("agreement"),
            "equals_tflm": (all(r.get("matches_reference", r.get("matches_tflite")) for r in played)
                            if played else None),
            "equals_tflite": _every_seed(played, "matches_tflite"),
            "equals_tflite_ref": _every_seed(played, "matches_tflite_ref"),
            "bit_exact": (all(r["bit_exact"] for r in rows if "bit_exact" in r)
                          if any("bit_exact" in r for r in rows) else None),
            "cost": cost, "us": us, "us_basis": basis, "us_text": _us({**rows[0], "cost_mean": cost}),
            "flash": mean_of("flash_bytes"), "ram": mean_of("ram_bytes"),
            "arena": mean_of("arena_bytes"), "stack": mean_of("stack_bytes")})
    for r in res.board_no_fit:
        out.append({"task": (r["algo"], r["env"]), "board": r["board"], "scheme": r["scheme"],
                    "fits": False, "n": 1, "reason": r.get("reason", ""),
                    "needs_flash": r.get("needs_flash_bytes"), "needs_ram": r.get("needs_ram_bytes"),
                    "arena": r.get("arena_bytes"), "weights": r.get("weight_bytes"),
                    "board_flash": r.get("board_flash_bytes"), "board_ram": r.get("board_ram_bytes")})
    merged: dict[tuple, dict] = {}
    for c in out:      # a scheme that fits for no seed: one line
        merged.setdefault((c["task"], c["board"], c["scheme"], c["fits"]), c)
    order = {s: i for i, s in enumerate(SCHEME_ORDER)}
    return sorted(merged.values(), key=lambda c: (c["task"], c["board"],
                                                  order.get(c["scheme"], 99), c["scheme"]))


def _every_seed(played: list[dict], key: str) -> bool | None:
    """Whether every played row says `key` (a board-vs-interpreter check); None when no row
    played, or a row predates that check."""
    if not played or any(key not in r for r in played):
        return None
    return all(r[key] for r in played)


def int8_vs_fp32(cells: list[dict]) -> list[str]:
    """Per task and board with both int8 and fp32: "int8 is N× faster and M× smaller than
    fp32 on board B with a return loss of L %", from the rows' own numbers (means over seeds)."""
    by = {(c["task"], c["board"], c["scheme"]): c for c in cells if c["fits"]}
    out = []
    for (task, board, scheme), q in by.items():
        f = by.get((task, board, "fp32"))
        if scheme != "int8" or f is None or not q["cost"]:
            continue
        speed = f["cost"] / q["cost"]
        faster = f"{speed:.2f}× faster" if speed >= 1 else f"{1 / speed:.2f}× slower"
        text = (f"{_task_name(task)} on {board} ({q['cpu']}): int8 is {faster} "
                f"({q['cost']:,.0f} vs {f['cost']:,.0f} {q['unit']} per inference)")
        if q.get("flash") and f.get("flash"):
            text += (f" and {f['flash'] / q['flash']:.2f}× smaller in flash "
                     f"({q['flash']:,.0f} vs {f['flash']:,.0f} B)")
        text += " than fp32"
        if q["loss"] is not None:
            text += (f", with a return loss of {_pct(q['loss'])} (int8 {q['return']:,.1f} on "
                     f"the board vs the fp32 network's {q['fp32_return']:,.1f}; "
                     f"{q['episodes']} episodes over {q['n']} seed(s))")
        elif not q["episodes"]:
            text += " (return not measured: bench without --episodes)"
        out.append(text + ".")
    return out


def _reference_checks(cells: list[dict]) -> list:
    """One paragraph: how many board cells that played episodes returned the same as each host
    interpreter on every seed, per family of schemes (int8, int16x8, float)."""
    played = [c for c in cells if c["fits"] and c["return"] is not None]
    families = (("int8", lambda s: s not in FLOAT_SCHEMES and s != "int16x8"),
                ("int16x8", lambda s: s == "int16x8"), ("float", lambda s: s in FLOAT_SCHEMES))
    parts = []
    for what, member in families:
        group = [c for c in played if member(c["scheme"])]
        counts = []
        for key, name in (("equals_tflite_ref", "tflite-runtime's reference kernels"),
                          ("equals_tflite", "its optimized kernels"),
                          ("equals_tflm", "TF Lite Micro")):
            known = [c for c in group if c[key] is not None]
            if known:
                counts.append(f"{name} in {sum(bool(c[key]) for c in known)} of {len(known)}")
        if counts:
            schemes = ", ".join(_schemes(group))
            parts.append(f"{len(group)} {what} cells ({schemes}): the same returns as "
                         + "; ".join(counts))
    if not parts:
        return []
    return [("p", "**The board against the host interpreters** (the same model on the same "
                  "seeds, every return equal): " + ". ".join(parts) + "."),
            ("p", "Why they can differ: the firmware computes TF Lite Micro's kernels' "
                  "arithmetic, bit for bit. tflite-runtime's reference kernels "
                  "(`OpResolverType.BUILTIN_REF`) compute the same int8 arithmetic but for the "
                  "FULLY_CONNECTED multiplier, which they take from the float32 product of the "
                  "input and filter scales where TF Lite Micro takes the double product: the "
                  "31-bit multipliers differ in their last bits, and an output differs where "
                  "an accumulator lies that near a rounding boundary (`tests/test_qmath.py`). "
                  "Its optimized kernels (the default) also requantize in their GEMM backends "
                  "with another rounding and take TANH and LOGISTIC from tables, and which of "
                  "them runs depends on the host CPU. One action step apart is enough to change "
                  "an episode's return. For int16x8, TF Lite Micro requantizes a FULLY_CONNECTED's "
                  "int64 accumulator with its multiplier rounded to 15 bits, tflite-runtime "
                  "2.14 (both kernel sets) in 32 bits: one output step apart on many inputs, "
                  "which argmax heads hardly notice and continuous actions do. Float cells differ "
                  "where the board's libm (tanhf, expf) is an ulp or more from the host's.")]


def _bytes(x) -> str:
    return f"{x:,.0f}" if x else "-"


def fig_pareto(res: "Results", board: str, cells: list[dict], path: Path) -> bool:
    """One board: per task a panel of return against cost per inference (log axis when the
    costs span more than 10×), one point per scheme, its area the firmware's flash; the
    Pareto front (no other scheme both cheaper and better) joined by a line."""
    cells = [c for c in cells if c["board"] == board and c["fits"] and c["return"] is not None]
    tasks = sorted({c["task"] for c in cells})
    if not tasks:
        return False
    plt = _plt()
    rows, cols = _grid(len(tasks))
    fig, axes = plt.subplots(rows, cols, squeeze=False,
                             figsize=_figsize(max(6.0, 5.0 * cols), 3.8 * rows))
    flash = [c["flash"] for c in cells if c.get("flash")]
    big = max(flash) if flash else 1.0
    colours = plt.get_cmap("tab10")
    schemes = _schemes(cells)
    for ax, t in zip(axes.flat, tasks):
        pts = [c for c in cells if c["task"] == t]
        for i, c in enumerate(sorted(pts, key=lambda c: (c["cost"], c["return"]))):
            size = 40 + 460 * (c["flash"] or 0) / big
            ax.scatter([c["cost"]], [c["return"]], s=size, alpha=0.6,
                       color=colours(schemes.index(c["scheme"]) % 10), edgecolors="black",
                       linewidths=0.5, label=f"{c['scheme']} ({_bytes(c['flash'])} B)")
            ax.annotate(c["scheme"], (c["cost"], c["return"]), fontsize=7,   # staggered:
                        xytext=(6, 6 - 10 * (i % 3)), textcoords="offset points")  # equal points
        front, best = [], -np.inf
        for c in sorted(pts, key=lambda c: (c["cost"], -c["return"])):
            if c["return"] > best:
                front.append(c)
                best = c["return"]
        if len(front) > 1:
            ax.plot([c["cost"] for c in front], [c["return"] for c in front], color="grey",
                    lw=1, ls="--", zorder=0, label="Pareto front")
        costs = [c["cost"] for c in pts]
        if min(costs) > 0 and max(costs) / min(costs) > 10:
            ax.set_xscale("log")
        lo, hi = _data_limits([c["return"] for c in pts])
        ax.set_ylim(lo, hi)
        # returns as they are: no "-1.065e2" offset over ticks reading -0.02 .. -0.07
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.set_xlabel(f"cost per inference ({pts[0]['unit']})", fontsize=8)
        ax.set_ylabel("board return (mean over seeds)", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.set_title(_task_name(t), fontsize=10)
        ax.legend(fontsize=6, loc="best", markerscale=0.4)
    return _save(fig, path, axes, len(tasks),
                 f"{board}: return vs cost per inference (marker area: flash)")


def pareto_name(board: str) -> str:
    return "pareto_" + re.sub(r"[^A-Za-z0-9_.-]", "_", board) + ".png"


def _board_blocks(res: "Results", figures: dict[str, bool] | None = None) -> list:
    cells = board_cells(res)
    if not cells and not res.board_skipped:
        return []
    figures = figures or {}
    B = [("h", 2, "On the board: reward, latency and memory"),
         ("p", "Per task, every scheme on every board (study board cells; rows of `quarl-edge "
               "bench RUN --episodes N` too): the return of the HIL episodes with the board "
               "choosing every action on the study's test seeds (mean over training seeds, ± "
               "std over seeds, or over episodes for one seed), its normalised loss against "
               "the run's fp32 network on the same seeds, the agreement with the fp32 "
               "network's actions on the board's states, whether tflite-runtime with its "
               "reference kernels (`OpResolverType.BUILTIN_REF`), tflite-runtime with its "
               "optimized kernels (its default, the host cells' interpreter) and TF Lite Micro "
               "return the same on every seed, whether "
               "validate found every output bit-exact on the calibration observations, the "
               "cost per inference in the board's unit, that cost in µs (measured on the host; "
               "at the board's clock otherwise, instructions at one per cycle an estimate), and "
               "the firmware's flash, static RAM, arena and stack high-water.")]
    B += _reference_checks(cells)
    claims_ = int8_vs_fp32(cells)
    if claims_:
        B.append(("p", "**QuaRL's speed and memory claim, on the boards:**"))
        B += [("p", text) for text in claims_]
    for task in sorted({c["task"] for c in cells}):
        rows = []
        for c in (c for c in cells if c["task"] == task):
            if not c["fits"]:
                need = "; ".join(x for x in (
                    f"needs {c['needs_flash']:,} B flash" if c.get("needs_flash") else "",
                    f"needs {c['needs_ram']:,} B RAM" if c.get("needs_ram") else "",
                    f"arena {c['arena']:,} B" if c.get("arena") else "",
                    f"weights {c['weights']:,} B" if c.get("weights") else "") if x)
                rows.append([c["board"], c["scheme"], "-", f"does not fit ({need or c['reason']})",
                             "-", "-", "-", "-", "-", "-", "-",
                             _bytes(c.get("needs_flash")) + f" / {_bytes(c.get('board_flash'))}",
                             _bytes(c.get("needs_ram")) + f" / {_bytes(c.get('board_ram'))}",
                             _bytes(c.get("arena")), "-"])
                continue
            yes = {True: "yes", False: "NO", None: "-"}
            rows.append([c["board"], c["scheme"], str(c["n"]),
                         (f"{c['return']:,.1f} ± {c['return_std'] or 0:,.1f}"
                          if c["return"] is not None else "-"),
                         _pct(c["loss"]), _fmt(c["agreement"], 3),
                         yes[c["equals_tflite_ref"]], yes[c["equals_tflite"]],
                         yes[c["equals_tflm"]],
                         yes[c["bit_exact"]], f"{c['cost']:,.0f} {c['unit']}", c["us_text"],
                         _bytes(c["flash"]), _bytes(c["ram"]), _bytes(c["arena"]),
                         _bytes(c["stack"])])
        B.append(("h", 3, f"{_task_name(task)}: scheme × board"))
        B.append(("table", ["board", "scheme", "seeds", "return (mean ± std)", "normalised loss",
                            "agreement", "= tflite-runtime (ref. kernels)",
                            "= tflite-runtime (optimized)", "= TF Lite Micro", "bit-exact",
                            "cost / inference",
                            "µs / inference", "flash (B)", "RAM (B)", "arena (B)", "stack (B)"],
                  rows))
    for board in sorted({c["board"] for c in cells}):
        if figures.get(pareto_name(board)):
            B.append(("img", pareto_name(board), f"Pareto: return vs cost on {board}"))
    refused = [r for r in res.bench if "error" in r]
    if refused:
        B.append(("p", "Refused: " + "; ".join(f"{r['board']} {r['precision']}: {r['error']}"
                                               for r in refused) + "."))
    skipped = defaultdict(set)
    for r in res.board_skipped:
        skipped[(r["scheme"], r.get("reason", ""))].add(r["board"])
    if skipped:
        B.append(("p", "Not run on a board: " + "; ".join(
            f"{scheme} ({why})" for (scheme, why) in sorted(skipped)) + "."))
    return B


def _skips(res: Results) -> tuple[dict, list]:
    """The rows that are not ok, split: {scheme: [cells]} skipped because the scheme does not
    apply to the task (plan.not_applicable), and every other row (errors, other skips)."""
    from .plan import not_applicable
    expected, unexpected = defaultdict(list), []
    for r in res.other:
        run = res.run_of(r)
        if (r["kind"] == "cell" and r.get("status") == "skipped" and run is not None
                and not_applicable(r["scheme"], r["algo"], r["env"],
                                   run.get("output") in ("q_values", "logits"))):
            expected[r["scheme"]].append(r)
        else:
            unexpected.append(r)
    return expected, unexpected


def _merge_scopes(expected: dict) -> dict:
    """{(schemes, what they need): (the tasks they were skipped for, number of cells)}:
    schemes with the same rule and the same tasks share one line."""
    from .plan import scope
    by_rule = defaultdict(list)
    for scheme in _schemes([{"scheme": s} for s in expected]):
        tasks = tuple(sorted({_task_name(_task(r)) for r in expected[scheme]}))
        by_rule[(scope(scheme), tasks)].append(scheme)
    return {(tuple(schemes), why): (list(tasks), sum(len(expected[s]) for s in schemes))
            for (why, tasks), schemes in by_rule.items()}


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


def to_html(blocks, title: str, image_dir: Path = Path(".")) -> str:
    """The blocks as one HTML page; images are read from `image_dir` and embedded as data:
    URIs."""
    body = []
    for b in blocks:
        if b[0] == "h":
            body.append(f"<h{b[1]}>{_inline(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            body.append(f"<p>{_inline(b[1])}</p>")
        elif b[0] == "img":   # embedded: the page is one self-contained file
            data = base64.b64encode((image_dir / b[1]).read_bytes()).decode("ascii")
            body.append(f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(b[2])}">'
                        "</p>")
        elif b[0] == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                           for row in b[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif b[0] == "details":
            body.append(f"<details><summary>{_inline(b[1])}</summary>"
                        f"{to_html([b[2]], title, image_dir).split('<body>')[1].split('</body>')[0]}</details>")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n")


def read_bench(path: Path) -> list[dict]:
    """The rows of a `quarl-edge bench` JSON-lines file (quarl_edge/measure/bench.py documents
    a row); each must name its board and precision."""
    path = Path(path)
    if not path.is_file():
        raise QuarlError(f"no bench file {path}")
    rows = read_results(path)
    bad = [r for r in rows if not {"board", "precision"} <= set(r)]
    if bad or not rows:
        raise QuarlError(f"{path}: not a bench file (each line is a row of `quarl-edge bench`, "
                         "with board and precision)")
    return rows


def write_report(results: Path, out: Path | None = None, tolerance: float = 0.05,
                 bench=()) -> dict:
    """Write report.md, report.html and the figures for the results file; returns their paths.
    `bench`: JSON-lines files of `quarl-edge bench [--episodes N]`, for the board section."""
    results = Path(results)
    if not results.is_file():
        raise QuarlError(f"no results file {results}")
    rows = read_results(results)
    if not rows:
        raise QuarlError(f"{results} holds no rows")
    bad = [r for r in rows if r.get("kind") not in ("run", "cell", "sweep", "board")]
    if bad:
        raise QuarlError(f"{results}: rows of unknown kind {bad[0].get('kind')!r}: not a study's "
                         "results file (bench rows go with --bench)")
    board_rows = [r for path in bench for r in read_bench(path)]
    if not 0 <= tolerance < 1:
        raise QuarlError(f"--tolerance must be in [0, 1), got {tolerance}")
    out = Path(out) if out else results.parent
    out.mkdir(parents=True, exist_ok=True)
    res = Results(rows, board_rows)
    figures = {
        "return_vs_precision": fig_return_vs_precision(res, out / "return_vs_precision.png"),
        "return_vs_bits": fig_return_vs_bits(res, out / "return_vs_bits.png"),
        "weight_histograms": fig_weight_histograms(res, out / "weight_histograms.png"),
        "model_size": fig_model_size(res, out / "model_size.png"),
    }
    cells = board_cells(res)
    for board in sorted({c["board"] for c in cells}):
        name = pareto_name(board)
        figures[name] = fig_pareto(res, board, cells, out / name)
    (out / "boards.json").write_text(json.dumps(
        {"cells": [{**c, "task": list(c["task"])} for c in cells],
         "int8_vs_fp32": int8_vs_fp32(cells)}, indent=2) + "\n")
    blocks = _blocks(res, tolerance, figures, results, [Path(p) for p in bench])
    md = out / "report.md"
    md.write_text(to_markdown(blocks))
    page = out / "report.html"
    page.write_text(to_html(blocks, blocks[0][2], out))
    (out / "claims.json").write_text(json.dumps(claims(res, tolerance), indent=2) + "\n")
    (out / "remedies.json").write_text(json.dumps(remedy_table(res), indent=2) + "\n")
    return {"markdown": md, "html": page, "claims": out / "claims.json",
            "remedies": out / "remedies.json",
            "boards": out / "boards.json",
            "figures": [out / (k if k.endswith(".png") else f"{k}.png")
                        for k, v in figures.items() if v]}
