"""A study's results as a report: Markdown and one self-contained HTML file (no external CSS,
script or image: the figures are embedded as data: URIs; the PNG files are also written next to
the Markdown), with a verdict on each of QuaRL's claims computed from the rows.

    quarl-edge report RESULTS.jsonl [--out DIR] [--tolerance 0.05] [--bench BENCH.jsonl ...]

Writes DIR/report.md, DIR/report.html and the figures (matplotlib, Agg backend; never wider
than MAX_WIDTH_PX, whatever the number of tasks):

    return_vs_scheme.png  greedy return per scheme for each (algo, env), one point per seed;
                             the return axis spans the plotted returns (the random policy's
                             return is a note when it falls outside)
    return_vs_bits.png       the n-bit sweep: return vs bits per mode
    weight_histograms.png    the kernels' weight distribution per algorithm (pooled over runs)
    model_size.png           .tflite size per (algo, env) and scheme, as a grid
    pareto_<board>.png       per board: return vs cost per inference, marker area = flash
    perop.png                per-op cost, one policy per network family (perop_section.py;
                             only when the results hold per-op rows)

The claims are one table (claim, verdict, n, the key numbers), then the tables of numbers
behind each verdict. Cells skipped because their scheme does not apply to the task
(plan.not_applicable: qat-int8 outside DQN, the tie remedies for continuous actions) are said
once per rule; only other skipped or failed rows are listed.

The claims, the board section, the per-op section, the figures and the rendering are modules
of their own (claims.py, board_section.py, perop_section.py, figures.py, render.py: their
docstrings say how each is computed).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.files import write_atomic
from .board_section import board_blocks, board_cells, int8_vs_fp32
from .claims import BOOTSTRAP_TEXT, claims, remedy_table
from .figures import (fig_model_size, fig_pareto, fig_perop, fig_return_vs_bits,
                      fig_return_vs_scheme, fig_weight_histograms, pareto_name)
from .perop_section import perop_blocks, perop_figure_data
from .plan import BOARD_KINDS, not_applicable, scope
from .render import fmt, pct, to_html, to_markdown
from .results import (Results, episodes_per_seed, ordered_schemes, read_results, task_name,
                      task_of)
from .statistics import reward_threshold


def _blocks(res: Results, tolerance: float, figures: dict[str, bool], source: Path,
            found: list[dict], bench: list[Path] = ()) -> list:
    """The report's document (render.py's blocks), section by section; `found`: claims(res,
    tolerance), computed once by the caller (its bootstraps are most of a report's time)."""
    return [*_head_blocks(res, tolerance, source, bench), *_claim_blocks(found),
            *_training_blocks(res), *_scheme_blocks(res, figures), *_remedy_blocks(res),
            *_sweep_blocks(res, figures), *_figure_blocks(figures), *board_blocks(res, figures),
            *perop_blocks(res, figures), *_skip_blocks(res)]


def _head_blocks(res: Results, tolerance: float, source: Path, bench: list[Path]) -> list:
    """The title, the source and its rows, the tasks and seeds, what the normalised loss is."""
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
    return B


def _claim_blocks(found: list[dict]) -> list:
    """The claims (`claims()`'s list): one table of verdicts, then the numbers behind each."""
    B = []
    B.append(("h", 2, "QuaRL's claims against these measurements"))
    B.append(("p", "Each verdict is decided by a 95 % interval over training seeds, not by a "
                   "count; the rule is stated under each claim. " + BOOTSTRAP_TEXT))
    B.append(("table", ["claim", "our data", "n", "the numbers"],
              [[c["claim"], f"**{c['verdict']}**", f"{c['n']} ({c['n_seeds']} seeds × "
                f"{c['episodes_per_seed']} episodes)", c["summary"]] for c in found]))
    for i, c in enumerate(found, 1):
        B.append(("h", 3, f"{i}. {c['claim']}: {c['verdict']}"))
        B.append(("p", f"Test: {c['test']}. Rule: {c['rule']}"))
        for t in c["tables"]:
            table = ("table", t["columns"], t["rows"])
            B.append(("details", t["title"], table) if t.get("collapsed") else ("p", f"{t['title']}:"))
            if not t.get("collapsed"):
                B.append(table)
    return B


def _training_blocks(res: Results) -> list:
    """The training runs: one row per run, the runs below the reward threshold, the
    per-layer kernel statistics."""
    B = []
    B.append(("h", 2, "Training runs"))
    rows, unsolved = [], []
    solved_at = {env: reward_threshold(env) for _, env, _ in res.runs}
    for k, r in sorted(res.runs.items()):
        w, threshold = r["weights"]["all"], solved_at[k[1]]
        rows.append([task_name(k[:2]), str(k[2]), f"{r.get('steps') or '-'}",
                     fmt(r.get("train_seconds"), 0), fmt(r.get("best_validation_return")),
                     fmt(r["fp32_return"]), fmt(r.get("random_return")), fmt(threshold),
                     f"{w['range']:.3f}", f"{w['std']:.3f}", f"{w['kurtosis']:.2f}"])
        if threshold is not None and r["fp32_return"] < threshold:
            unsolved.append(f"{task_name(k[:2])} seed {k[2]} ({fmt(r['fp32_return'])} < "
                            f"{fmt(threshold)})")
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
            per_layer.append([task_name(k[:2]), str(k[2]), str(layer["layer"]),
                              "x".join(map(str, layer["shape"])), f"{layer['min']:.3f}",
                              f"{layer['max']:.3f}", f"{layer['range']:.3f}",
                              f"{layer['std']:.3f}", f"{layer['kurtosis']:.2f}"])
    if per_layer:
        B.append(("details", "Per-layer kernel statistics",
                  ("table", ["task", "seed", "layer", "shape", "min", "max", "range", "std",
                             "kurtosis"], per_layer)))
    return B


def _scheme_blocks(res: Results, figures: dict[str, bool]) -> list:
    """Return per scheme: the figure and one row per task and scheme."""
    B = []
    B.append(("h", 2, "Return per scheme"))
    if figures.get("return_vs_scheme"):
        B.append(("img", "return_vs_scheme.png", "return per scheme"))
    rows = []
    for t in res.tasks:
        cells = [r for r in res.ok_cells if task_of(r) == t]
        for s in ordered_schemes(cells):
            cs = [r for r in cells if r["scheme"] == s]
            ret = [r["mean_return"] for r in cs]
            losses = [res.loss(r) for r in cs]
            losses = [v for v in losses if v is not None]
            agree = [r["agreement"] for r in cs if r.get("agreement") is not None]
            kl = [r["kl"] for r in cs if r.get("kl") is not None]
            rows.append([task_name(t), s, str(len(cs)),
                         f"{np.mean(ret):,.1f} ± {np.std(ret):,.1f}",
                         pct(float(np.mean(losses))) if losses else "-",
                         f"{np.mean(agree):.3f}" if agree else "-",
                         f"{np.mean(kl):.2e}" if kl else "-",
                         f"{int(np.mean([r['size_bytes'] for r in cs])):,}"])
    B.append(("table", ["task", "scheme", "seeds (n)", f"return (mean ± std over seeds; "
                        f"{episodes_per_seed(res)} episodes per seed)",
                        "normalised loss", "agreement", "KL(fp32‖q)", "size (B)"], rows))
    B.append(("p", "Agreement: share of the states visited by the fp32 policy where the model "
                   "picks the same action (continuous: 1 - mean |a - a_fp32| / action range). "
                   "KL: mean KL divergence of the action distributions over those states, "
                   "for PPO: softmax of the logits (discrete), or the Gaussian around the "
                   "network's action with the policy's own std (continuous; the std is not "
                   "quantized). DQN, SAC, TD3 and DDPG deploy a deterministic action: no KL."))
    return B


def _remedy_blocks(res: Results) -> list:
    """The tie remedies for argmax heads, when the study has any."""
    B = []
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
                             pct(v["loss"]), f"{v['ties']:.3f}", f"{v['agreement']:.3f}",
                             item["winner"] if s == "int8" else ""])
        B.append(("table", ["task", "scheme", "seeds", f"return (mean ± std over seeds; "
                            f"{episodes_per_seed(res)} episodes per seed)",
                            "normalised loss", "ties", "agreement", "winner"], rows))
    return B


def _sweep_blocks(res: Results, figures: dict[str, bool]) -> list:
    """The n-bit sweep: the figure and one row per task, mode and bits."""
    B = []
    B.append(("h", 2, "n-bit sweep"))
    if figures.get("return_vs_bits"):
        B.append(("img", "return_vs_bits.png", "return vs bits"))
        rows = []
        for t in sorted({task_of(r) for r in res.sweep}):
            pts = [r for r in res.sweep if task_of(r) == t]
            for mode in ["fp32"] + sorted({r["mode"] for r in pts} - {"fp32"}):
                for b in sorted({r["bits"] for r in pts if r["mode"] == mode}):
                    rs = [r for r in pts if r["mode"] == mode and r["bits"] == b]
                    losses = [v for v in (res.loss(r) for r in rs) if v is not None]
                    rows.append([task_name(t), mode, str(b), str(len(rs)),
                                 fmt(float(np.mean([r["mean_return"] for r in rs]))),
                                 pct(float(np.mean(losses))) if losses else "-",
                                 f"{np.mean([r['agreement'] for r in rs]):.3f}"])
        B.append(("table", ["task", "mode", "bits", "seeds (n)", f"return (mean over seeds; "
                            f"{episodes_per_seed(res)} episodes per seed)", "normalised loss",
                            "agreement"], rows))
    else:
        B.append(("p", "No sweep rows in the results."))
    return B


def _figure_blocks(figures: dict[str, bool]) -> list:
    """The weight histograms and model sizes: a figure each."""
    B = []
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
    return B


def _skip_blocks(res: Results) -> list:
    """Skipped and failed rows: the schemes that do not apply to every task, said once per
    rule, then every other row that is not ok."""
    B = []
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
            if r["kind"] in BOARD_KINDS:
                what += f" on {r.get('board')}"
            grouped[(r["kind"], task_name(task_of(r)), what, str(r.get("status")),
                     str(r.get("reason", "")))].append(str(r.get("seed")))
        rows = [[k[0], k[1], ",".join(seeds), k[2], k[3], k[4]] for k, seeds in grouped.items()]
        B.append(("p", "Other skipped or failed rows:"))
        B.append(("table", ["kind", "task", "seeds", "what", "status", "reason"], rows))
    elif expected:
        B.append(("p", "No other row was skipped or failed."))
    return B


def _skips(res: Results) -> tuple[dict, list]:
    """The rows that are not ok, split: {scheme: [cells]} skipped because the scheme does not
    apply to the task (plan.not_applicable), and every other row (errors, other skips)."""
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
    by_rule = defaultdict(list)
    for scheme in ordered_schemes([{"scheme": s} for s in expected]):
        tasks = tuple(sorted({task_name(task_of(r)) for r in expected[scheme]}))
        by_rule[(scope(scheme), tasks)].append(scheme)
    return {(tuple(schemes), why): (list(tasks), sum(len(expected[s]) for s in schemes))
            for (why, tasks), schemes in by_rule.items()}


def read_bench(path: Path) -> list[dict]:
    """The rows of a `quarl-edge bench` JSON-lines file (quarl_edge/measure/rows.py's BenchRow,
    older rows migrated by read_results); each must name its board and scheme."""
    path = Path(path)
    if not path.is_file():
        raise QuarlError(f"no bench file {path}")
    rows = read_results(path)
    bad = [r for r in rows if not {"board", "scheme"} <= set(r)]
    if bad or not rows:
        raise QuarlError(f"{path}: not a bench file (each line is a row of `quarl-edge bench`, "
                         "with board and scheme)")
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
    bad = [r for r in rows if r.get("kind") not in ("run", "cell", "sweep", "board", "perop")]
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
        "return_vs_scheme": fig_return_vs_scheme(res, out / "return_vs_scheme.png"),
        "return_vs_bits": fig_return_vs_bits(res, out / "return_vs_bits.png"),
        "weight_histograms": fig_weight_histograms(res, out / "weight_histograms.png"),
        "model_size": fig_model_size(res, out / "model_size.png"),
    }
    cells = board_cells(res)
    for board in sorted({c["board"] for c in cells}):
        name = pareto_name(board)
        figures[name] = fig_pareto(res, board, cells, out / name)
    if res.perop_ok:    # (no file, no key without per-op rows: older reports stay as they were)
        figures["perop"] = fig_perop(perop_figure_data(res), out / "perop.png")
    write_atomic(out / "boards.json", json.dumps(
        {"cells": [{**c, "task": list(c["task"])} for c in cells],
         "int8_vs_fp32": int8_vs_fp32(cells)}, indent=2) + "\n")
    found = claims(res, tolerance)   # once: the page and claims.json show the same numbers
    blocks = _blocks(res, tolerance, figures, results, found, [Path(p) for p in bench])
    md = out / "report.md"
    write_atomic(md, to_markdown(blocks))
    page = out / "report.html"
    write_atomic(page, to_html(blocks, blocks[0][2], out))
    write_atomic(out / "claims.json", json.dumps(found, indent=2) + "\n")
    write_atomic(out / "remedies.json", json.dumps(remedy_table(res), indent=2) + "\n")
    return {"markdown": md, "html": page, "claims": out / "claims.json",
            "remedies": out / "remedies.json",
            "boards": out / "boards.json",
            "figures": [out / (k if k.endswith(".png") else f"{k}.png")
                        for k, v in figures.items() if v]}
