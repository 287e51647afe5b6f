"""The control loop's deadline: is the worst case per action under the period 1/HZ?

A policy runs inside a loop at a fixed rate (a Crazyflie's attitude loop at 500 Hz: a 2,000 µs
period). `bench --control-hz HZ` and `hil --control-hz HZ` answer, per board and scheme, with
the worst time per action observed over the run against that period, the margin (period -
worst, in µs and as a share of the period), "meets" or "misses", and the jitter across the run
(max - min, and the 99th percentile beside the median).

Where the time comes from (`time_basis`, said in every answer):
- ns (the host board, a linux board's agent): measured wall time, as the board's clock read it;
- cycles (simavr, a real board's cycle counter): the exact count / the board's clock;
- instructions (QEMU -icount): the exact count / the board's clock, at one instruction per
  cycle: an estimate (a real core's CPI is above 1 on loads, branches, multiplies).
A cost never converts on the board; the conversion is here and only here.
"""
from __future__ import annotations

import numpy as np

from ..core.errors import QuarlError

CONTROL_HZ_MAX = 1e6     # a period under 1 µs is not a control loop a policy runs in


def check_control_hz(hz) -> float | None:
    """`hz` as a float in (0, CONTROL_HZ_MAX], None for None; else a QuarlError."""
    if hz is None:
        return None
    if isinstance(hz, bool) or not isinstance(hz, (int, float)) or not \
            0 < float(hz) <= CONTROL_HZ_MAX:
        raise QuarlError(f"control-hz must be a rate in Hz, > 0 and <= {CONTROL_HZ_MAX:g}, "
                         f"got {hz!r}")
    return float(hz)


def time_basis(unit: str, clock_hz: int | None, kind: str | None = None) -> str:
    """How a cost in `unit` becomes a time on this board (the module docstring)."""
    if unit == "ns":
        return "measured wall time"
    mhz = f"{clock_hz / 1e6:g} MHz" if clock_hz else "?"
    if unit == "cycles":
        where = "cycle-accurate simulator" if kind == "emulated" else "cycle counter"
        return f"exact cycle count ({where}) / the board's clock {mhz}"
    return (f"exact instruction count (QEMU -icount) / the board's clock {mhz} at 1 "
            "instruction per cycle: an estimate")


def to_us(costs, unit: str, clock_hz: int | None) -> np.ndarray:
    """Costs in the board's unit as µs (ns / 1000; counts / clock)."""
    arr = np.asarray(costs, dtype=np.float64)
    if unit == "ns":
        return arr / 1e3
    if unit in ("cycles", "instructions") and clock_hz:
        return arr / clock_hz * 1e6
    raise QuarlError(f"a cost in {unit} on a board without a clock (clock_hz = {clock_hz}) "
                     "has no time: --control-hz needs the board file's clock_hz")


def deadline(costs, unit: str, clock_hz: int | None, control_hz: float,
             kind: str | None = None) -> dict:
    """The deadline answer for the costs of one run (every inference's cost, in `unit`):
    control_hz, period_us, worst_us (the largest cost), median_us, p99_us, jitter_us (max -
    min), margin_us (period - worst), margin_pct (of the period), verdict ("meets" when worst
    <= period, else "misses"), n and time_basis."""
    if len(costs) == 0:
        raise QuarlError("no inference was timed: nothing to hold against the period")
    us = to_us(costs, unit, clock_hz)
    period = 1e6 / control_hz
    worst = float(us.max())
    return {"control_hz": control_hz, "period_us": period, "worst_us": worst,
            "median_us": float(np.median(us)), "p99_us": float(np.percentile(us, 99)),
            "jitter_us": worst - float(us.min()), "margin_us": period - worst,
            "margin_pct": (period - worst) / period * 100.0,
            "verdict": "meets" if worst <= period else "misses", "n": int(us.size),
            "time_basis": time_basis(unit, clock_hz, kind)}


def describe(d: dict) -> str:
    """One line: 'worst 4,155 µs vs period 2,000 µs (500 Hz): misses by 2,155 µs (-108 %)'."""
    how = "margin" if d["verdict"] == "meets" else "over by"
    return (f"worst {d['worst_us']:,.1f} µs vs period {d['period_us']:,.1f} µs "
            f"({d['control_hz']:g} Hz): {d['verdict']}, {how} {abs(d['margin_us']):,.1f} µs "
            f"({d['margin_pct']:+.1f} %); jitter {d['jitter_us']:,.2f} µs (max - min), "
            f"p99 {d['p99_us']:,.1f} µs")


def markdown(rows: list[dict]) -> str:
    """The deadline table of bench.md (rows with a "deadline"), or "" when none has one."""
    rows = [r for r in rows if isinstance(r.get("deadline"), dict)]
    if not rows:
        return ""
    lines = ["", "| board | scheme | control rate | period (µs) | worst (µs) | margin (µs) | "
                 "margin | deadline | jitter max-min (µs) | p99 (µs) | time from |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        d = r["deadline"]
        lines.append(f"| {r['board']} | {r['scheme']} | {d['control_hz']:g} Hz | "
                     f"{d['period_us']:,.1f} | {d['worst_us']:,.1f} | {d['margin_us']:,.1f} | "
                     f"{d['margin_pct']:.1f} % | {d['verdict']} | {d['jitter_us']:,.2f} | "
                     f"{d['p99_us']:,.1f} | {d['time_basis']} |")
    return "\n".join(lines) + "\n"
