"""bench --per-op's printout: one table per board and scheme, then its check."""
from __future__ import annotations

from pathlib import Path

from .output import note, table


def _shape(shapes: list) -> str:
    return " ".join("x".join(map(str, s)) or "scalar" for s in shapes)


def print_perop(rows: list[dict], a) -> None:
    """The op rows of each cell as a table, and the line that checks their sum."""
    for total in (r for r in rows if r["kind"] == "total"):
        b, sch = total["board"], total["scheme"]
        print(f"{sch} on '{b}':")
        if "error" in total:
            print(f"  refused: {total['error']}")
            continue
        unit = total["unit"]
        ops = [r for r in rows if r["kind"] == "op" and r["board"] == b and r["scheme"] == sch]
        table(["#", "op", "type", "in", "out", "MACs", f"cost ({unit})", "share", "per MAC"],
              [[r["slot"], r["op"], r["type"], _shape(r["inputs"]), _shape(r["outputs"]),
                f"{r['macs']:,}", f"{r['cost']:,}",
                "-" if r["share"] is None else f"{100 * r['share']:.1f} %",
                "-" if r["cost_per_mac"] is None else f"{r['cost_per_mac']:.2f}"] for r in ops],
              right=("#", "op", "MACs", f"cost ({unit})", "share", "per MAC"))
        ok = "within" if total["within"] else "NOT within"
        print(f"  sum of ops {total['sum']:,} {unit}; whole inference {total['whole']:,} less "
              f"the timer's overhead {total['overhead']:,} = {total['whole'] - total['overhead']:,}; "
              f"gap {total['gap']:+,} ({ok} (ops + 1) x overhead"
              + (f" + the wall clock's measured spread {total['noise']:,}" if total["noise"] else "")
              + f" = {total['tolerance']:,})")
    note(f"each op: the smallest of {a.n} runs of a per-op build, less the timer's overhead (an "
         "empty start/stop of the same counter); the whole: the normal build's BENCH minimum")
    home = Path(a.policy).parent if Path(a.policy).suffix == ".tflite" else Path(a.policy)
    note(f"wrote the rows to {Path(a.out) if a.out else home / 'results'}/perop.jsonl")
