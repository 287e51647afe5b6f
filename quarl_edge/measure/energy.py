"""Energy per inference: a first-order estimate from the board file's datasheet figures.

Without an energy monitor, the estimate at a fixed clock is

    E = cycles x supply voltage x run current per MHz        (µJ = cycles x V x µA/MHz / 1e6)

since the time is cycles / f and the run current is (µA/MHz) x f/MHz: the clock cancels. The
figures are the board file's [energy] table (quarl_edge/targets/boards.py checks it): supply_v,
run_ua_per_mhz in the datasheet mode it names, and the source (datasheet, revision, table) they
come from. It is an estimate: the datasheet's current is typical, measured on its own code
(CoreMark, Dhrystone, a loop), with its peripherals; the MCU only, not the board around it.

- cycles boards (simavr, a real board's cycle counter): the count is the cycles;
- instructions boards (QEMU -icount): cycles = instructions x the board file's `cpi`, whose
  error its `cpi_note` says; with a `cpi_range = [low, high]` (the bounds a core's instruction
  timings give) the estimate carries `uj_range`, the energy at either bound, and the label
  prints it ("16.8 µJ (estimate, 11.2-22.4)");
- ns boards (the host, linux): no estimate (a process on a PC or a Linux board has no supply
  figure of its own);
- a board file without figures: "no energy figures", with its `none` reason when it gives one.
"""
from __future__ import annotations

from ..targets.boards import Board


def no_figures(board: Board) -> str | None:
    """Why `board` has no energy estimate, or None when it has one."""
    e = board.energy
    if board.cost_unit == "ns":
        return (e or {}).get("none") or "its cost is wall time (ns), which has no supply figure"
    if e is None:
        return "the board file has no [energy] table"
    return e.get("none")


def energy(board: Board, cost: float | None) -> dict:
    """The estimate for one inference of `cost` (in the board's unit): {"uj": µJ, "supply_v",
    "run_ua_per_mhz", "cycles_per_unit", "source", "basis", "estimate": True} (and "uj_range":
    [low, high] µJ when the board file states a `cpi_range`), or {"uj": None, "none": why}."""
    why = no_figures(board)
    if why is not None or cost is None:
        return {"uj": None, "none": why or "no cost was measured"}
    e = board.energy
    per_unit = 1.0 if board.cost_unit == "cycles" else float(e["cpi"])
    uj = _uj(cost, per_unit, e)
    cpi = f" x {per_unit:g} cycles each" if board.cost_unit == "instructions" else ""
    basis = (f"{board.cost_unit}{cpi} x {e['supply_v']:g} V x {e['run_ua_per_mhz']:g} µA/MHz "
             f"({e['mode']})")
    spread = e.get("cpi_range") if board.cost_unit == "instructions" else None
    if board.cost_unit == "instructions":
        bounds = f" ({spread[0]:g}-{spread[1]:g})" if spread else ""
        basis += f"; CPI {per_unit:g}{bounds}: {e['cpi_note']}"
    if e.get("basis"):
        basis += f"; {e['basis']}"
    out = {"uj": uj, "supply_v": e["supply_v"], "run_ua_per_mhz": e["run_ua_per_mhz"],
           "cycles_per_unit": per_unit, "source": e["source"], "basis": basis,
           "estimate": True}
    if spread:
        out["uj_range"] = [_uj(cost, float(spread[0]), e), _uj(cost, float(spread[1]), e)]
    return out


def _uj(cost: float, cycles_per_unit: float, e: dict) -> float:
    """µJ = cycles x V x µA/MHz / 1e6 (the clock cancels: time cycles / f, current µA/MHz x f)."""
    return float(cost) * cycles_per_unit * float(e["supply_v"]) * float(e["run_ua_per_mhz"]) / 1e6


def _num(uj: float) -> str:
    """One energy figure as the labels print it: 1 decimal from 1 µJ, 3 below."""
    return f"{uj:,.1f}" if uj >= 1 else f"{uj:,.3f}"


def span(d: dict) -> str:
    """' (11.2-22.4)' for an estimate with a CPI range, else ''."""
    r = d.get("uj_range") if d else None
    return f" ({_num(r[0])}-{_num(r[1])})" if r else ""


def label(d: dict | None) -> str:
    """'216.0 µJ (estimate)', '16.8 µJ (estimate, 11.2-22.4)' with a CPI range, or
    'no energy figures'."""
    if not d or d.get("uj") is None:
        return "no energy figures"
    r = d.get("uj_range")
    rng = f", {_num(r[0])}-{_num(r[1])}" if r else ""
    return f"{_num(d['uj'])} µJ (estimate{rng})"


def markdown(rows: list[dict]) -> str:
    """The energy table of bench.md (rows with an "energy" dict), or "" when none has one."""
    rows = [r for r in rows if isinstance(r.get("energy"), dict)]
    if not rows:
        return ""
    lines = ["", "| board | scheme | energy / inference (estimate) | from |", "|---|---|---:|---|"]
    for r in rows:
        e = r["energy"]
        lines.append(f"| {r['board']} | {r['scheme']} | " +
                     (f"no energy figures | {e.get('none')} |" if e.get("uj") is None else
                      f"{e['uj']:,.1f} µJ{span(e)} | {e['source']} |"))
    return "\n".join(lines) + "\n"
