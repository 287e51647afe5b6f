"""The main job: train (or take the shipped run), quantize, generate, build, flash and HIL-evaluate,
then print one table comparing fp32, int8 on the host and int8 on the board.

It goes through the public Python API (quarl_edge.api: train, quantize, models, load_board, hil),
as a user's script would; it only prints."""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from . import api
from .core.resources import examples_dir
from .core.run import Run

SCHEMES = ("fp32", "fp16", "int8")
BOARD_SCHEMES = ("fp32", "int8")     # what the firmware runs (fp16 is a host-only size variant)


def fmt_return(mean: float, std: float) -> str:
    return f"{mean:7.1f} ± {std:5.1f}"


def fmt_bytes(n) -> str:
    return "-" if n is None else f"{n:,} B"


def prepare_run(pretrained: bool, workdir: Path, steps: int | None, seed: int) -> Path:
    if pretrained:
        src = examples_dir() / "cartpole_dqn"
        run = workdir / "cartpole_dqn-pretrained"
        if run.exists():
            shutil.rmtree(run)
        Run(src).copy_to(run)
        print(f"[1/5] using the shipped example run {src} (copied to {run})")
        return run
    run = workdir / f"cartpole_dqn-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"[1/5] training DQN on CartPole-v1 into {run}")
    info = api.train("CartPole-v1", "dqn", out=run, steps=steps, seed=seed, progress=True).info
    print(f"      trained in {info.get('train_seconds', 0):.0f} s, best greedy validation return "
          f"{info.get('best_greedy_return')}")
    return run


def demo(pretrained: bool = False, board_id: str = "mps2-an386", episodes: int = 20,
         workdir: Path = Path("runs"), steps: int | None = None, seed: int = 0,
         board_file: str | Path | None = None) -> list[dict]:
    """The whole pipeline; `board_file` (a board file's path) instead of `board_id`. Returns
    the HIL result of each board scheme (api.HilResult as a dict)."""
    board = api.load_board(board_id, board_file=board_file)
    workdir.mkdir(parents=True, exist_ok=True)
    run = prepare_run(pretrained, workdir, steps, seed)

    print("[2/5] quantizing: " + ", ".join(SCHEMES))
    models = api.models(run, SCHEMES) if pretrained else api.quantize(run, SCHEMES)
    for m in models:
        print(f"      {m.scheme:5s} {m.size_bytes:8,d} B")

    results = {}
    for i, scheme in enumerate(BOARD_SCHEMES):
        print(f"[{3 + i}/5] generating C, building for '{board.id}' and running {episodes} HIL "
              f"episodes with the {scheme} model")
        results[scheme] = api.hil(run, board, scheme=scheme, episodes=episodes)

    print("[5/5] results (same seeds 0.." f"{episodes - 1} for every row)\n")
    print_table(results, board.id)
    print(f"agreement = share of the board's actions equal to the fp32 network's on the states the "
          f"board visited. Results: {Run(run).results_dir(make=False)}")
    return [dataclasses.asdict(r) for r in results.values()]


def print_table(results: dict[str, api.HilResult], board_id: str) -> None:
    """The results table: the fp32 network, then per board scheme the host interpreter and the
    board; and int8's speed and arena against fp32's on the board."""
    fp32 = results["fp32"]
    rows = [
        ("fp32", "TensorFlow (host)", fp32.fp32_mean_return, fp32.fp32_std_return, 1.0, None, None),
    ]
    for scheme in BOARD_SCHEMES:
        r = results[scheme]
        host = r.host_interpreter.split()[0]          # tflite-runtime or LiteRT
        rows.append((scheme, f"{host} (host)", r.tflite_mean_return, r.tflite_std_return,
                     None, None, None))
        rows.append((scheme, f"board '{board_id}'", r.mean_return, r.std_return,
                     r.agreement, r.latency, r.memory))
    header = (f"{'model':6s} {'runs on':24s} {'return (mean ± std)':>19s} {'agree':>6s} "
              f"{'latency/inference':>22s} {'flash':>11s} {'RAM':>11s} {'stack':>9s}")
    print(header)
    print("-" * len(header))
    for scheme, where, mean, std, agree, lat, mem in rows:
        lat_s = f"{lat.median:,.0f} {lat.unit} (p99 {lat.p99:,.0f})" if lat else "-"
        mem = mem or {}
        print(f"{scheme:6s} {where:24s} {fmt_return(mean, std):>19s} "
              f"{'-' if agree is None else f'{agree:.3f}':>6s} {lat_s:>22s} "
              f"{fmt_bytes(mem.get('flash_bytes')):>11s} {fmt_bytes(mem.get('ram_bytes')):>11s} "
              f"{fmt_bytes(mem.get('stack_bytes')):>9s}")
    lat32, lat8 = results["fp32"].latency.median, results["int8"].latency.median
    if lat32 and lat8:
        print(f"\nint8 vs fp32 on '{board_id}': {lat32 / lat8:.2f}x the speed "
              f"({results['int8'].latency.unit}), model arena "
              f"{results['int8'].memory.get('arena_bytes')} B vs "
              f"{results['fp32'].memory.get('arena_bytes')} B")
