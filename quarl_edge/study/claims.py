"""QuaRL's claims, each with a verdict computed from the rows, and the tie remedies' table.

Normalised return loss. A quantized policy's loss is measured against the fp32 network on the
same evaluation seeds, in units of what training gained over a uniformly random policy:

    loss = (R_fp32 - R_q) / |R_fp32 - R_random|

so 0 is no loss, 1 means the quantized policy is as bad as random, and the measure works for
negative returns (Pendulum) and for any reward scale. Runs whose fp32 return does not beat the
random policy are "not learned" and left out of the claims. A loss <= --tolerance counts as no
loss.

The claims (Krishnan et al., Quantized Reinforcement Learning). Each has an effect per training
seed, its mean over seeds with a 95 % percentile-bootstrap interval (seeds resampled within
each task, per task and pooled; statistics.seed_bootstrap), and a verdict decided by the
interval (statistics.interval_verdict), never by a count; with one seed there is no interval and
the verdict is inconclusive:
  1. 6-8 bit policies lose no reward: int8 / dyn-int8 / qat-int8 / qat-distill-int8 cells and
     sweep points with 6..8 bits; effect: a seed's mean loss over them. Agree if the interval's
     upper bound is below the tolerance, disagree if its lower bound is above it.
  2. QAT >= PTQ (and often >= fp32), for two QAT methods, each on its own: RL-loop QAT
     (qat-int8, DQN) and QAT by on-policy distillation from the fp32 network
     (qat-distill-int8, every algorithm), each paired with int8 of the same seed; effect: the
     mean difference (share of the fp32-over-random gain). Agree if the lower bound is above
     -tolerance, disagree if the upper bound is below it. The verdict is the RL-loop method's
     (QuaRL fine-tunes in the RL loop); without any RL-loop pair, the distillation method's.
  3. Wider weight distributions quantize worse: Spearman's rho, over learned runs, between the
     kernels' weight range and the loss (int8 cells; separately the mean loss over the
     sweep's points), with its bootstrap interval and a permutation p-value. Agree if the
     lower bound is above 0, disagree if the upper bound is below 0; fewer than 4 runs, or no
     variation in the loss, is insufficient data.
  4. 4-bit weights lose no reward (QuaRL's journal version: 4-5 bit policies), once per method,
     and only in a study with such cells: post-training (int8x4: int8 activations, int4
     weights), quantization-aware in the RL loop (qat-int8x4, DQN) and by distillation
     (qat-distill-int8x4, every algorithm); effect and rule as claim 1's (a seed's loss; agree
     if the upper bound is below the tolerance). Each QAT claim also pairs its cells with
     int8x4 of the same seed, as claim 2 pairs QAT with int8.

Tie remedies (quarl_edge/quant/remedies.py) for argmax heads: per task, int8 against int8-centred,
int8-acc and int8-i16head (mean return over seeds, ties, agreement); the winner is the highest
mean return (several when equal; "all equal" when no scheme differs).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from .render import fmt, pct
from .results import Results, episodes_per_seed, task_name, task_of
from .statistics import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, LEVEL, interval_verdict,
                         permutation_p, seed_bootstrap, spearman)

REMEDIES = ("int8-centred", "int8-acc", "int8-centred-acc", "int8-i16head")   # quarl_edge/quant/remedies.py
EIGHT_BIT = ("int8", "dyn-int8", "qat-int8", "qat-distill-int8")
QAT_METHODS = {"qat-int8": "RL-loop QAT", "qat-distill-int8": "distillation QAT"}
FOUR_BIT = {"int8x4": "post-training", "qat-int8x4": "quantization-aware, in the RL loop",
            "qat-distill-int8x4": "quantization-aware, by distillation"}


def _qat_pairs(res: Results, by_run: dict, scheme: str, ptq: str = "int8") -> list[tuple]:
    """(run key, (R_qat - R_ptq) / gain, loss of the QAT cell) for each learned run with both
    (`ptq`: int8, or int8x4 for the 4-bit QAT)."""
    pairs = []
    for key, cells in sorted(by_run.items()):
        if scheme in cells and ptq in cells and res.learned(cells[ptq]):
            run = res.runs[key]
            gain = abs(run["fp32_return"] - run["random_return"])
            diff = (cells[scheme]["mean_return"] - cells[ptq]["mean_return"]) / gain
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


# --- how sure we are: per task and pooled, a bootstrap interval over training seeds ---------------

def _n_text(st: dict, episodes: str) -> str:
    per = sorted(set(st["seeds_per_task"]))
    tasks = len(st["seeds_per_task"])
    return (f"n = {st['n_seeds']} training seed(s)"
            + (f" over {tasks} tasks ({'/'.join(map(str, per))} per task)" if tasks > 1 else "")
            + f", {episodes} episodes per seed")


def _ci_text(st: dict, show=pct) -> str:
    if st["ci"] is None:
        return f"no interval ({st['note']})"
    return f"95 % CI [{show(st['ci'][0])}, {show(st['ci'][1])}]"


def _interval_stats(by_run: dict, bound: float, agree: str, statistic=None) -> dict:
    """`by_run`: {(algo, env, seed): item}. Per task and pooled: the effect, its bootstrap
    interval over seeds, n and the verdict the interval gives."""
    tasks = defaultdict(list)
    for key in sorted(by_run, key=str):
        tasks[key[:2]].append(by_run[key])
    per_task = []
    for t, items in sorted(tasks.items()):
        st = seed_bootstrap([items], statistic)
        per_task.append({"task": task_name(t), **st,
                         "verdict": interval_verdict(st["ci"], bound, agree)})
    pooled = seed_bootstrap(list(tasks.values()), statistic)
    pooled["verdict"] = (interval_verdict(pooled["ci"], bound, agree) if by_run
                         else "insufficient data")
    return {**pooled, "per_task": per_task}


def _stats_table(title: str, st: dict, episodes: str, show=pct) -> dict:
    rows = [[t["task"], str(t["n_seeds"]), episodes, show(t["effect"]),
             _ci_text(t, show).removeprefix("95 % CI "), t["verdict"]] for t in st["per_task"]]
    rows.append(["**pooled**", str(st["n_seeds"]), episodes, show(st["effect"]),
                 _ci_text(st, show).removeprefix("95 % CI "), f"**{st['verdict']}**"])
    return {"title": title, "columns": ["task", "seeds (n)", "episodes per seed", "effect",
                                         "95 % CI over seeds", "verdict by the rule"],
            "rows": rows}


def _claim_stats(st: dict, episodes: str, effect: str, test: str, rule: str) -> dict:
    """What claims.json carries about how sure the verdict is."""
    return {"effect_name": effect, "effect": st["effect"], "ci": st["ci"], "ci_note": st["note"],
            "n_seeds": st["n_seeds"], "seeds_per_task": st["seeds_per_task"],
            "episodes_per_seed": episodes, "test": test, "rule": rule,
            "per_task": [{k: t[k] for k in ("task", "effect", "ci", "n_seeds", "verdict")}
                         for t in st["per_task"]]}


BOOTSTRAP_TEXT = (f"Intervals: percentile bootstrap, {BOOTSTRAP_RESAMPLES} resamples of the "
                  f"training seeds within each task (episodes are not resampled; RNG seed "
                  f"{BOOTSTRAP_SEED}, so the report reproduces), {LEVEL:.0%} level. A task with "
                  "one seed has no interval, and a claim without an interval is inconclusive. With 2-3 "
                  "seeds per task a bootstrap interval is too narrow (a resample of 2 seeds has "
                  "3 distinct means): read it as the least the uncertainty can be. The tasks "
                  "are held fixed: the interval is over seeds, not over which tasks were run.")


def claims(res: Results, tolerance: float) -> list[dict]:
    """QuaRL's claims, each {"claim", "verdict", "n", "evidence": [sentences], "summary":
    the key numbers in one line, "tables": [{"title", "columns", "rows" (display strings),
    "collapsed" (optional)}]: the numbers behind the verdict}; all computed from the rows.
    The three of the paper always; the 4-bit ones where the study has 4-bit cells."""
    return [_eight_bits(res, tolerance), _qat_vs_ptq(res, tolerance),
            _weight_range(res), *(_four_bits(res, tolerance, scheme) for scheme in FOUR_BIT
                                  if any(r["scheme"] == scheme for r in res.cells))]


def _eight_bits(res: Results, tolerance: float) -> dict:
    """Claim 1: 6-8 bit policies lose no reward."""
    items = []   # (policy, setting, loss)
    per_run = defaultdict(list)   # the effect per training seed: its policies' mean loss
    for r in res.ok_cells:
        if r["scheme"] in EIGHT_BIT and res.learned(r):
            items.append((f"{task_name(task_of(r))} seed {r['seed']} {r['scheme']}", r["scheme"],
                          res.loss(r)))
            per_run[(r["algo"], r["env"], r["seed"])].append(res.loss(r))
    for r in res.sweep:
        if r["mode"] != "fp32" and 6 <= r["bits"] <= 8 and res.learned(r):
            items.append((f"{task_name(task_of(r))} seed {r['seed']} {r['bits']}-bit "
                          f"{r['mode']}", f"{r['bits']}-bit sweep", res.loss(r)))
            per_run[(r["algo"], r["env"], r["seed"])].append(res.loss(r))
    per_run = {k: [v for v in vs if v is not None] for k, vs in per_run.items()}
    per_run = {k: vs for k, vs in per_run.items() if vs}
    items = [it for it in items if it[2] is not None]
    within = [v <= tolerance for _, _, v in items]
    st = _interval_stats({k: float(np.mean(v)) for k, v in per_run.items()}, tolerance, "below")
    episodes = episodes_per_seed(res)
    rule = (f"Effect: the mean normalised loss of a training seed's 6-8 bit policies, averaged "
            f"over seeds. Agree when the upper bound of its 95 % interval is below the "
            f"{tolerance:.0%} tolerance, disagree when the lower bound is above it, otherwise "
            "(or without an interval) inconclusive.")
    ev, summary, tables = [], "", []
    if items:
        ev.append(f"Mean loss {pct(st['effect'])}, {_ci_text(st)}, {_n_text(st, episodes)} "
                  f"-> {st['verdict']}.")
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
        summary = (f"mean loss {pct(st['effect'])}, {_ci_text(st)} ({_n_text(st, episodes)}); "
                   f"{sum(within)} of {len(items)} policies within {tolerance:.0%}, worst "
                   f"{pct(worst[2])} ({worst[0]})")
        tables.append(_stats_table("Mean normalised loss per training seed (6-8 bit policies), "
                                   "per task and pooled", st, episodes))
        rows = []
        for k, its in sorted(by_setting.items()):
            w = max(its, key=lambda it: it[2])
            rows.append([k, str(len(its)), str(sum(v <= tolerance for _, _, v in its)),
                         pct(float(np.mean([v for _, _, v in its]))), pct(w[2]),
                         w[0].removesuffix(f" {k}")])
        tables.append({"title": f"Normalised loss per setting (learned runs; {episodes} "
                                f"episodes per policy)",
                       "columns": ["setting", "policies (n)", f"within {tolerance:.0%}",
                                   "mean loss", "worst loss", "worst policy"], "rows": rows})
    else:
        ev.append(f"No learned run has an 8-bit scheme ({', '.join(EIGHT_BIT)}) or a 6-8 bit "
                  "sweep point.")
        summary = ev[-1]
    return {"claim": "6-8 bit policies lose no reward", "n": len(items),
            "verdict": st["verdict"] if items else "insufficient data",
            **_claim_stats(st, episodes, "mean normalised loss of 6-8 bit policies per seed",
                           "percentile bootstrap of the mean over training seeds", rule),
            "evidence": ev, "summary": summary, "tables": tables}


def _four_bits(res: Results, tolerance: float, scheme: str) -> dict:
    """Claim 4, for one method (FOUR_BIT): policies with 4-bit weights lose no reward. Each
    learned run's loss; the interval over seeds decides as in claim 1. Beside it, the same
    runs at int8, and for QAT the pairs with int8x4 of the same seed (QAT >= PTQ at 4 bits)."""
    method = FOUR_BIT[scheme]
    cells = {(r["algo"], r["env"], r["seed"]): r for r in res.ok_cells
             if r["scheme"] == scheme and res.learned(r) and res.loss(r) is not None}
    per_run = {k: res.loss(r) for k, r in cells.items()}
    st = _interval_stats(per_run, tolerance, "below")
    episodes = episodes_per_seed(res)
    claim = f"4-bit weights lose no reward ({method}: {scheme})"
    rule = (f"Effect: a training seed's normalised loss with {scheme}, averaged over seeds. "
            f"Agree when the upper bound of its 95 % interval is below the {tolerance:.0%} "
            "tolerance, disagree when the lower bound is above it, otherwise (or without an "
            "interval) inconclusive.")
    if not per_run:
        skipped = [r for r in res.cells if r["scheme"] == scheme and r.get("status") == "skipped"]
        text = (f"No learned run has a cell of {scheme}"
                + (f" ({len(skipped)} skipped: {skipped[0].get('reason')})" if skipped else "")
                + ".")
        return {"claim": claim, "n": 0, "verdict": "insufficient data",
                **_claim_stats(st, episodes, f"mean normalised loss of {scheme} per seed",
                               "percentile bootstrap of the mean over training seeds", rule),
                "evidence": [text], "summary": text, "tables": []}
    losses = np.array(list(per_run.values()))
    worst = max(per_run, key=per_run.get)
    within = int(np.sum(losses <= tolerance))
    ev = [f"Mean loss {pct(st['effect'])}, {_ci_text(st)}, {_n_text(st, episodes)} -> "
          f"{st['verdict']}.",
          f"{within} of {len(per_run)} {scheme} policies are within {tolerance:.0%} of their fp32 "
          f"return (median loss {pct(float(np.median(losses)))}, worst {pct(per_run[worst])} for "
          f"{task_name(worst[:2])} seed {worst[2]})."]
    int8 = {(r["algo"], r["env"], r["seed"]): res.loss(r) for r in res.ok_cells
            if r["scheme"] == "int8" and res.learned(r) and res.loss(r) is not None}
    same = [k for k in per_run if k in int8]
    if same:
        ev.append(f"The same {len(same)} runs at int8: mean loss "
                  f"{pct(float(np.mean([int8[k] for k in same])))}.")
    tables = [_stats_table(f"Normalised loss of {scheme} per training seed, per task and pooled",
                           st, episodes)]
    if scheme != "int8x4":
        diffs = {k: d for k, d, _ in _qat_pairs(res, _cells_by_run(res), scheme, ptq="int8x4")
                 if k in cells}
        if diffs:
            pst = _interval_stats(diffs, -tolerance, "above")
            ev.append(f"{scheme} − int8x4 (paired by training seed): mean {pct(pst['effect'])} "
                      f"of the fp32-over-random gain, {_ci_text(pst)}, {_n_text(pst, episodes)}: "
                      f"QAT >= PTQ at 4 bits -> {pst['verdict']} (claim 2's rule).")
            tables.append(_stats_table(f"{scheme} − int8x4 per task and pooled (mean "
                                       "difference over seeds, % of the gain)", pst, episodes))
    summary = (f"mean loss {pct(st['effect'])}, {_ci_text(st)} ({_n_text(st, episodes)}); "
               f"{within} of {len(per_run)} within {tolerance:.0%}")
    return {"claim": claim, "n": len(per_run), "verdict": st["verdict"], "scheme": scheme,
            **_claim_stats(st, episodes, f"mean normalised loss of {scheme} per seed",
                           "percentile bootstrap of the mean over training seeds", rule),
            "evidence": ev, "summary": summary, "tables": tables}


def _qat_vs_ptq(res: Results, tolerance: float) -> dict:
    """Claim 2: QAT >= PTQ (and often >= fp32): RL-loop QAT and distillation QAT, counted
    apart."""
    pairs = _qat_method_pairs(res)
    rl, dist = pairs["qat-int8"], pairs["qat-distill-int8"]
    episodes = episodes_per_seed(res)
    stats = {m: _interval_stats({k: d for k, d, _ in p}, -tolerance, "above")
             for m, p in pairs.items()}
    ev = [f"{m} − int8 (paired by training seed): mean {pct(stats[m]['effect'])} of the "
          f"fp32-over-random gain, {_ci_text(stats[m])}, {_n_text(stats[m], episodes)} -> "
          f"{stats[m]['verdict']}." for m, p in pairs.items() if p]
    ev += _qat_method_evidence(res, rl, dist, stats, tolerance)
    main = rl or dist
    by_method = {}
    for m, p in pairs.items():
        n_ok = sum(d >= -tolerance for _, d, _ in p)
        by_method[m] = {"n": len(p), "ok": n_ok, "verdict": stats[m]["verdict"],
                        "effect": stats[m]["effect"], "ci": stats[m]["ci"]}
    parts = [f"{m} − int8 {pct(stats[m]['effect'])}, {_ci_text(stats[m])} "
             f"({_n_text(stats[m], episodes)}; >= int8 in {by_method[m]['ok']} of {len(p)})"
             for m, p in pairs.items() if p]
    summary = ("; ".join(parts) + (" (the verdict is RL-loop QAT's)" if rl and dist else
                                   " (no RL-loop QAT pair: the verdict is distillation's)"
                                   if dist else "")) if parts else ev[0]
    method = "qat-distill-int8" if dist and not rl else "qat-int8"
    return {"claim": "QAT >= PTQ (and often >= fp32)", "n": len(main),
            "verdict": stats[method]["verdict"] if main else "insufficient data",
            **_claim_stats(stats[method], episodes, f"mean paired difference {method} − int8 "
                           "(share of the fp32-over-random gain)",
                           "paired bootstrap of the mean difference over training seeds",
                           _qat_rule(method, tolerance)),
            "evidence": ev, "method": method,
            "by_method": by_method, "summary": summary,
            "tables": _qat_tables(pairs, stats, by_method, episodes, tolerance)}


def _qat_method_pairs(res: Results) -> dict[str, list[tuple]]:
    """Per QAT method, its pairs with int8 of the same run (see _qat_pairs)."""
    by_run = _cells_by_run(res)
    return {m: _qat_pairs(res, by_run, m) for m in QAT_METHODS}


def _cells_by_run(res: Results) -> dict:
    """{(algo, env, seed): {scheme: its ok cell row}}."""
    by_run = defaultdict(dict)
    for r in res.ok_cells:
        by_run[(r["algo"], r["env"], r["seed"])][r["scheme"]] = r
    return by_run


def _qat_method_evidence(res: Results, rl: list, dist: list, stats: dict,
                         tolerance: float) -> list[str]:
    """The sentences on each method's runs: RL-loop QAT's (or why there are none), then
    distillation QAT's, with its own verdict and how it fares where both methods ran."""
    ev = []
    if rl:
        ev += _qat_evidence("qat-int8", rl, tolerance, "RL-loop QAT")
    else:
        skipped = [r for r in res.cells if r["scheme"] == "qat-int8" and r.get("status") == "skipped"]
        ev.append("No learned run has both qat-int8 and int8 cells"
                  + (f" ({len(skipped)} qat-int8 cells skipped: {skipped[0].get('reason')})"
                     if skipped else "") + ".")
    if dist:
        text = _qat_evidence("qat-distill-int8", dist, tolerance,
                             "Distillation QAT (on-policy distillation from the fp32 network, "
                             "all algorithms), counted separately")
        text.insert(1, f"Verdict on distillation QAT alone: {stats['qat-distill-int8']['verdict']}"
                       + ("; the claim's verdict is RL-loop QAT's." if rl else
                          "; with no RL-loop QAT pair, it is the claim's verdict."))
        both = {k: d for k, d, _ in dist}, {k: d for k, d, _ in rl}
        common = sorted(set(both[0]) & set(both[1]))
        if common:
            wins = sum(both[0][k] >= both[1][k] for k in common)
            text.insert(2, f"Where both methods ran ({len(common)} runs), qat-distill-int8 >= "
                           f"qat-int8 in {wins}.")
        ev += text
    return ev


def _qat_tables(pairs: dict, stats: dict, by_method: dict, episodes: str,
                tolerance: float) -> list[dict]:
    """Claim 2's tables: each method against int8, each method's interval per task and pooled,
    and the per-run differences (collapsed); none without a pair."""
    method_rows = []
    for m, p in pairs.items():
        if not p:
            continue
        diffs = np.array([d for _, d, _ in p])
        ge_fp32 = sum(loss is not None and loss <= 0 for _, _, loss in p)
        method_rows.append([f"{m} ({QAT_METHODS[m]})", str(len(p)), str(by_method[m]["ok"]),
                            str(int(np.sum(diffs > 0))), str(int(np.sum(diffs == 0))),
                            pct(float(diffs.mean())), str(ge_fp32), by_method[m]["verdict"]])
    if not method_rows:
        return []
    tables = [{"title": "Each QAT method against int8 of the same run (differences in "
                        "% of the fp32-over-random gain)",
               "columns": ["method", "runs (n seeds)", f"≥ int8 (within {tolerance:.0%})",
                           "better", "equal", "mean difference", "≥ fp32", "verdict"],
               "rows": method_rows}]
    for m, p in pairs.items():
        if p:
            tables.append(_stats_table(f"{m} − int8 per task and pooled (mean difference "
                                       "over seeds, % of the gain)", stats[m], episodes))
    per_run = defaultdict(dict)
    for m, p in pairs.items():
        for k, d, _ in p:
            per_run[k][m] = d
    tables.append({"title": "Per run: QAT minus int8", "collapsed": True,
                   "columns": ["task", "seed", *(f"{m} − int8" for m in QAT_METHODS)],
                   "rows": [[task_name(k[:2]), str(k[2]),
                             *(pct(per_run[k].get(m)) for m in QAT_METHODS)]
                            for k in sorted(per_run)]})
    return tables


def _qat_rule(method: str, tolerance: float) -> str:
    """How claim 2's verdict is decided, in words."""
    return (f"Effect: {method} minus int8 of the same training seed, in units of the "
            f"fp32-over-random gain, averaged over seeds. Agree when the lower bound of its 95 % "
            f"interval is above -{tolerance:.0%} (QAT at least as good as PTQ within the "
            f"tolerance), disagree when the upper bound is below -{tolerance:.0%}, otherwise (or "
            "without an interval) inconclusive.")


WEIGHT_RULE = ("Effect: Spearman's rho between a run's kernel weight range and its loss (int8; "
               "separately the mean loss over the n-bit sweep). Agree when the lower bound of its "
               "95 % interval is above 0, disagree when the upper bound is below 0, otherwise (or "
               "without an interval) inconclusive; with two comparisons that differ, mixed. The "
               "permutation p-value beside it treats every run as exchangeable (it also doubts "
               "the tasks), so it can be larger than the interval suggests.")


def _weight_range(res: Results) -> dict:
    """Claim 3: wider weight distributions quantize worse (a rank correlation)."""
    episodes = episodes_per_seed(res)
    comparisons = [_correlation(res, label, losses, episodes)
                   for label, losses in (("int8 loss", _int8_losses(res)),
                                         ("mean n-bit sweep loss", _sweep_losses(res)))]
    ev = [c["evidence"] for c in comparisons]
    stats = [c["stats"] for c in comparisons if c["stats"] is not None]
    parts = [c["part"] for c in comparisons if c["part"] is not None]
    n_total = max(c["n"] for c in comparisons)
    tables = [{"title": "Spearman rank correlation over learned runs (bootstrap interval over "
                        f"seeds; permutation p-value; {episodes} episodes per seed)",
               "columns": ["comparison", "runs (n seeds)", "rho", "95 % CI", "p", "verdict"],
               "rows": [c["row"] for c in comparisons]}]
    ev_algo, table_algo = _weights_per_algorithm(res)
    if table_algo is not None:
        ev.append(ev_algo)
        tables.append(table_algo)
    decided = [c["verdict"] for c in comparisons if c["verdict"] != "insufficient data"]
    verdict = ("insufficient data" if not decided else decided[0] if len(set(decided)) == 1
               else "mixed: " + ", ".join(decided))
    main = stats[0] if stats else seed_bootstrap([])
    main.setdefault("per_task", [])
    return {"claim": "wider weight distributions quantize worse", "n": n_total,
            "verdict": verdict,
            **_claim_stats(main, episodes, "Spearman rho, weight range vs "
                           + main.get("comparison", "loss"),
                           "Spearman rank correlation, percentile bootstrap over training seeds "
                           "(and a permutation p-value)", WEIGHT_RULE),
            "comparisons": [{k: st[k] for k in ("comparison", "effect", "ci", "n_seeds",
                                                "verdict")} for st in stats],
            "evidence": ev,
            "summary": "; ".join(parts) or "fewer than 4 learned runs, or no variation",
            "tables": tables}


def _int8_losses(res: Results) -> dict:
    """{(algo, env, seed): the int8 cell's loss} over learned runs."""
    return {(r["algo"], r["env"], r["seed"]): res.loss(r) for r in res.ok_cells
            if r["scheme"] == "int8" and res.learned(r)}


def _sweep_losses(res: Results) -> dict:
    """{(algo, env, seed): the mean loss over the run's n-bit sweep points} over learned
    runs."""
    sweep_loss = defaultdict(list)
    for r in res.sweep:
        if r["mode"] != "fp32" and res.learned(r) and res.loss(r) is not None:
            sweep_loss[(r["algo"], r["env"], r["seed"])].append(res.loss(r))
    return {k: float(np.mean(v)) for k, v in sweep_loss.items()}


def _rho_of(items) -> float | None:
    """Spearman's rho of drawn runs' (weight range, loss)."""
    return spearman([x for x, _ in items], [y for _, y in items])


def _correlation(res: Results, label: str, losses: dict, episodes: str) -> dict:
    """One comparison of claim 3, weight range against `losses`: its evidence sentence,
    verdict, table row, interval statistics (None without an interval) and summary part
    (None when the data are insufficient); n is the runs compared."""
    pts = {k: (res.runs[k]["weights"]["all"]["range"], v) for k, v in losses.items()
           if v is not None}
    out = {"n": len(pts), "verdict": "insufficient data", "stats": None, "part": None}
    if len(pts) < 4:
        return {**out, "evidence": f"Weight range vs {label}: {len(pts)} learned run(s), fewer "
                                   "than 4: insufficient data.",
                "row": [f"weight range vs {label}", str(len(pts)), "-", "-", "-",
                        "insufficient data (fewer than 4 runs)"]}
    x = [a for a, _ in pts.values()]
    y = [b for _, b in pts.values()]
    rho = spearman(x, y)
    if rho is None:
        return {**out, "evidence": f"Weight range vs {label} over {len(pts)} runs: no variation in "
                                   f"{'the loss' if np.std(y) == 0 else 'the range'} (all "
                                   f"{pct(y[0]) if np.std(y) == 0 else fmt(x[0], 3)}): "
                                   "insufficient data.",
                "row": [f"weight range vs {label}", str(len(pts)), "-", "-", "-",
                        "insufficient data (no variation)"]}
    st = _interval_stats(pts, 0.0, "above", _rho_of)
    st["comparison"] = label
    p = permutation_p(x, y, rho)
    v = st["verdict"]
    ci = _ci_text(st, lambda r: f"{r:+.2f}")
    return {"n": len(pts), "verdict": v, "stats": st,
            "evidence": f"Weight range vs {label}: Spearman rho = {rho:+.2f}, {ci}, "
                        f"{_n_text(st, episodes)} (permutation p = {p:.3f}) -> {v}.",
            "row": [f"weight range vs {label}", str(len(pts)), f"{rho:+.2f}",
                    ci.removeprefix("95 % CI "), f"{p:.3f}", v],
            "part": f"rho {rho:+.2f}, {ci} vs {label} ({_n_text(st, episodes)})"}


def _weights_per_algorithm(res: Results) -> tuple[str | None, dict | None]:
    """The kernel weights' range and kurtosis per algorithm (mean over runs), as a sentence and
    a table; (None, None) without runs."""
    per_algo = defaultdict(list)
    for run in res.runs.values():
        per_algo[run["algo"]].append(run["weights"]["all"])
    if not per_algo:
        return None, None
    sentence = "Weight range per algorithm (mean over runs): " + "; ".join(
        f"{a.upper()} {np.mean([s['range'] for s in v]):.2f} (kurtosis "
        f"{np.mean([s['kurtosis'] for s in v]):.1f}, {len(v)} runs)"
        for a, v in sorted(per_algo.items())) + "."
    table = {"title": "Kernel weights per algorithm (mean over runs)",
             "columns": ["algorithm", "runs", "weight range", "kurtosis"],
             "rows": [[a.upper(), str(len(v)),
                       f"{np.mean([s['range'] for s in v]):.2f}",
                       f"{np.mean([s['kurtosis'] for s in v]):.1f}"]
                      for a, v in sorted(per_algo.items())]}
    return sentence, table


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
