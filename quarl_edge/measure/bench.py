"""bench: cost per inference, flash, RAM and stack per board and precision, in one table.

Each (board, precision) cell builds the firmware, starts the board, sends one real observation
(from the run's calibration set) with INFER, then BENCH n repeats it on the board. Costs stay in
each board's own unit (ns, cycles, instructions); the int8/fp32 speedup is a ratio within one
board, so units never mix. Results are written per cell as they finish (JSON lines), then as
Markdown."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import QuarlError
from ..link.session import BoardSession
from ..run import tflite_path
from ..targets.boards import Board, all_boards, get_board

PRECISIONS = ("fp32", "int8")
BENCH_MAX_N = 65535        # BENCH's n is a u16 (docs/protocol.md)


def select_boards(spec: str) -> list[Board]:
    """'all-emulated' (every board we can start here under an emulator) and/or board ids,
    comma-separated."""
    boards = all_boards()
    out: list[Board] = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        if item == "all-emulated":
            out += [b for b in boards.values() if b.kind == "emulated"]
        else:
            out.append(get_board(item))
    return list({b.id: b for b in out}.values())


def bench_cell(run_dir: Path, board: Board, scheme: str, n: int, obs: np.ndarray,
               flasher: str | None = None, drive: str | None = None) -> dict:
    with BoardSession(tflite_path(run_dir, scheme), board, run_dir / "build" / board.id / scheme,
                      flasher=flasher, drive=drive) as s:
        spec = s.info.inputs[0]
        if spec.dtype != "float32":
            raise QuarlError("bench feeds float observations; the model's input must be float32")
        _, first = s.link.infer([obs.reshape(spec.shape)])
        stats = s.link.bench(n)
        mem = s.memory()
        return {"board": board.id, "cpu": board.cpu, "precision": scheme, "kernels": board.kernels,
                "unit": s.info.cost_unit,
                "cost_first": first, "cost_mean": stats.mean, "cost_min": stats.min,
                "cost_max": stats.max, "n": stats.n, "clock_hz": board.clock_hz,
                "flash_bytes": mem.get("flash_bytes"), "ram_bytes": mem.get("ram_bytes"),
                "stack_bytes": mem.get("stack_bytes"), "arena_bytes": mem.get("arena_bytes")}


def run_bench(run_dir: Path, boards: list[Board], n: int = 100, out: Path | None = None,
              progress: bool = False, flasher: str | None = None,
              drive: str | None = None) -> list[dict]:
    """Every (board, precision) cell: one row each, written as it finishes to
    OUT/bench.jsonl.partial (default OUT: RUN/results), which becomes OUT/bench.jsonl when all
    cells are done, then OUT/bench.md: a bench that fails keeps the previous results.
    `progress`: a bar over the cells on stderr."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= BENCH_MAX_N:
        raise QuarlError(f"n (inferences per BENCH) must be an integer in 1..{BENCH_MAX_N}, "
                         f"got {n!r}")
    run_dir = Path(run_dir)
    calib = run_dir / "calibration.npy"
    obs = np.load(calib)[0] if calib.is_file() else None
    out = out or run_dir / "results"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    from tqdm import tqdm
    bar = tqdm(total=len(boards) * len(PRECISIONS), desc="bench", unit="cell",
               disable=not progress, leave=False)
    partial = out / "bench.jsonl.partial"
    with partial.open("w") as log:
        for board in boards:
            for scheme in PRECISIONS:
                bar.set_postfix_str(f"{board.id} {scheme}")
                x = obs if obs is not None else np.zeros(1, np.float32)
                try:
                    row = bench_cell(run_dir, board, scheme, n, x, flasher, drive)
                except QuarlError as e:        # e.g. does not fit: a result too, not a crash
                    row = {"board": board.id, "cpu": board.cpu, "precision": scheme, "error": str(e)}
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                bar.update(1)
    bar.close()
    partial.replace(out / "bench.jsonl")
    tmp = out / "bench.md.tmp"
    tmp.write_text(markdown(rows))
    tmp.replace(out / "bench.md")
    return rows


def speedups(rows: list[dict]) -> dict[str, float]:
    by = {(r["board"], r["precision"]): r for r in rows if "error" not in r}
    return {b: by[(b, "fp32")]["cost_mean"] / by[(b, "int8")]["cost_mean"]
            for (b, p) in by if p == "int8" and (b, "fp32") in by and by[(b, "int8")]["cost_mean"]}


def markdown(rows: list[dict]) -> str:
    sp = speedups(rows)
    lines = ["| board | cpu | precision | kernels | cost / inference | unit | est. time at board clock | "
             "flash (B) | RAM (B) | stack (B) | arena (B) | int8 speedup |",
             "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['board']} | {r['cpu']} | {r['precision']} | | refused: {r['error']} |"
                         " | | | | | | |")
            continue
        est = ""
        if r["clock_hz"] and r["unit"] in ("cycles", "instructions"):
            us = r["cost_mean"] / r["clock_hz"] * 1e6
            est = f"~{us:,.0f} µs" + (" (1 instr/cycle, estimate)" if r["unit"] == "instructions" else "")
        speed = f"{sp[r['board']]:.2f}x" if r["precision"] == "int8" and r["board"] in sp else ""
        lines.append(f"| {r['board']} | {r['cpu']} | {r['precision']} | {r.get('kernels', '')} | "
                     f"{r['cost_mean']:,.0f} | "
                     f"{r['unit']} | {est} | {r['flash_bytes'] or '-'} | {r['ram_bytes'] or '-'} | "
                     f"{r['stack_bytes']} | {r['arena_bytes']} | {speed} |")
    return "\n".join(lines) + "\n"
