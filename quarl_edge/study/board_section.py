"""The report's section "On the board": its numbers and its blocks.

On the board: a study's board cells (kind "board" rows: `boards = [...]` in its TOML) and the
JSON lines of `quarl-edge bench RUN --episodes N` given with --bench (OUT/bench.jsonl; the row
format is quarl_edge/measure/rows.py's BenchRow) make a section "On the board": per task one table,
rows scheme × board, with the board's return (mean ± std over seeds), its normalised loss
against the fp32 network on those seeds, the agreement, whether TF Lite Micro returns the same,
whether validate found the outputs bit-exact, the cost per inference, its µs (measured on the
host, at the board's clock otherwise), flash, RAM, arena and stack; a scheme that does not fit
a board is a row saying so with its numbers. Per board a Pareto plot pareto_<board>.png
(return against cost per inference, marker area = flash, the non-dominated schemes joined),
and per task and board the line "int8 is N× faster and M× smaller than fp32 with a return loss
of L", computed from those rows (boards.json holds the same numbers). Bench rows without
episodes give the cost and memory only.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..core.errors import QuarlError
from .analysis import random_policy_return
from .figures import pareto_name
from .render import fmt, fmt_bytes, pct
from .results import SCHEME_ORDER, Results, ordered_schemes, task_name, us_per_inference
from .statistics import normalised_loss, seed_bootstrap
from ..measure.energy import energy
from ..targets.boards import get_board

FLOAT_SCHEMES = ("fp32", "fp16", "dyn-int8")   # float activations: compared up to libm's ulps


def _us(r: dict) -> str:
    """A board row's cost per inference in µs: measured (ns on the host board) or estimated at
    the board's clock (cycles; instructions at one per cycle)."""
    us, basis = us_per_inference(r.get("cost_mean"), r.get("unit"), r.get("clock_hz"))
    if us is None:
        return "-"
    if basis == "measured":
        return f"{us:,.1f} (wall clock)"
    return f"~{us:,.1f}" + (" (estimate)" if r["unit"] == "instructions" else "")


def _random_return(res: Results, r: dict, cache: dict) -> float | None:
    """The random policy's return on a board row's seeds: its run's (same seeds), else
    played here."""
    seeds = list(r.get("seeds") or [])
    run = res.run_of(r) if r.get("seed") is not None else None
    if run is not None and list(run.get("eval_seeds") or []) == seeds:
        return run.get("random_return")
    key = (r["env"], tuple(seeds))
    if key not in cache:
        cache[key] = random_policy_return(r["env"], seeds)
    return cache[key]


def board_table(res: Results) -> list[dict]:
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


def board_cells(res: Results) -> list[dict]:
    """The board rows per (task, board, scheme), over the training seeds: return (mean over
    seeds of each seed's mean; ± the std over seeds, or over episodes for one seed),
    normalised loss, agreement, TF Lite Micro check, bit-exactness, cost, µs, flash, RAM,
    arena, stack; and the (task, board, scheme)s that did not fit, with their numbers."""
    groups: dict[tuple, list] = defaultdict(list)
    for it in board_table(res):
        r = it["row"]
        groups[((r.get("algo") or "?", r.get("env") or "?"), r["board"], r["scheme"])].append(it)
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
            "seeds": len(rets),   # the 95 % interval over seeds (None with one seed): Pareto bars
            "return_ci": seed_bootstrap([rets])["ci"] if rets else None,
            "return_std": (float(np.std(rets)) if len(rets) > 1 else
                           (played[0].get("std_return") if played else None)),
            "fp32_return": mean_of("fp32_mean_return"),
            "loss": float(np.mean(losses)) if losses else None,
            "loss_ci": seed_bootstrap([losses])["ci"] if losses else None,
            "agreement": mean_of("agreement"),
            "equals_tflm": all(r.get("matches_reference") for r in played) if played else None,
            "equals_tflite": _every_seed(played, "matches_tflite"),
            "equals_tflite_ref": _every_seed(played, "matches_tflite_ref"),
            "bit_exact": (all(r["bit_exact"] for r in rows if "bit_exact" in r)
                          if any("bit_exact" in r for r in rows) else None),
            "cost": cost, "us": us, "us_basis": basis, "us_text": _us({**rows[0], "cost_mean": cost}),
            "uj": _uj(board, rows, cost),
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


def _uj(board_id: str, rows: list[dict], cost: float) -> float | None:
    """The energy estimate per inference (measure/energy.py): the rows' own when they carry it
    (a bench or study since issue 42), else from the board file's [energy] figures; None for a
    board without figures or whose file is not here."""
    own = [r["energy"]["uj"] for r in rows
           if isinstance(r.get("energy"), dict) and r["energy"].get("uj") is not None]
    if own:
        return float(np.mean(own))
    try:
        return energy(get_board(board_id), cost)["uj"]
    except QuarlError:
        return None


def _every_seed(played: list[dict], key: str) -> bool | None:
    """Whether every played row says `key` (a board-vs-interpreter check); None when no row
    played, or a row predates that check."""
    if not played or any(key not in r for r in played):
        return None
    return all(r[key] for r in played)


def int8_vs_fp32(cells: list[dict]) -> list[str]:
    """Per task and board with both int8 and fp32: "int8 is N× faster and M× smaller than
    fp32 on board B with a return loss of L %", from the rows' own numbers (means over seeds;
    the loss with its 95 % bootstrap interval over seeds when there are two or more)."""
    by = {(c["task"], c["board"], c["scheme"]): c for c in cells if c["fits"]}
    out = []
    for (task, board, scheme), q in by.items():
        f = by.get((task, board, "fp32"))
        if scheme != "int8" or f is None or not q["cost"]:
            continue
        speed = f["cost"] / q["cost"]
        faster = f"{speed:.2f}× faster" if speed >= 1 else f"{1 / speed:.2f}× slower"
        text = (f"{task_name(task)} on {board} ({q['cpu']}): int8 is {faster} "
                f"({q['cost']:,.0f} vs {f['cost']:,.0f} {q['unit']} per inference)")
        if q.get("flash") and f.get("flash"):
            text += (f" and {f['flash'] / q['flash']:.2f}× smaller in flash "
                     f"({q['flash']:,.0f} vs {f['flash']:,.0f} B)")
        text += " than fp32"
        if q["loss"] is not None:
            ci = (f", 95 % CI over seeds [{pct(q['loss_ci'][0])}, {pct(q['loss_ci'][1])}]"
                  if q.get("loss_ci") else "")
            text += (f", with a return loss of {pct(q['loss'])}{ci} (int8 {q['return']:,.1f} "
                     f"on the board vs the fp32 network's {q['fp32_return']:,.1f}; "
                     f"{q['episodes']} episodes over {q['n']} seed(s))")
        elif not q["episodes"]:
            text += " (return not measured: bench without --episodes)"
        out.append(text + ".")
    return out


def int4_vs_int8(cells: list[dict]) -> list:
    """4-bit weights against int8 on the boards (issue 39): per board, the median ratio of
    int8x4's flash and cost per inference to int8's over the tasks with both; the cells where
    int8 did not fit, and whether int8x4 does; then per task and board the numbers (collapsed).
    Blocks; none without int8x4 board cells."""
    by = {(c["task"], c["board"], c["scheme"]): c for c in cells}
    pairs = sorted((t, b) for (t, b, s) in by if s == "int8x4")
    if not pairs:
        return []
    ratios, rows, rescued = defaultdict(list), [], []
    for task, board in pairs:
        q4, q8 = by[(task, board, "int8x4")], by.get((task, board, "int8"))
        qat = by.get((task, board, "qat-int8x4"))
        if q8 is not None and not q8["fits"]:
            rescued.append(f"{task_name(task)} on {board}: int8 needs "
                           f"{fmt_bytes(q8.get('needs_flash'))} B of flash of the board's "
                           f"{fmt_bytes(q8.get('board_flash'))} B; int8x4 "
                           + (f"fits ({fmt_bytes(q4['flash'])} B, return {q4['return']:,.1f}, "
                              f"loss {pct(q4['loss'])})" if q4["fits"] else
                              f"still does not fit (needs {fmt_bytes(q4.get('needs_flash'))} B)"))
        if q8 is None or not (q8["fits"] and q4["fits"]) or not q8["cost"]:
            continue
        flash = q4["flash"] / q8["flash"] if q4.get("flash") and q8.get("flash") else None
        cost = q4["cost"] / q8["cost"]
        ratios[board].append((flash, cost))
        rows.append([task_name(task), board, fmt_bytes(q8["flash"]), fmt_bytes(q4["flash"]),
                     "-" if flash is None else f"{flash:.2f}×",
                     f"{q8['cost']:,.0f}", f"{q4['cost']:,.0f} {q4['unit']}", f"{cost:.2f}×",
                     pct(q8["loss"]), pct(q4["loss"]),
                     pct(qat["loss"]) if qat and qat["fits"] else "-"])
    B = [] if not ratios else [("p", "**4-bit weights against int8 on the boards** (int8x4: int8 activations, int4 "
               "weights packed two to a byte; the firmware's flash and the cost per inference, "
               "means over seeds; median over the tasks with both): " + "; ".join(
                   f"{board}: flash {np.median([f for f, _ in rs if f is not None]):.2f}×, "
                   f"cost {np.median([c for _, c in rs]):.2f}× over {len(rs)} "
                   + ("task" if len(rs) == 1 else "tasks")
                   for board, rs in sorted(ratios.items())) + ".")]
    if rescued:
        B.append(("p", "Where int8 did not fit: " + "; ".join(rescued) + "."))
    if rows:
        B.append(("details", "int8x4 against int8, per task and board",
                  ("table", ["task", "board", "int8 flash (B)", "int8x4 flash (B)", "× flash",
                             "int8 cost", "int8x4 cost", "× cost", "int8 loss",
                             "int8x4 loss", "qat-int8x4 loss"], rows)))
    return B


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
            schemes = ", ".join(ordered_schemes(group))
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



def board_blocks(res: Results, figures: dict[str, bool] | None = None) -> list:
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
               "at the board's clock otherwise, instructions at one per cycle an estimate), the "
               "energy per inference estimated from the board file's datasheet figures "
               "(cycles × supply × run current per MHz, docs/boards.md; `-`: the board has no "
               "energy figures), and "
               "the firmware's flash, static RAM, arena and stack high-water.")]
    B += _reference_checks(cells)
    claims_ = int8_vs_fp32(cells)
    if claims_:
        B.append(("p", "**QuaRL's speed and memory claim, on the boards:**"))
        B += [("p", text) for text in claims_]
    B += int4_vs_int8(cells)
    for task in sorted({c["task"] for c in cells}):
        rows = [_board_row(c) for c in cells if c["task"] == task]
        B.append(("h", 3, f"{task_name(task)}: scheme × board"))
        B.append(("table", ["board", "scheme", "seeds (n) × episodes", "return (mean ± std)",
                            "normalised loss",
                            "agreement", "= tflite-runtime (ref. kernels)",
                            "= tflite-runtime (optimized)", "= TF Lite Micro", "bit-exact",
                            "cost / inference",
                            "µs / inference", "µJ / inference (est.)", "flash (B)", "RAM (B)",
                            "arena (B)", "stack (B)"],
                  rows))
    for board in sorted({c["board"] for c in cells}):
        if figures.get(pareto_name(board)):
            B.append(("img", pareto_name(board), f"Pareto: return vs cost on {board}"))
    refused = [r for r in res.bench if "error" in r]
    if refused:
        B.append(("p", "Refused: " + "; ".join(f"{r['board']} {r['scheme']}: {r['error']}"
                                               for r in refused) + "."))
    skipped = defaultdict(set)
    for r in res.board_skipped:
        skipped[(r["scheme"], r.get("reason", ""))].add(r["board"])
    if skipped:
        B.append(("p", "Not run on a board: " + "; ".join(
            f"{scheme} ({why})" for (scheme, why) in sorted(skipped)) + "."))
    return B


def _board_row(c: dict) -> list[str]:
    """One line of a task's scheme × board table: a board cell of board_cells, or what a
    scheme that does not fit the board needs."""
    if not c["fits"]:
        need = "; ".join(x for x in (
            f"needs {c['needs_flash']:,} B flash" if c.get("needs_flash") else "",
            f"needs {c['needs_ram']:,} B RAM" if c.get("needs_ram") else "",
            f"arena {c['arena']:,} B" if c.get("arena") else "",
            f"weights {c['weights']:,} B" if c.get("weights") else "") if x)
        return [c["board"], c["scheme"], "-", f"does not fit ({need or c['reason']})",
                "-", "-", "-", "-", "-", "-", "-", "-",
                fmt_bytes(c.get("needs_flash")) + f" / {fmt_bytes(c.get('board_flash'))}",
                fmt_bytes(c.get("needs_ram")) + f" / {fmt_bytes(c.get('board_ram'))}",
                fmt_bytes(c.get("arena")), "-"]
    yes = {True: "yes", False: "NO", None: "-"}
    per_seed = f" × {c['episodes'] // c['n']}" if c.get("episodes") else ""
    return [c["board"], c["scheme"], f"{c['n']}{per_seed}",
            (f"{c['return']:,.1f} ± {c['return_std'] or 0:,.1f}"
             if c["return"] is not None else "-"),
            pct(c["loss"]), fmt(c["agreement"], 3),
            yes[c["equals_tflite_ref"]], yes[c["equals_tflite"]], yes[c["equals_tflm"]],
            yes[c["bit_exact"]], f"{c['cost']:,.0f} {c['unit']}", c["us_text"],
            "-" if c.get("uj") is None else f"{c['uj']:,.1f}", fmt_bytes(c["flash"]), fmt_bytes(c["ram"]), fmt_bytes(c["arena"]),
            fmt_bytes(c["stack"])]
