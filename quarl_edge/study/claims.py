"""QuaRL's claims, each with a verdict computed from the rows, and the tie remedies' table.

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

from collections import defaultdict

import numpy as np

from .render import fmt, pct
from .results import Results, task_name, task_of
from .statistics import permutation_p, spearman

REMEDIES = ("int8-centred", "int8-acc", "int8-centred-acc", "int8-i16head")   # quarl_edge/quant/remedies.py
EIGHT_BIT = ("int8", "dyn-int8", "qat-int8", "qat-distill-int8")
QAT_METHODS = {"qat-int8": "RL-loop QAT", "qat-distill-int8": "distillation QAT"}
AGREE_SHARE, DISAGREE_SHARE = 0.9, 0.5


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
            f"{pct(float(diffs.mean()))} of the fp32-over-random gain.",
            f"{scheme} >= fp32 in {ge_fp32} of {len(pairs)} runs.",
            f"Runs ({scheme}): " + "; ".join(f"{task_name(k[:2])} seed {k[2]}: {pct(d)}"
                                             for k, d, _ in pairs) + "."]


def claims(res: Results, tolerance: float) -> list[dict]:
    """QuaRL's three claims, each {"claim", "verdict", "n", "evidence": [sentences], "summary":
    the key numbers in one line, "tables": [{"title", "columns", "rows" (display strings),
    "collapsed" (optional)}]: the numbers behind the verdict}; all computed from the rows."""
    return [_eight_bits(res, tolerance), _qat_vs_ptq(res, tolerance),
            _weight_range(res)]


def _eight_bits(res: Results, tolerance: float) -> dict:
    """Claim 1: 6-8 bit policies lose no reward."""
    items = []   # (policy, setting, loss)
    for r in res.ok_cells:
        if r["scheme"] in EIGHT_BIT and res.learned(r):
            items.append((f"{task_name(task_of(r))} seed {r['seed']} {r['scheme']}", r["scheme"],
                          res.loss(r)))
    for r in res.sweep:
        if r["mode"] != "fp32" and 6 <= r["bits"] <= 8 and res.learned(r):
            items.append((f"{task_name(task_of(r))} seed {r['seed']} {r['bits']}-bit "
                          f"{r['mode']}", f"{r['bits']}-bit sweep", res.loss(r)))
    items = [it for it in items if it[2] is not None]
    within = [v <= tolerance for _, _, v in items]
    ev, summary, tables = [], "", []
    if items:
        losses = np.array([v for _, _, v in items])
        worst = max(items, key=lambda it: it[2])
        ev.append(f"{sum(within)} of {len(items)} policies at 6-8 bits are within "
                  f"{tolerance:.0%} of their fp32 return (normalised loss: median {pct(np.median(losses))}, "
                  f"worst {pct(worst[2])} for {worst[0]}).")
        by_setting = defaultdict(list)
        for it in items:
            by_setting[it[1]].append(it)
        ev.append("Per setting (mean normalised loss): " + "; ".join(
            f"{k}: {pct(float(np.mean([v for _, _, v in its])))} over {len(its)}"
            for k, its in sorted(by_setting.items())) + ".")
        summary = (f"{sum(within)} of {len(items)} within {tolerance:.0%}; median loss "
                   f"{pct(np.median(losses))}, worst {pct(worst[2])} ({worst[0]})")
        rows = []
        for k, its in sorted(by_setting.items()):
            w = max(its, key=lambda it: it[2])
            rows.append([k, str(len(its)), str(sum(v <= tolerance for _, _, v in its)),
                         pct(float(np.mean([v for _, _, v in its]))), pct(w[2]),
                         w[0].removesuffix(f" {k}")])
        tables.append({"title": "Normalised loss per setting (learned runs)",
                       "columns": ["setting", "policies", f"within {tolerance:.0%}",
                                   "mean loss", "worst loss", "worst policy"], "rows": rows})
    else:
        ev.append(f"No learned run has an 8-bit scheme ({', '.join(EIGHT_BIT)}) or a 6-8 bit "
                  "sweep point.")
        summary = ev[-1]
    return {"claim": "6-8 bit policies lose no reward", "n": len(items),
            "verdict": _share_verdict(sum(within), len(items)), "evidence": ev,
            "summary": summary, "tables": tables}


def _qat_vs_ptq(res: Results, tolerance: float) -> dict:
    """Claim 2: QAT >= PTQ (and often >= fp32): RL-loop QAT and distillation QAT, counted
    apart."""
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
                            pct(float(diffs.mean())), str(ge_fp32), by_method[m]["verdict"]])
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
                       "rows": [[task_name(k[:2]), str(k[2]),
                                 *(pct(per_run[k].get(m)) for m in QAT_METHODS)]
                                for k in sorted(per_run)]})
    summary = ("; ".join(parts) + (" (the verdict is RL-loop QAT's)" if rl and dist else
                                   " (no RL-loop QAT pair: the verdict is distillation's)"
                                   if dist else "")) if parts else ev[0]
    return {"claim": "QAT >= PTQ (and often >= fp32)", "n": len(main),
            "verdict": _share_verdict(sum(d >= -tolerance for _, d, _ in main), len(main)),
            "evidence": ev, "method": "qat-distill-int8" if dist and not rl else "qat-int8",
            "by_method": by_method, "summary": summary, "tables": tables}


def _weight_range(res: Results) -> dict:
    """Claim 3: wider weight distributions quantize worse (a rank correlation)."""
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
                      f"{pct(y[0]) if np.std(y) == 0 else fmt(x[0], 3)}): insufficient data.")
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
    return {"claim": "wider weight distributions quantize worse", "n": n_total,
            "verdict": verdict, "evidence": ev,
            "summary": "; ".join(parts) or "fewer than 4 learned runs, or no variation",
            "tables": tables}


def remedy_table(res: Results) -> list[dict]:
    """Per task with an argmax head: int8 and each tie remedy (mean return, ties, agreement over
    the seeds that have all of them), and which wins."""
    out = []
    for t in res.tasks:
        cells = [r for r in res.ok_cells if task_of(r) == t and r["scheme"] in ("int8", *REMEDIES)]
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
        out.append({"task": task_name(t), "schemes": rows, "winner": winner})
    return out
