"""bench: cost per inference, flash, RAM and stack per board and scheme, in one table.

Each (board, scheme) cell builds the firmware, starts the board, sends one real observation
(from the run's calibration set) with INFER, then BENCH n repeats it on the board. Costs stay in
each board's own unit (ns, cycles, instructions); the int8/fp32 speedup is a ratio within one
board, so units never mix. Results are written per cell as they finish (JSON lines), then as
Markdown.

With episodes=N (`bench --episodes N`), each cell also plays N episodes of the run's env on
seeds 0..N-1 with the board choosing every action (episodes.py, in the same board session, after
the cost and memory measurement), then the same seeds with the same model on tflite-runtime
(its reference kernels and its optimized ones) and on TF Lite Micro: the row gets the board's
return and whether it equals each of theirs on every seed. The firmware is bit-exact with TF
Lite Micro; tflite-runtime's reference kernels differ from it only in the int8
FULLY_CONNECTED multiplier (a float32 product of the scales, see reference.py), its optimized
int8 kernels also in their GEMM backends' requantization and table TANH and LOGISTIC, so an
int8 board can now and then return other values than tflite-runtime. The fp32
network plays the seeds once per bench, for the loss and the agreement (the share of the
board's visited states where the fp32 network picks the same action; continuous actions:
1 - mean |a - a_fp32| / action range).

A row (one JSON line of OUT/bench.jsonl; `quarl-edge report RESULTS --bench BENCH.jsonl`
reads them) is measure/rows.py's BenchRow: board, cpu, scheme, kernels, the cost per inference
in the board's unit (BENCH n), memory, or the error instead of the figures; with episodes > 0
also the episode columns. Rows written before under older names (precision, run) are read with
today's names (rows.migrate) when a bench merges its rows into the file.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.files import locked, open_new, own, read_own, remove_stale, write_atomic
from ..link.session import BoardSession
from ..core.names import BENCH_MAX_N
from ..core.envs import default_head, make_gym
from ..core.run import Run, load_run, tflite_path
from ..targets.boards import Board, all_boards, get_board
from .deadline import deadline, markdown as deadline_markdown
from .energy import energy, markdown as energy_markdown
from .episodes import Fp32Episodes, board_episodes
from .rows import migrate
from .reference import check_env_fits_model

SCHEMES = ("fp32", "int8")      # what a run is benched with


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
    if not out:
        raise QuarlError(f"no board in --boards {spec!r}: give board ids (comma-separated) or "
                         "all-emulated")
    return list({b.id: b for b in out}.values())


def bench_cell(run_dir: Path, board: Board, scheme: str, n: int, obs: np.ndarray,
               flasher: str | None = None, drive: str | None = None,
               episodes: tuple[str, list[int], Fp32Episodes] | None = None,
               control_hz: float | None = None, firmware=None) -> dict:
    """One (board, scheme) row: cost and memory; with `episodes` (env id, seeds, the fp32
    network's episodes), then the board's episodes (board_episodes); with `control_hz`, the
    deadline answer (measure/deadline.py) over the first INFER and n BENCHes of one inference
    each (BENCH n gives only min, max and sum; the p99 needs every cost). `run_dir` may be a
    bare MODEL.tflite (then `scheme` is its stem). `firmware`: built already for this model
    and board (quarl_edge/pipeline.py), else the session builds it into
    HOME/build/<board>/<scheme>."""
    bare = run_dir.suffix == ".tflite"
    model = run_dir if bare else tflite_path(run_dir, scheme)
    home = Run.of_policy(run_dir)
    with BoardSession(model, board, home.build_dir(board.id, scheme),
                      flasher=flasher, drive=drive, firmware=firmware) as s:
        spec = s.info.inputs[0]
        if spec.dtype != "float32":
            raise QuarlError("bench feeds float observations; the model's input must be float32")
        if obs.size != int(np.prod(spec.shape)):   # no observation of the model's size: zeros
            obs = np.zeros(spec.shape, np.float32)
        _, first = s.link.infer([obs.reshape(spec.shape)])
        stats = s.link.bench(n)
        mem = s.memory()
        row = {"board": board.id, "cpu": board.cpu, "scheme": scheme, "kernels": board.kernels,
               "unit": s.info.cost_unit,
               "cost_first": first, "cost_mean": stats.mean, "cost_min": stats.min,
               "cost_max": stats.max, "n": stats.n, "clock_hz": board.clock_hz,
               "flash_bytes": mem.get("flash_bytes"), "ram_bytes": mem.get("ram_bytes"),
               "stack_bytes": mem.get("stack_bytes"), "arena_bytes": mem.get("arena_bytes"),
               "energy": energy(board, stats.mean)}
        if control_hz is not None:
            costs = [first] + [s.link.bench(1).max for _ in range(n)]
            row["deadline"] = deadline(costs + [stats.min, stats.max], s.info.cost_unit,
                                       board.clock_hz, control_hz, board.kind)
        if episodes is not None:
            row.update(board_episodes(s, model, *episodes))
        return row


def run_bench(run_dir: Path, boards: list[Board], n: int = 100, out: Path | None = None,
              progress: bool = False, flasher: str | None = None,
              drive: str | None = None, episodes: int = 0,
              env_id: str | None = None, control_hz: float | None = None) -> list[dict]:
    """Every (board, scheme) cell: one row each, written as it finishes to
    OUT/bench.jsonl.PID.partial (default OUT: RUN/results); when all cells are done they are
    merged into OUT/bench.jsonl (replacing the rows of the same run, board, scheme and
    seeds, keeping the others: two benches at once keep both) and OUT/bench.md is made from it.
    A bench that fails keeps the previous results.
    `episodes` > 0: each row also gets the return of that many episodes on the board (seeds
    0..episodes-1; see the module docstring). `progress`: a bar over the cells on stderr.

    `run_dir` may be a bare MODEL.tflite: one row per board, its scheme the model's stem,
    results in MODEL's folder/results; `env_id` names its env (needed for episodes; its first
    observation is what BENCH repeats, else zeros), and the episodes' reference is the model
    on TF Lite Micro instead of an fp32 network. `control_hz`: each row also gets the
    deadline answer against the period 1/control_hz (bench_cell)."""
    _check_counts(n, episodes, boards)
    run_dir = Path(run_dir)
    meta, schemes, home = _bench_policy(run_dir, episodes, env_id)
    play_spec = _play_spec(run_dir, meta, episodes) if episodes else None
    obs = _bench_observation(run_dir, meta, home)
    out = Path(out) if out else Run(home).results_dir()
    out.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    read_own(out / "bench.jsonl", binary=True)   # a link out of OUT: refused before the cells
    rows = _bench_cells(run_dir, meta, boards, schemes, n, obs, out, progress, flasher, drive,
                        play_spec, control_hz)
    with locked(out):    # another bench may be merging its rows into the same files
        merged = merge_rows(out / "bench.jsonl", rows)
        write_atomic(out / "bench.jsonl", "".join(r if isinstance(r, str) else
                                                   json.dumps(r) + "\n" for r in merged))
        write_atomic(out / "bench.md", markdown([r for r in merged if isinstance(r, dict)]))
    return rows


def _check_counts(n, episodes, boards) -> None:
    """n, episodes and the boards as a bench takes them, else a QuarlError naming the one."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= BENCH_MAX_N:
        raise QuarlError(f"n (inferences per BENCH) must be an integer in 1..{BENCH_MAX_N}, "
                         f"got {n!r}")
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 0:
        raise QuarlError(f"episodes must be an integer >= 0, got {episodes!r}")
    if not boards:     # an empty result would replace nothing: a usage error
        raise QuarlError("bench needs at least one board")


def _bench_policy(run_dir: Path, episodes: int, env_id: str | None) -> tuple[dict, tuple, Path]:
    """(what the rows say of the run: its env and algo, the schemes to bench, the folder of
    its builds and results) for a run directory or a bare MODEL.tflite."""
    if run_dir.suffix == ".tflite":
        if not run_dir.is_file():
            raise QuarlError(f"no model at {run_dir}")
        if episodes and env_id is None:
            raise QuarlError(f"{run_dir} is a bare model: episodes need its env (--env ID)")
        if env_id is not None:
            check_env_fits_model(env_id, run_dir, run_dir)
        return {"env": env_id, "algo": None}, (run_dir.stem,), run_dir.parent
    meta = load_run(run_dir)
    if env_id is not None and env_id != meta["env"]:
        raise QuarlError(f"{run_dir} was made for {meta['env']}, not {env_id}")
    if episodes and (meta.get("network") or {}).get("recurrent"):
        raise QuarlError(f"{run_dir} is a recurrent policy: its episodes need the state reset "
                         "per episode; play them with `quarl-edge hil` (bench measures its cost)")
    return meta, SCHEMES, run_dir


def _play_spec(run_dir: Path, meta: dict, episodes: int) -> tuple[str, list[int], Fp32Episodes]:
    """(env id, seeds 0..episodes-1, the reference's episodes on them) for bench_cell."""
    seeds = list(range(episodes))
    head = meta.get("action_head") or default_head(make_gym(meta["env"]).action_space)
    ref = (Fp32Episodes.for_model(run_dir, meta["env"], head, seeds)
           if run_dir.suffix == ".tflite" else
           Fp32Episodes.for_run(run_dir, meta["env"], head, seeds))
    return meta["env"], seeds, ref


def _bench_observation(run_dir: Path, meta: dict, home: Path) -> np.ndarray:
    """What BENCH repeats: the run's first calibration observation, else the env's first
    observation, else a zero."""
    calib = Run(home).load_calibration() if run_dir.suffix != ".tflite" else None
    obs = calib[0] if calib is not None else None
    if obs is None and meta["env"] is not None:
        obs = np.asarray(make_gym(meta["env"]).reset(seed=0)[0], np.float32)
    return obs if obs is not None else np.zeros(1, np.float32)


def _bench_cells(run_dir: Path, meta: dict, boards: list[Board], schemes: tuple, n: int,
                 obs: np.ndarray, out: Path, progress: bool, flasher: str | None,
                 drive: str | None, play_spec, control_hz: float | None = None) -> list[dict]:
    """Every (board, scheme) row, each written to OUT/bench.jsonl.PID.partial as it
    finishes (removed at the end: a failed bench leaves the previous results)."""
    from tqdm import tqdm   # the progress bar: loaded only when a bench starts
    rows = []
    bar = tqdm(total=len(boards) * len(schemes), desc="bench", unit="cell",
               disable=not progress, leave=False)
    partial = own(out / "bench.jsonl", "partial")
    try:
        with open_new(partial) as log:
            for board in boards:
                for scheme in schemes:
                    bar.set_postfix_str(f"{board.id} {scheme}")
                    try:
                        row = bench_cell(run_dir, board, scheme, n, obs, flasher, drive,
                                         play_spec, control_hz)
                    except QuarlError as e:        # e.g. does not fit: a result too, not a crash
                        row = {"board": board.id, "cpu": board.cpu, "scheme": scheme,
                               "error": str(e)}
                    row = {**row, "run_dir": str(run_dir), "env": meta["env"],
                           "algo": meta.get("algo")}
                    rows.append(row)
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    bar.update(1)
    finally:
        bar.close()
        partial.unlink(missing_ok=True)
    return rows


def row_key(row: dict) -> tuple:
    """Rows of the same cell: a later bench of it replaces the earlier row."""
    return (row.get("run_dir"), row.get("board"), row.get("scheme"), tuple(row.get("seeds") or ()))


def merge_rows(path: Path, rows: list[dict]) -> list:
    """The rows already in `path` (a bench.jsonl; a line that is not a row is kept as it is;
    an older row gets today's keys: rows.migrate), those of the cells in `rows` replaced by
    them, and the new ones after them."""
    new = {row_key(r): r for r in rows}
    merged: list = []
    for line in (read_own(path) or "").splitlines(True):
        try:
            old = json.loads(line)
        except (ValueError, RecursionError):
            old = None
        if isinstance(old, dict):
            old = migrate(old)
        if not isinstance(old, dict) or not {"board", "cpu", "scheme"} <= set(old):
            merged.append(line if line.endswith("\n") else line + "\n")
        elif row_key(old) not in new:
            merged.append(old)
    return merged + rows


def speedups(rows: list[dict]) -> dict[str, float]:
    by = {(r["board"], r["scheme"]): r for r in rows if "error" not in r}
    return {b: by[(b, "fp32")]["cost_mean"] / by[(b, "int8")]["cost_mean"]
            for (b, p) in by if p == "int8" and (b, "fp32") in by and by[(b, "int8")]["cost_mean"]}


def markdown(rows: list[dict]) -> str:
    sp = speedups(rows)
    played = any("episodes" in r for r in rows)     # bench --episodes: the return columns too
    head = ["board", "cpu", "scheme", "kernels", "cost / inference", "unit",
            "est. time at board clock", "flash (B)", "RAM (B)", "stack (B)", "arena (B)",
            "int8 speedup"]
    align = ["---"] * 4 + ["---:", "---", "---:"] + ["---:"] * 5
    if played:
        head += ["return (mean ± std)", "= TF Lite Micro", "agreement"]
        align += ["---:", "---", "---:"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['board']} | {r['cpu']} | {r['scheme']} | | refused: {r['error']} |"
                         + " |" * (len(head) - 5))
            continue
        est = ""
        if r["clock_hz"] and r["unit"] in ("cycles", "instructions"):
            us = r["cost_mean"] / r["clock_hz"] * 1e6
            est = f"~{us:,.0f} µs" + (" (1 instr/cycle, estimate)" if r["unit"] == "instructions" else "")
        speed = f"{sp[r['board']]:.2f}x" if r["scheme"] == "int8" and r["board"] in sp else ""
        line = (f"| {r['board']} | {r['cpu']} | {r['scheme']} | {r.get('kernels', '')} | "
                f"{r['cost_mean']:,.0f} | "
                f"{r['unit']} | {est} | {r['flash_bytes'] or '-'} | {r['ram_bytes'] or '-'} | "
                f"{r['stack_bytes']} | {r['arena_bytes']} | {speed} |")
        if played:
            line += (f" {r['mean_return']:,.1f} ± {r['std_return']:,.1f} | "
                     f"{'yes' if r['matches_reference'] else 'NO'} | "
                     f"{r['agreement']:.3f} |"
                     if "episodes" in r else " | | |")
        lines.append(line)
    if played:
        n = max(r.get("episodes", 0) for r in rows)
        lines.append("")
        lines.append(f"Return: {n} episodes on seeds 0..{n - 1}, the board choosing every action; "
                     "= TF Lite Micro: the same model on TF Lite Micro (the reference the "
                     "firmware is bit-exact with) returns the same on every seed; agreement: with the fp32 network's actions on the states the "
                     "board visited.")
    return "\n".join(lines) + "\n" + deadline_markdown(rows) + energy_markdown(rows)
