"""The report's figures (matplotlib, Agg backend; never wider than MAX_WIDTH_PX, whatever the
number of tasks), each written as a PNG; a figure function returns False when it has nothing to
draw.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..core.files import atomic_open
from .render import fmt_bytes
from .results import Results, episodes_per_seed, ordered_schemes, task_name, task_of


def _plt():
    import matplotlib   # heavy: imported when a figure is drawn, not with the report
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


def _data_limits(values, pad: float = 0.08) -> tuple[float, float]:
    """Axis limits around `values` with a margin (a flat set of values gets a small one)."""
    lo, hi = float(np.min(values)), float(np.max(values))
    margin = (hi - lo) * pad or max(abs(hi) * 0.02, 1.0)
    return lo - margin, hi + margin


def fig_return_vs_scheme(res: Results, path: Path) -> bool:
    """One panel per task: the schemes down the side (horizontal, so long names stay
    readable), the greedy return across, its axis scaled to the plotted returns; the random
    policy's return is a line when it falls inside that range, else a note in the panel."""
    tasks = [t for t in res.tasks if any(task_of(r) == t for r in res.ok_cells)]
    if not tasks:
        return False
    plt = _plt()
    rows, cols = _grid(len(tasks))
    n_schemes = max(len(ordered_schemes([r for r in res.ok_cells if task_of(r) == t])) for t in tasks)
    fig, axes = plt.subplots(rows, cols, squeeze=False,
                             figsize=_figsize(max(6.5, 4.8 * cols), (0.8 + 0.22 * n_schemes) * rows + 0.6))
    for ax, t in zip(axes.flat, tasks):
        cells = [r for r in res.ok_cells if task_of(r) == t]
        schemes = ordered_schemes(cells)
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
        ax.set_title(task_name(t), fontsize=10)
        ax.set_xlabel(xlabel, fontsize=8)
        if runs:
            ax.legend(fontsize=7, loc="upper left" if np.mean(shown) > (lo + hi) / 2 else "upper right")
    return _save(fig, path, axes, len(tasks), "Return per scheme (dots: seeds, bar: mean)")


def _save(fig, path: Path, axes=None, used: int = 0, title: str | None = None) -> bool:
    """Hide a grid's unused panels, title, lay out, write the PNG and free the figure."""
    if axes is not None:
        for ax in list(axes.flat)[used:]:
            ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_open(path, "wb") as f:       # (a symlink there is replaced, not followed)
        fig.savefig(f, dpi=DPI, format=Path(path).suffix[1:] or "png")
    _plt().close(fig)
    return True


def fig_return_vs_bits(res: Results, path: Path) -> bool:
    tasks = sorted({task_of(r) for r in res.sweep})
    if not tasks:
        return False
    plt = _plt()
    rows, cols = _grid(len(tasks))
    fig, axes = plt.subplots(rows, cols, figsize=_figsize(max(6.5, 4.6 * cols), 3.4 * rows),
                             squeeze=False)
    for ax, t in zip(axes.flat, tasks):
        pts = [r for r in res.sweep if task_of(r) == t]
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
        ax.set_title(task_name(t), fontsize=10)
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
    tasks = sorted({task_of(r) for r in cells})
    schemes = ordered_schemes(cells)
    kib = np.full((len(tasks), len(schemes)), np.nan)
    for i, t in enumerate(tasks):
        for j, s in enumerate(schemes):
            sizes = [r["size_bytes"] for r in cells if task_of(r) == t and r["scheme"] == s]
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
    ax.set_yticks(range(len(tasks)), [task_name(t) for t in tasks], fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02, label="share of fp32 size")
    ax.set_title(".tflite size per scheme (KiB, mean over seeds; blank: skipped)", fontsize=10)
    return _save(fig, path)



def fig_pareto(res: Results, board: str, cells: list[dict], path: Path) -> bool:
    """One board: per task a panel of return against cost per inference (log axis when the
    costs span more than 10×), one point per scheme, its area the firmware's flash; the
    Pareto front (no other scheme both cheaper and better) joined by a line; each point's bar
    is its 95 % bootstrap interval over training seeds (board_cells' return_ci), n in the
    legend. On a board with energy figures (every cell has its µJ estimate, a fixed multiple
    of its cost: measure/energy.py) the panel's top axis reads the same points in µJ."""
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
    schemes = ordered_schemes(cells)
    for ax, t in zip(axes.flat, tasks):
        pts = [c for c in cells if c["task"] == t]
        for i, c in enumerate(sorted(pts, key=lambda c: (c["cost"], c["return"]))):
            size = 40 + 460 * (c["flash"] or 0) / big
            colour = colours(schemes.index(c["scheme"]) % 10)
            ci = c.get("return_ci")
            if ci is not None:   # the 95 % interval over training seeds
                ax.errorbar([c["cost"]], [c["return"]], yerr=[[c["return"] - ci[0]],
                                                             [ci[1] - c["return"]]],
                            color=colour, lw=1, capsize=3, zorder=1)
            ax.scatter([c["cost"]], [c["return"]], s=size, alpha=0.6, color=colour,
                       edgecolors="black", linewidths=0.5,
                       label=f"{c['scheme']} ({fmt_bytes(c['flash'])} B, n={c.get('seeds', 1)} "
                             f"seed{'s' if c.get('seeds', 1) != 1 else ''})")
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
        lo, hi = _data_limits([c["return"] for c in pts]
                              + [b for c in pts for b in (c.get("return_ci") or [])])
        ax.set_ylim(lo, hi)
        # returns as they are: no "-1.065e2" offset over ticks reading -0.02 .. -0.07
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.set_xlabel(f"cost per inference ({pts[0]['unit']})", fontsize=8)
        ax.set_ylabel("board return (mean over seeds)", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        per_cost = {c["uj"] / c["cost"] for c in pts if c.get("uj") and c["cost"]}
        if per_cost and all(c.get("uj") for c in pts):
            k = sum(per_cost) / len(per_cost)     # one factor per board: µJ per unit of cost
            top = ax.secondary_xaxis("top", functions=(lambda x, k=k: x * k,
                                                       lambda x, k=k: x / k))
            top.set_xlabel("µJ per inference (estimate, datasheet figures)", fontsize=7)
            top.tick_params(labelsize=7)
        ax.set_title(task_name(t), fontsize=10, pad=22 if per_cost else 6)
        ax.legend(fontsize=6, loc="best", markerscale=0.4)
    return _save(fig, path, axes, len(tasks),
                 f"{board}: return vs cost per inference (marker area: flash)\nbars: 95 % "
                 f"bootstrap interval over training seeds (none with one seed); n seeds in the "
                 f"legend, {episodes_per_seed(res)} episodes per seed")


def pareto_name(board: str) -> str:
    return "pareto_" + re.sub(r"[^A-Za-z0-9_.-]", "_", board) + ".png"



def fig_perop(panels: list[tuple[str, list[dict]]], path: Path) -> bool:
    """Per-op cost (perop_section.perop_figure_data): per policy a panel, one horizontal bar
    per scheme, its inference split op by op in the schedule's order into each op's share of
    the ops' sum, coloured by op type (one colour per type across the panels; ops that cost
    nothing are not drawn), an op of at least 8 % labelled with its slot and share, and the
    bar's whole cost per inference in the board's unit at its end."""
    panels = [(title, rows) for title, rows in panels if rows]
    if not panels:
        return False
    plt = _plt()
    types = list(dict.fromkeys(op["type"] for _, rows in panels for r in rows
                               for op in r["ops"] if op["cost"]))
    cmap = plt.get_cmap("tab10")
    colour = {t: cmap(i % 10) for i, t in enumerate(types)}
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=_figsize(9.0, 1.2 + sum(0.6 + 0.45 * len(rows)
                                                             for _, rows in panels)),
                             gridspec_kw={"height_ratios": [0.6 + len(rows)
                                                            for _, rows in panels]})
    for ax, (title, rows) in zip(axes.flat, panels):
        for i, r in enumerate(rows):
            left = 0.0
            for op in r["ops"]:
                share = 100 * (op["share"] or 0.0)
                if not op["cost"]:
                    continue
                ax.barh(i, share, left=left, color=colour[op["type"]], height=0.6,
                        edgecolor="white", linewidth=1.2)
                if share >= 8:
                    ax.text(left + share / 2, i, f"#{op['slot']}\n{share:.0f} %", ha="center",
                            va="center", fontsize=7)
                left += share
            ax.text(101, i, f"{r['whole']:,} {r['unit']}", va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [r["scheme"] for r in rows], fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, 122)
        ax.set_xticks(range(0, 101, 20))
        ax.set_xlabel("share of the inference (%), op by op in the schedule's order (#slot); "
                      "at the end: the whole cost per inference", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title(title, fontsize=10)
    fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colour[t]) for t in types],
               labels=types, loc="lower center", ncol=min(4, len(types)), fontsize=7,
               frameon=False)
    fig.suptitle("Per-op cost: where one inference goes")
    fig.tight_layout(rect=(0, 0.03 + 0.03 * ((len(types) + 3) // 4), 1, 1))
    with atomic_open(path, "wb") as f:
        fig.savefig(f, dpi=DPI, format="png")
    plt.close(fig)
    return True
