"""The pipeline, composed once: each stage one short step, in the order they run.

    run = Run(out); pipeline.train("CartPole-v1", "dqn", run.dir)         # rl
    model = pipeline.quantize(run.dir, "int8")                            # quant: run.tflite("int8")
    out = run.build_dir(board.id, "int8")                                 # RUN/build/<board>/int8
    gen = pipeline.generate_c(model, board, out)                          # converters: out/gen
    fw = pipeline.build(model, board, out, generated=gen)                 # targets: out/firmware.elf
    with pipeline.session(model, board, out, firmware=fw) as s: ...       # targets.launch + link
    result = pipeline.hil(run.dir, board, "int8", episodes=20)            # measure (checks, builds,
                                                                          #  then plays)

`hil`, `bench_cell` and `session_for` do the steps above in that order (checks first: a model
that does not fit the env, or a refused network file, stops before anything is built); bench,
validate and bench --per-op still let their board session build (the compatible path:
BoardSession builds when it is given no firmware). The API (quarl_edge/api.py), the demo, the
study's cells and the benchmarks call these steps instead of wiring the stages themselves.

Rank: above measure (it composes rl, quant, converters via targets, link and measure), below
study and the API, which import it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .link.session import BoardSession
from .measure.bench import bench_cell as measure_cell
from .measure.bench import run_bench
from .measure.hil import hil_fp32, hil_policy, run_hil
from .measure.hil_act import run_hil_act
from .measure.perop import perop_cell as measure_perop_cell
from .measure.perop import run_perop
from .measure.selection import int8_judge
from .measure.validate import validate as run_validate
from .quant.schemes import quantize as convert
from .rl.train import train as rl_train
from .core.run import Run
from .targets.boards import Board
from .targets.build import Firmware
from .targets.build import build as build_firmware
from .targets.build import generate_c as generate


# ------------------------------------------------------------------------- model side
def train(env_id: str, algo: str, out: Path, *, steps: int | None = None, seed: int = 0,
          progress: bool = False, judge=int8_judge, **options) -> dict:
    """Train `algo` on `env_id` into the run directory `out`; run.json's contents."""
    return rl_train(env_id, algo, steps=steps, seed=seed, out=Path(out), progress=progress,
                    judge=judge, **options)


def quantize(run_dir: Path, scheme: str, **options) -> Path:
    """RUN/models/<scheme>.tflite (quant/schemes.py's options: calib_size, seed, qat, ...)."""
    return convert(Path(run_dir), scheme, **options)


# ------------------------------------------------------------------------- board side
def needs_build(board: Board, port: str | None = None, flash: bool = False) -> bool:
    """Whether a session with `board` runs firmware built here: not when `port` names a board
    that runs the model already (unless `flash`), nor for a board that runs the .tflite itself
    (a linux board's agent)."""
    return board.method.builds_firmware and (port is None or (flash and board.method.flashes))


def generate_c(model: Path, board: Board, out_dir: Path) -> Path:
    """The model as C for the board's kernels: OUT/gen (model.c, model.json)."""
    return generate(Path(model), board, Path(out_dir))


def build(model: Path, board: Board, out_dir: Path, generated: Path | None = None) -> Firmware:
    """The firmware for `board` in OUT (firmware.elf, images, memory.json, build.log),
    compiled from `generated` (generate_c's OUT/gen) or generated first."""
    return build_firmware(Path(model), board, Path(out_dir), generated=generated)


def firmware(model: Path, board: Board, out_dir: Path, port: str | None = None,
             flash: bool = False) -> Firmware | None:
    """generate_c then build, when a session with the board needs firmware (needs_build)."""
    if not needs_build(board, port, flash):
        return None
    return build(model, board, out_dir, generated=generate_c(model, board, out_dir))


def session(model: Path, board: Board, out_dir: Path, *, firmware: Firmware | None = None,
            port: str | None = None, flasher: str | None = None, drive: str | None = None,
            flash: bool = False) -> BoardSession:
    """A BoardSession (a context manager) that starts or flashes the board with `firmware`,
    or talks to the board on `port`, and handshakes."""
    return BoardSession(Path(model), board, Path(out_dir), port=port, flasher=flasher,
                        drive=drive, flash=flash, firmware=firmware)


def session_for(model: Path, board: Board, out_dir: Path, *, port: str | None = None,
                flasher: str | None = None, drive: str | None = None,
                flash: bool = False) -> BoardSession:
    """generate_c, build (when needed) and session in one call."""
    fw = firmware(model, board, out_dir, port, flash)
    return session(model, board, out_dir, firmware=fw, port=port, flasher=flasher,
                   drive=drive, flash=flash)


# ---------------------------------------------------------------------------- measure
def hil(run: Path, board: Board, scheme: str = "int8", episodes: int = 20, *, seed: int = 0,
        port: str | None = None, flasher: str | None = None, drive: str | None = None,
        progress: bool = False, results_dir: Path | None = None, env_id: str | None = None,
        head: str | None = None, control_hz: float | None = None, act: bool = False) -> dict:
    """Hardware in the loop (measure/hil.py) on the run's `scheme` model, or a bare
    MODEL.tflite (`scheme` is then its stem): the model checked against the env and the fp32
    network loaded, then the firmware generated and built into RUN/build/<board>/<scheme>,
    then the board started and played. `act`: the exported policy acts (measure/hil_act.py,
    which builds its firmware itself: the library goes in beside the model)."""
    run = Path(run)
    kw = dict(seed=seed, port=port, progress=progress, flasher=flasher, drive=drive,
              results_dir=results_dir, env_id=env_id, head=head, control_hz=control_hz)
    if act:
        return run_hil_act(run, scheme, board, episodes, **kw)
    t = hil_policy(run, scheme, env_id, head)        # checked before anything is built
    fp32 = hil_fp32(t, run)
    fw = firmware(t.model, board, Run(t.home).build_dir(board.id, scheme), port)
    return run_hil(run, scheme, board, episodes, target=t, fp32=fp32, firmware=fw, **kw)


def bench_cell(run_dir: Path, board: Board, scheme: str, n: int, obs: np.ndarray,
               episodes=None, control_hz: float | None = None) -> dict:
    """One bench row (measure/bench.py's bench_cell) with the firmware generated and built
    first into RUN/build/<board>/<scheme>."""
    run_dir = Path(run_dir)
    home = Run.of_policy(run_dir)
    model = run_dir if run_dir.suffix == ".tflite" else home.tflite(scheme)
    fw = firmware(model, board, home.build_dir(board.id, scheme))
    return measure_cell(run_dir, board, scheme, n, obs, episodes=episodes,
                        control_hz=control_hz, firmware=fw)


def bench(run: Path, boards: list[Board], **options) -> list[dict]:
    """Every (board, scheme) bench row (measure/bench.py's run_bench)."""
    return run_bench(Path(run), boards, **options)


def bench_per_op(run: Path, boards: list[Board], **options) -> list[dict]:
    """Each op's cost per (board, scheme) (measure/perop.py)."""
    return run_perop(Path(run), boards, **options)


def perop_cell(run_dir: Path, board: Board, scheme: str, runs: int, obs: np.ndarray
               ) -> list[dict]:
    """One (board, scheme) cell of bench --per-op (measure/perop.py's perop_cell): its "op"
    rows and its "total" row; its two sessions build the normal and the per-op firmware."""
    return measure_perop_cell(Path(run_dir), board, scheme, runs, obs)


def validate(model: Path, board: Board, out_dir: Path, **options) -> dict:
    """The model's outputs on the board against TF Lite Micro's (measure/validate.py; its
    session builds the firmware once the inputs are checked)."""
    return run_validate(Path(model), board, Path(out_dir), **options)
