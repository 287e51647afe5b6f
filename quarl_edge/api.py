"""The Python API: what the `quarl-edge` command does, as functions.

    import quarl_edge as qe
    run = qe.train("CartPole-v1", "dqn", out="runs/cartpole")
    qe.quantize(run.run_dir, ["fp32", "int8"])
    fw = qe.build("runs/cartpole/models/int8.tflite", "mps2-an386")
    res = qe.validate("runs/cartpole/models/int8.tflite", "mps2-an386")
    res.bit_exact, res.latency.median, res.latency.unit

Every function takes paths as str or Path and boards as ids (or a loaded Board), returns a
dataclass with the same data as the CLI's `--json` (`dataclasses.asdict(result)`), prints
nothing unless asked (`progress=True`), and raises a `quarl_edge.core.errors.QuarlError` subclass
for anything a user can cause (a missing file, an unknown board, a model the firmware cannot
run, a board that does not answer, a missing toolchain). Each function is a thin layer over
the pipeline's steps (quarl_edge/pipeline.py: train, quantize, generate_c, build, session, hil,
bench, validate) or of a stage (boards, study); `import quarl_edge` stays cheap as the package
loads this module on first use (quarl_edge/__init__.py), and TensorFlow is loaded by the
stages only when they convert or train. The result dataclasses are in quarl_edge/api_results.py.

Where files go: a run's builds and results stay in the run directory (RUN/build/<board>/<scheme>,
RUN/results); a bare .tflite is built under ./build/<board>/<model name>; every result names
the directory it wrote (`out_dir`), and `out=` puts it elsewhere.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import warnings
from pathlib import Path
from typing import Iterable

from . import pipeline
from .api_results import (BoardInfo, BuildResult, ExportResult, ImportResult, QuantizeResult,
                          ReportResult, StudySummary, SweepRow, TrainResult, ValidateResult)
from .core.errors import QuarlError
from .importers import import_policy as run_import
from .measure.bench import select_boards
from .measure.deadline import check_control_hz
from .measure.export import export_library
from .core.names import BENCH_MAX_N
from .quant.nbit import nbit_sweep
from .core.run import Run
from .targets.boards import Board, all_boards, get_board, load_board_file
from .targets.emulate import emulate as start_emulation
from .targets.flash_tools import describe_tools
from .targets.launch import ssh_deploy
from .targets.ports import list_ports
# the row schema of hil, bench and the study's board cells (dataclasses only: no stage's weight)
from .measure.rows import BenchRow, HilResult, Latency

# TensorFlow's C++ start-up lines (oneDNN, CPU features) are not the API's to print; a caller
# who set the variable keeps theirs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PathLike = str | os.PathLike

__all__ = ["BenchRow", "BoardInfo", "BuildResult", "ExportResult", "HilResult", "ImportResult",
           "Latency", "QuantizeResult", "ReportResult", "StudySummary", "SweepRow", "TrainResult",
           "ValidateResult", "bench", "bench_per_op", "boards", "build", "emulate", "export",
           "farm_node", "hil", "import_policy",
           "load_board", "models", "ports", "quantize", "report", "session", "study",
           "results_dir", "study_status", "sweep", "train", "validate"]


# ------------------------------------------------------------------------------ results
def _from(cls, data: dict, **extra):
    """`cls` from a stage's result dict: every key must be a field (a new key in a stage's
    result that the API does not carry is a bug to see, not to drop)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {', '.join(sorted(unknown))}")
    return cls(**{**data, **extra})


# ----------------------------------------------------------------------------- helpers
def _renamed(**old_to_new: str):
    """A function's keyword arguments renamed to the vocabulary (docs/layout.md, Vocabulary):
    the old keyword still works, with a DeprecationWarning naming the new one."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {old}= (deprecated) and "
                                        f"{new}=")
                    warnings.warn(f"{fn.__name__}({old}=...) is deprecated; use {new}=",
                                  DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)
        call.renamed = dict(old_to_new)
        return call
    return wrap


def _board(board, board_file: PathLike | None = None):
    """A loaded Board: `board` itself, the board with that id, or the file `board_file` (a board
    file from anywhere is loaded only when named as one: it names the compiler that runs)."""
    if board_file is not None:
        return load_board_file(Path(board_file))
    return board if isinstance(board, Board) else get_board(str(board))


def _count(name: str, value, low: int = 1, high: int | None = None) -> int:
    """A count argument (episodes, inputs, steps, ...) checked like the CLI's: an integer in
    low..high, else a QuarlError naming it."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        want = f"in {low}..{high}" if high is not None else f">= {low}"
        raise QuarlError(f"{name} must be an integer {want}, got {value!r}")
    return value


def _port(port: str | None) -> str | None:
    """A --port that pyserial would misread: a socket:// URL without a valid host:port (pyserial
    reports a bad port number as "'debug|info|warning|error'")."""
    if port is None or not str(port).startswith("socket://"):
        return port
    host, _, number = str(port).removeprefix("socket://").partition("?")[0].rpartition(":")
    if not host or not number.isdigit() or not 0 < int(number) < 65536:
        raise QuarlError(f"--port {port}: a socket URL is socket://HOST:PORT with PORT in "
                         "1..65535")
    return port


def _model(policy: PathLike, scheme: str | None = None) -> tuple[Path, Path | None]:
    """A .tflite file, or a run directory and the scheme of its model -> (model, run dir)."""
    path = Path(policy)
    if path.is_dir():
        return Run(path).tflite(scheme or "int8"), path
    if path.is_file():
        if scheme is not None:
            raise QuarlError(f"{policy} is a model file; a scheme ({scheme}) picks a model of a "
                             "run directory")
        return path, None
    raise QuarlError(f"{policy} is neither a run directory nor a .tflite file")


def build_dir(model: Path, run_dir: Path | None, board_id: str, scheme: str | None = None) -> Path:
    """Where a build goes by default: RUN/build/<board>/<scheme> for a run's model, else
    ./build/<board>/<model name>."""
    if run_dir is not None:     # (a symlink there leading out of the run is refused)
        return Run(run_dir).build_dir(board_id, scheme or model.stem)
    return Run(Path()).build_dir(board_id, model.stem, make=False)


def results_dir(policy: PathLike) -> Path:
    """Where hil, bench and bench --per-op write by default: RUN/results for a run directory,
    MODEL's folder/results for a bare MODEL.tflite (named, not made)."""
    return Run.of_policy(policy).results_dir(make=False)


# ------------------------------------------------------------------------------ stages
def train(env: str = "CartPole-v1", algo: str = "dqn", *, out: PathLike, steps: int | None = None,
          seed: int = 0, progress: bool = False, **options) -> TrainResult:
    """Train `algo` (dqn, ppo, sac, td3, ddpg) on the Gymnasium env `env` into the run directory
    `out`. `steps` None takes the tuned default for (algo, env); `options` set any other field
    of the algorithm's config (quarl_edge.rl: DQNConfig, PPOConfig, OffPolicyConfig)."""
    if steps is not None:
        _count("steps", steps)
    _count("seed", seed, 0)
    info = pipeline.train(env, algo, Path(out), steps=steps, seed=seed, progress=progress,
                          **options)
    return TrainResult(str(out), info["env"], info["algo"], info["seed"], info["steps"],
                       info["train_seconds"], info["best_greedy_return"], info)


def import_policy(source: PathLike, *, out: PathLike, env: str | None = None,
                  vecnormalize: PathLike | None = None, kind: str | None = None) -> ImportResult:
    """A policy trained elsewhere as a run directory `out`: a Stable-Baselines3 .zip (with its
    VecNormalize statistics: `vecnormalize`, or NAME.vecnormalize.pkl / vecnormalize.pkl
    beside it), an .onnx, a .keras/.h5 Keras model or a TF-Agents / TF SavedModel directory.
    `env`: the Gymnasium id (an SB3 zip named after its env needs none). The imported network
    is checked against the source on 1,000 env observations (`fidelity`). Nothing is read by
    running code from the file, and nothing is written to `out` unless the import succeeds."""
    info = run_import(Path(source), Path(out), env=env, vecnormalize=vecnormalize, kind=kind)
    return ImportResult(str(out), info["env"], info["algo"], info["source"], info["fidelity"],
                        info)


def quantize(run: PathLike, schemes: str | Iterable[str] = ("fp32", "fp16", "int8"), *,
             calib_size: int = 1000, qat_steps: int | None = None,
             distill_steps: int | None = None, progress: bool = False) -> list[QuantizeResult]:
    """Convert the run's network to RUN/models/<scheme>.tflite for each scheme
    (quarl_edge.quant.schemes.SCHEMES: fp32, fp16, int8, dyn-int8, int16x8, int8x4, qat-int8,
    qat-int8x4, qat-distill-int8, qat-distill-int8x4, int8-centred, int8-acc,
    int8-centred-acc)."""
    _count("calib_size", calib_size)
    for name, value in (("qat_steps", qat_steps), ("distill_steps", distill_steps)):
        if value is not None:
            _count(name, value)
    out = []
    for scheme in [schemes] if isinstance(schemes, str) else list(schemes):
        path = pipeline.quantize(Path(run), scheme, calib_size=calib_size, progress=progress,
                       qat={"steps": qat_steps} if qat_steps is not None else None,
                       distill={"steps": distill_steps} if distill_steps is not None else None)
        out.append(QuantizeResult(scheme, str(path), path.stat().st_size))
    return out


def models(run: PathLike, schemes: Iterable[str]) -> list[QuantizeResult]:
    """The models the run directory already holds (RUN/models/<scheme>.tflite), as quantize
    returns them, without converting anything: a QuarlError names a scheme it lacks."""
    return [QuantizeResult(s, str(p), p.stat().st_size)
            for s, p in ((s, Run(run).tflite(s)) for s in schemes)]


def sweep(run: PathLike, *, bits: Iterable[int] = range(2, 9),
          modes: Iterable[str] = ("weights+activations", "weights"), per_channel: bool = False,
          seeds: Iterable[int] = range(20)) -> list[SweepRow]:
    """QuaRL's n-bit sweep: greedy return on `seeds` with weights and/or activations
    fake-quantized to each bit width (the first row is fp32)."""
    bits, seeds = list(bits), list(seeds)
    for b in bits:
        _count("bits", b, 2, 16)
    if not seeds:
        raise QuarlError("sweep needs at least one seed")
    for x in seeds:
        _count("seed", x, 0)
    rows = nbit_sweep(Path(run), bits=bits, seeds=seeds, modes=list(modes),
                      per_channel=per_channel)
    return [_from(SweepRow, r) for r in rows]


@_renamed(model="policy")
def build(policy: PathLike, board="host", *, out: PathLike | None = None,
          scheme: str | None = None, board_file: PathLike | None = None) -> BuildResult:
    """Generate C for `policy` (a .tflite, or a run directory with `scheme`, default int8) and
    build the firmware for `board` (or the board file `board_file`) into `out` (default: see
    the module docstring)."""
    b = _board(board, board_file)
    path, run_dir = _model(policy, scheme)
    out_dir = Path(out) if out is not None else build_dir(path, run_dir, b.id, scheme)
    fw = pipeline.build(path, b, out_dir, generated=pipeline.generate_c(path, b, out_dir))
    files = {k: str(v) for k, v in (("bin", fw.bin), ("hex", fw.hex)) if v is not None}
    return BuildResult(b.id, str(path), str(fw.elf), str(out_dir),
                       dataclasses.asdict(fw.memory), files, list(fw.image_notes))


@_renamed(model="policy")
def session(policy: PathLike, board="host", *, scheme: str | None = None,
            out: PathLike | None = None, port: str | None = None, ssh: str | None = None,
            ssh_options: Iterable[str] = (), flasher: str | None = None,
            drive: str | None = None, flash: bool = False, board_file: PathLike | None = None):
    """A session with a board running `policy` (a .tflite, or a run directory with `scheme`),
    as a context manager (quarl_edge.link.session.
    BoardSession): it builds and starts (or flashes) the board unless `port` names one that
    runs the model already, handshakes, and stops what it started on exit. `ssh`
    (USER@HOST[:PORT]) first deploys the linux agent and the model to a linux board. Use
    `s.link.infer([x])`, `s.link.bench(n)`, `s.memory()`; `s.info` is the board's HELLO.

        with qe.session("policy.tflite", "mps2-an386") as s:
            (y,), cost = s.link.infer([x])
    """
    b = _board(board, board_file)
    path, run_dir = _model(policy, scheme)
    port = _port(port)
    if ssh:
        if b.kind != "linux":
            raise QuarlError(f"ssh deploys to linux boards; {b.id} is {b.kind}")
        port = ssh_deploy(b, path, ssh, list(ssh_options))
    out_dir = Path(out) if out is not None else build_dir(path, run_dir, b.id, scheme)
    return pipeline.session_for(path, b, out_dir, port=port, flasher=flasher, drive=drive,
                                flash=flash)


def validate(model: PathLike, board="host", *, inputs: PathLike | None = None,
             random: int | None = None, seed: int = 0, save_outputs: PathLike | None = None,
             port: str | None = None, out: PathLike | None = None, flasher: str | None = None,
             drive: str | None = None, board_file: PathLike | None = None,
             samples: bool = False) -> ValidateResult:
    """Run inputs (an .npy file; for a model of several inputs an .npz with one array per
    input; or `random` random ones, default 100) through `model` on the board and compare each
    output bit for bit with TF Lite Micro on the host. Each input array is rows (n, *shape[1:])
    for an input with a batch axis of 1, exactly one sample (the input's full shape), or, with
    `samples`, a stack of whole samples (n, *shape). `port`: a board
    already running this model (a serial port or pyserial URL); without it the board is built,
    started (emulators, host) or flashed (real boards: `flasher`, `drive`)."""
    if samples and inputs is None:
        raise QuarlError("--samples says how the --inputs arrays are laid out: pass --inputs")
    if random is not None:
        _count("random", random)
    _count("seed", seed, 0)
    b = _board(board, board_file)
    path, run_dir = _model(model)
    port = _port(port)
    out_dir = Path(out) if out is not None else build_dir(path, run_dir, b.id)
    res = pipeline.validate(path, b, out_dir, inputs=Path(inputs) if inputs else None,
                       random_n=random, save_outputs=Path(save_outputs) if save_outputs else None,
                       port=port, seed=seed, flasher=flasher, drive=drive, samples=samples)
    return _from(ValidateResult, res, latency=Latency(**res["latency"]), out_dir=str(out_dir))


@_renamed(run="policy", model="scheme", action="action_head")
def hil(policy: PathLike, board="host", *, scheme: str = "int8", episodes: int = 20,
        seed: int = 0, port: str | None = None, out: PathLike | None = None,
        flasher: str | None = None, drive: str | None = None, progress: bool = False,
        env: str | None = None, action_head: str | None = None,
        board_file: PathLike | None = None, control_hz: float | None = None,
        act: bool = False) -> HilResult:
    """Hardware in the loop: Gymnasium on the host, the board choosing every action with the
    `policy` run's `scheme` model, on seeds seed..seed+episodes-1; the same seeds are played by
    the same model on tflite-runtime and by the fp32 network. Results go to `out` (default
    RUN/results).

    `policy` may be a bare MODEL.tflite with `env` (a Gymnasium id): no run directory needed
    (`scheme` is then ignored; results go to MODEL's folder/results). `action_head`: how outputs
    become actions, "argmax", "identity" (the output is the action, clipped) or "scale" (a
    [-1, 1] output rescaled to the bounds); default from the run or the env's action space.
    `control_hz`: the result's `deadline` holds every step's time against the period 1/HZ
    (worst, margin, meets or misses, jitter: quarl_edge/measure/deadline.py).
    `act`: the board computes each action with the policy exported as `export` writes it
    (NAME_act, built into its firmware), checked against the host's mapping of TF Lite Micro's
    outputs every step (result.act); results hil_<board>_<scheme>-act.json."""
    control_hz = check_control_hz(control_hz)
    _count("episodes", episodes)
    _count("seed", seed, 0)
    b = _board(board, board_file)
    port = _port(port)
    path = Path(policy)   # pipeline.hil checks the env against the model before anything is built
    res = pipeline.hil(path, b, path.stem if path.suffix == ".tflite" else scheme, episodes,
                       seed=seed, port=port, progress=progress, flasher=flasher, drive=drive,
                       results_dir=Path(out) if out is not None else None, env_id=env,
                       head=action_head, control_hz=control_hz, act=act)
    return _from(HilResult, res, latency=Latency(**res["latency"]))


@_renamed(run="policy", model="scheme")
def export(policy: PathLike, board="host", *, scheme: str = "int8", name: str, out: PathLike,
           env: str | None = None, force: bool = False, board_file: PathLike | None = None,
           command: str = "") -> ExportResult:
    """The `policy` (a run directory and its `scheme` model, or a bare MODEL.tflite with
    `env`) as a C library folder `out` for `board`: src/NAME.h (NAME_act, NAME_reset,
    NAME_selftest) and the kernels it needs, every symbol prefixed with `name`; also an Arduino,
    PlatformIO, CMake / ESP-IDF and Zephyr library. `out` must be new or an earlier export
    (unless `force`). The result holds what out/quarl-edge-export.json records."""
    if not command:          # the README's "Made by": the command that does the same
        b = (f"--board-file {board_file}" if board_file is not None
             else f"--board {getattr(board, 'id', board)}")
        command = (f"quarl-edge export {shlex.quote(str(policy))} --scheme {scheme} {b} --name "
                   f"{name} --out {shlex.quote(str(out))}"
                   + (f" --env {shlex.quote(env)}" if env else ""))
    facts = export_library(Path(policy), scheme, _board(board, board_file), name, Path(out),
                           env_id=env, force=force, command=command)
    return _from(ExportResult, facts, out=str(out))


@_renamed(run="policy")
def bench(policy: PathLike, boards: str | Iterable = "all-emulated", *, n: int = 100,
          out: PathLike | None = None, progress: bool = False,
          episodes: int = 0, env: str | None = None,
          control_hz: float | None = None) -> list[BenchRow]:
    """Cost per inference (BENCH, n repeats on the board), flash, RAM and stack for the fp32
    and int8 models of the run `policy` on each board ("all-emulated" or board ids). Rows are
    written to `out` (default RUN/results) as they finish; a cell that cannot run is a row with `error`.
    `episodes` N > 0: each row also gets the board's return over N episodes (seeds 0..N-1,
    the board choosing every action) and whether it equals TF Lite Micro's on every seed.
    `policy` may be a bare MODEL.tflite (one row per board; `env` for its episodes, whose
    agreement is then with the same model on TF Lite Micro). `control_hz`: each row's
    `deadline` holds the worst time per inference against the period 1/HZ (margin, meets or
    misses, jitter over n single inferences: quarl_edge/measure/deadline.py)."""
    _count("n", n, 1, BENCH_MAX_N)
    _count("episodes", episodes, 0)
    control_hz = check_control_hz(control_hz)
    spec = boards if isinstance(boards, str) else ",".join(
        b if isinstance(b, str) else b.id for b in boards)
    rows = pipeline.bench(Path(policy), select_boards(spec), n=n, out=Path(out) if out else None,
                     progress=progress, episodes=episodes, env_id=env, control_hz=control_hz)
    return [_from(BenchRow, r) for r in rows]


@_renamed(run="policy")
def bench_per_op(policy: PathLike, boards: str | Iterable = "host", *, runs: int = 20,
                 out: PathLike | None = None, env: str | None = None) -> list[dict]:
    """Where each inference's cost goes, op by op (quarl_edge/measure/perop.py): per board and
    scheme, each op's cost with the board's own counter in a per-op build (the smallest of
    `runs`), its share, MACs and cost per MAC, and a "total" row that holds the ops' sum
    against the whole inference of the normal build, within the timer's measured overhead.
    Written to `out` (default RUN/results)/perop.jsonl."""
    _count("runs", runs, 1, BENCH_MAX_N)
    spec = boards if isinstance(boards, str) else ",".join(
        b if isinstance(b, str) else b.id for b in boards)
    return pipeline.bench_per_op(Path(policy), select_boards(spec), runs=runs,
                                 out=Path(out) if out else None, env_id=env)


def study(config: PathLike, *, out: PathLike | None = None, workers: int = 1,
          resume: bool = False, redo: Iterable[str] = (), ray: str | None = None,
          progress: bool = False) -> StudySummary:
    """Run (or resume) the study grid in the TOML file `config`; one JSON line per finished
    cell in OUT/results.jsonl (default results/<study name>)."""
    from .study.grid import run_study  # lazy: the package would shadow qe.study
    _count("workers", workers)
    res = run_study(Path(config), out=Path(out) if out else None, workers=workers,
                    resume=resume, ray_address=ray, redo=list(redo),
                    echo=(lambda s: print(s, flush=True)) if progress else None)
    return _from(StudySummary, res)


def study_status(config: PathLike, *, out: PathLike | None = None, workers: int = 1):
    """How far the study in `config` has come in OUT (default results/<study name>), read from
    OUT/results.jsonl while it runs or between `--resume` runs: a
    quarl_edge.study.status.StudyStatus (rows and runs done per task, the worker time a finished
    run took, and an estimate of the wall time left on `workers` processes)."""
    from .study.status import study_status as status  # lazy: the package would shadow qe.study
    _count("workers", workers)
    return status(Path(config), out=Path(out) if out else None, workers=workers)


@_renamed(port="ray_port", head="head_node")
def farm_node(*, head_node: bool = False, address: str | None = None, ray_port: int = 6379,
              instances: int | None = None, num_cpus: int | None = None,
              resources: str | None = None, dry_run: bool = False,
              ray_args: Iterable[str] = ()) -> dict:
    """Start this machine's Ray node for a board farm (`ray start` with a custom resource per
    board it can serve: board:host, board:<emulated id>: `instances`, board:<id>: 1 per attached
    real board; `resources`: a JSON object of more), or with `dry_run` only say what it would
    run: {"resources": {...}, "command": [...], "returncode": int | None}. `head_node`: start the
    cluster's head node (its Ray port `ray_port`), else join the head node at `address`."""
    from .study.farm import farm_node as start_node  # lazy: the package would shadow qe.study
    return start_node(head=head_node, address=address, ray_port=ray_port, instances=instances,
                      num_cpus=num_cpus, resources_json=resources, dry_run=dry_run,
                      extra=list(ray_args))


def report(results: PathLike, *, out: PathLike | None = None, tolerance: float = 0.05,
           bench: Iterable[PathLike] = ()) -> ReportResult:
    """Markdown and HTML report (figures, QuaRL claim verdicts) of a study's results.jsonl;
    `bench`: bench.jsonl files of `bench(..., episodes=N)` for the board section (reward,
    latency and memory per board and scheme)."""
    from .study.report import write_report  # lazy: the package would shadow qe.study
    paths = write_report(Path(results), Path(out) if out else None, tolerance=tolerance,
                         bench=[Path(b) for b in bench])
    return ReportResult(str(paths["markdown"]), str(paths["html"]))


def load_board(board: str = "host", *, board_file: PathLike | None = None):
    """The board with the id `board`, or the board file `board_file`, loaded and checked (an
    unknown id or a bad file is a QuarlError), to hand to build, session, validate or hil."""
    return _board(board, board_file)


def emulate(board: str, *, board_file: PathLike | None = None):
    """Start the emulation of a real board as it comes (quarl_edge/targets/emulate.py): a
    running board with `url` (its port), `lines` (what `quarl-edge emulate` prints) and
    `notes`; a context manager that stops it."""
    return start_emulation(_board(board, board_file))


def boards() -> list[BoardInfo]:
    """Every board quarl-edge knows (the shipped board files and the user's), with whether its
    toolchain and flash tools are installed here."""
    out = []
    for b in all_boards().values():
        missing = b.missing_tools()
        out.append(BoardInfo(b.id, b.name, b.kind, b.cpu, b.clock_hz, b.flash_bytes, b.ram_bytes,
                             b.cost_unit, b.kernels, not missing,
                             [{"what": m, "install": how} for m, how in missing],
                             [{"what": m, "install": how} for m, how in b.missing_build_tools()],
                             b.flasher_status(), describe_tools(b) if b.flashers else "-",
                             str(b.path or "")))
    return out


def ports() -> list:
    """The attached serial ports, and which of our boards each one is (by USB VID:PID)."""
    return list_ports()
