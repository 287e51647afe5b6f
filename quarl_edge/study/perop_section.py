"""The report's section "Per-op cost": where an inference's cost goes, op by op, for one policy
per network family.

A study with an emulated board that counts exactly (instructions under QEMU, cycles under
simavr) among a task's boards times one policy per network family (plan.perop_plan: MLP, CNN,
LSTM; the first such task of each, its first training seed) op by op on that board, fp32 and
int8 (the kind "perop" rows: measure/perop.py's per-op build). The section draws perop.png:
per policy one panel, one bar per scheme, the cost per inference in the board's unit stacked
op by op in the schedule's order, coloured by op type, each large op labelled with its share
of the inference. Its table gives per policy, scheme and op type the ops, their MACs, their
cost and their share; the ops' sum against the whole inference (the normal build's, less the
timer's overhead) is checked in a line per cell; every op's row is in a collapsed table.
Results without per-op rows get no section and no figure (their report is as before).
"""
from __future__ import annotations

from .render import fmt
from .results import Results, ordered_schemes, task_name

FAMILY_ORDER = ("mlp", "cnn", "lstm")
FAMILY_NAME = {"mlp": "MLP", "cnn": "CNN", "lstm": "LSTM"}
PEROP_FIGURE = "perop.png"


def perop_policies(res: Results) -> list[tuple]:
    """The (family, algo, env, seed, board) of the per-op cells that ran, families in
    FAMILY_ORDER (then any other, by name)."""
    found = {(r.get("family") or "?", r["algo"], r["env"], r["seed"], r["board"])
             for r in res.perop_ok}
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    return sorted(found, key=lambda p: (rank.get(p[0], len(rank)), p))


def policy_cells(res: Results, policy: tuple) -> list[dict]:
    """The per-op rows of one policy, by scheme (fp32 first)."""
    fam, algo, env, seed, board = policy
    rows = [r for r in res.perop_ok if (r.get("family") or "?", r["algo"], r["env"], r["seed"],
                                        r["board"]) == policy]
    order = ordered_schemes(rows)
    return sorted(rows, key=lambda r: order.index(r["scheme"]))


def policy_title(policy: tuple) -> str:
    fam, algo, env, seed, board = policy
    return f"{FAMILY_NAME.get(fam, fam)}: {task_name((algo, env))} seed {seed} on {board}"


def by_type(row: dict) -> list[tuple[str, int, int, float, float]]:
    """A per-op row's ops summed per op type, in the order each type first runs: (type, ops,
    MACs, cost, share); the schedule's return only when it cost something."""
    acc: dict[str, list] = {}
    for op in row["ops"]:
        if op["type"] == "(return)" and not op["cost"]:
            continue
        a = acc.setdefault(op["type"], [0, 0, 0, 0.0])
        a[0] += 1
        a[1] += op["macs"] or 0
        a[2] += op["cost"]
        a[3] += op["share"] or 0.0
    return [(t, *v) for t, v in acc.items()]


def perop_blocks(res: Results, figures: dict[str, bool]) -> list:
    """The section's blocks; none when the results hold no per-op rows."""
    if not res.perop_ok and not res.perop_no_fit:
        return []
    B = [("h", 2, "Per-op cost"),
         ("p", "Where one inference's cost goes, for one policy per network family (the first "
               "task of each family with an emulated board that counts exactly, its first "
               "training seed): its fp32 and int8 models in a per-op build on that board "
               "(`quarl-edge bench RUN --per-op`), each op's cost counted with the board's own "
               "counter in the schedule's order, the smallest of BENCH n runs less the timer's "
               "overhead; `(return)` is the schedule's return. The share is of the ops' sum.")]
    if figures.get("perop"):
        B.append(("img", PEROP_FIGURE, "per-op cost per policy and scheme"))
    rows, checks, detail = [], [], []
    for policy in perop_policies(res):
        for r in policy_cells(res, policy):
            unit = r["unit"]
            for t, n, macs, cost, share in by_type(r):
                rows.append([policy_title(policy), r["scheme"], t, str(n),
                             f"{macs:,}" if macs else "-", f"{cost:,} {unit}",
                             f"{100 * share:.1f} %"])
            checks.append(
                f"{policy_title(policy)}, {r['scheme']}: {len(r['ops']) - 1} ops sum to "
                f"{r['sum']:,} {unit}; the whole inference {r['whole']:,} less the timer's "
                f"overhead {r['overhead']:,} is {r['whole'] - r['overhead']:,}; gap "
                f"{r['gap']:+,} ({'within' if r['within'] else '**not** within'} the "
                f"tolerance {r['tolerance']:,})")
            detail += [[policy_title(policy), r["scheme"], str(op["slot"]), str(op["type"]),
                        f"{op['macs']:,}", f"{op['cost']:,}", "-" if op["share"] is None
                        else f"{100 * op['share']:.1f} %",
                        fmt(op["cost_per_mac"], 2)] for op in r["ops"]]
    if rows:
        B.append(("table", ["policy", "scheme", "op type", "ops", "MACs", "cost / inference",
                            "share"], rows))
        B.append(("p", "The ops add up to the whole inference: " + "; ".join(checks) + "."))
        B.append(("details", "Every op (slot: its place in the schedule)",
                  ("table", ["policy", "scheme", "slot", "type", "MACs", "cost", "share",
                             "cost / MAC"], detail)))
    if res.perop_no_fit:
        B.append(("p", "Does not fit its board, so not timed: " + "; ".join(
            f"{task_name((r['algo'], r['env']))} seed {r['seed']} {r['scheme']} on "
            f"{r['board']}" for r in res.perop_no_fit) + "."))
    return B


def perop_figure_data(res: Results) -> list[tuple[str, list[dict]]]:
    """(panel title, its rows by scheme) per policy: what figures.fig_perop draws."""
    return [(policy_title(p), policy_cells(res, p)) for p in perop_policies(res)]
