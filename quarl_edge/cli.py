"""The `quarl-edge` command line: one subcommand per pipeline step, each a thin layer over the
Python API (quarl_edge.api), whose result dataclasses are what `--json` prints.

Exit codes:
  0    ok
  1    a measured mismatch or failure: validate not bit-exact, study rows that failed
  2    a usage or user error: bad arguments, a missing or malformed file, an unknown board, an
       unsupported model, a missing toolchain, a board that does not answer
  3    a bug in quarl-edge (the traceback is printed: please report it)
  130  interrupted (Ctrl-C)
  143  terminated (SIGTERM): handled like Ctrl-C, what the command started (QEMU, boards) is
       stopped and its temporary folders removed

Tables and results go to stdout (with --json, only the JSON does); progress bars, notes and
errors go to stderr. TensorFlow, absl and gym's own messages are silenced unless -v is given.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from . import __version__
from .errors import QuarlError, missing_extra
from .names import ALGOS, BENCH_MAX_N, HEADS, IMPORT_KINDS, SCHEMES, SWEEP_MODES

EXIT_OK, EXIT_MISMATCH, EXIT_USER_ERROR, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_TERMINATED = 143        # 128 + SIGTERM, as a shell reports a process SIGTERM ended


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: every cleanup of Ctrl-C runs for it too."""


def _terminate(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)     # once: the cleanup is not interrupted
    raise Terminated()

DEMO_BOARD = "mps2-an386"


# ------------------------------------------------------------------------------ output
def _console():
    """A rich console on stdout; when not a terminal (a pipe, a file, a test) wide enough that
    no table row wraps, and without colour."""
    from rich.console import Console
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if tty else 240, no_color=not tty,
                   highlight=False, soft_wrap=not tty)


def table(columns: list[str], rows: list[list], right: tuple[str, ...] = ()) -> None:
    """An aligned table on stdout: one header row, no frame (easy to read and to grep)."""
    from rich.table import Table
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", no_wrap=True)
    for r in rows:
        t.add_row(*("-" if v is None else str(v) for v in r))
    _console().print(t)


def note(text: str) -> None:
    """A line for the user on stderr (where files went, what was skipped)."""
    print(text, file=sys.stderr, flush=True)


def kib(n) -> str:
    """Bytes as KiB (to one decimal below 10 KiB), or B for small counts."""
    if n is None:
        return "-"
    if n < 1024:
        return f"{n:,} B"
    return f"{n / 1024:,.1f} KiB" if n < 10 * 1024 else f"{n / 1024:,.0f} KiB"


def mhz(hz) -> str:
    if not hz:
        return "-"
    return f"{hz / 1e6:,.0f} MHz" if hz % 1_000_000 == 0 else f"{hz / 1e6:,.3g} MHz"


def cost(value, unit: str) -> str:
    return "-" if value is None else f"{value:,.0f} {unit}"


def share(used, total) -> str:
    """'12,128 B (0.6 % of 2,048 KiB)'; without a known total (0 or None) just the bytes."""
    if used is None:
        return "-"
    return f"{used:,} B" + (f" ({100 * used / total:.1f} % of {kib(total)})" if total else "")


def emit_json(data) -> None:
    print(json.dumps(data, indent=2, default=str))


def as_json(result):
    if isinstance(result, list):
        return [as_json(r) for r in result]
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result


# ------------------------------------------------------------------------ argument types
def _int_at_least(low: int, high: int | None = None):
    """An argparse type: an integer in low..high (the API checks the same: it is public)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            want = f"in {low}..{high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be an integer {want}, got {text!r}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


positive_int = _int_at_least(1)         # counts: episodes, steps, inputs, workers
nonnegative_int = _int_at_least(0)      # seeds (Gymnasium's are >= 0)


# ----------------------------------------------------------------------------- commands
def option_value(text: str) -> tuple[str, object]:
    """`KEY=VALUE` from the command line: VALUE as a TOML value (0.9, 16, [256, 256], true,
    "ou"), a bare word as a string (ou)."""
    import tomllib
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise QuarlError(f"--set wants KEY=VALUE, got {text!r}")
    try:
        return key.strip(), tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value


def cmd_train(a, qe):
    options = dict(option_value(t) for t in a.set)
    if a.net is not None:
        options["net"] = a.net
    res = qe.train(a.env, a.algo, out=a.out, steps=a.steps, seed=a.seed, progress=True, **options)
    if a.json:
        return emit_json(res.info)
    info = res.info
    print(f"trained {res.algo} on {res.env} (seed {res.seed}, {res.steps:,} steps) in "
          f"{res.train_seconds:.0f} s: best greedy validation return {res.best_greedy_return:.1f} "
          f"at step {info.get('best_step', '-'):,}")
    extra = "recurrent.npz, " if (Path(res.run_dir) / "recurrent.npz").is_file() else ""
    extra += "policy/, " if (Path(res.run_dir) / "policy").is_dir() else ""
    note(f"wrote the run to {res.run_dir} (run.json, {info.get('model_file', 'qnet.keras')}, "
         f"{extra}train_curve.csv)")


def cmd_quantize(a, qe):
    results = qe.quantize(a.run, a.scheme, calib_size=a.calib_size, qat_steps=a.qat_steps,
                          distill_steps=a.distill_steps, progress=not a.json)
    if a.json:
        return emit_json(as_json(results))
    table(["scheme", "model", "size"], [[r.scheme, r.path, kib(r.size_bytes)] for r in results],
          right=("size",))


def cmd_sweep(a, qe):
    rows = qe.sweep(a.run, bits=a.bits, modes=a.mode, per_channel=a.per_channel,
                    seeds=range(a.seed, a.seed + a.episodes))
    if a.json:
        return emit_json(as_json(rows))
    table(["mode", "bits", "return (mean ± std)", "agreement", "ties"],
          [[r.mode, r.bits, f"{r.mean_return:.1f} ± {r.std_return:.1f}", f"{r.agreement:.3f}",
            "-" if r.ties is None else f"{r.ties:.3f}"] for r in rows],
          right=("bits", "return (mean ± std)", "agreement", "ties"))


def _memory_lines(m: dict) -> None:
    extra = m.get("layout_extra_bytes") or 0
    print(f"  flash  {share(m.get('flash_bytes'), m.get('board_flash_bytes'))}"
          f"  (weights and parameters {m.get('weights_bytes', 0):,} B"
          + (f", of which {extra:,} B the kernel variant's weight layout adds" if extra else "")
          + ")")
    print(f"  RAM    {share(m.get('ram_bytes'), m.get('board_ram_bytes'))}"
          f"  (model arena {m.get('arena_bytes', 0):,} B)")


def cmd_build(a, qe):
    res = qe.build(a.target, a.board, out=a.out, scheme=a.model, board_file=a.board_file)
    if a.json:
        return emit_json(as_json(res))
    print(f"firmware for '{res.board}': {res.elf}")
    _memory_lines(res.memory)
    print("  stack  measured on the board: `quarl-edge validate` or `hil` report it")
    note(f"wrote the build to {res.out_dir} (gen/model.c, firmware.elf"
         + "".join(f", {Path(p).name}" for p in res.files.values()) + ", memory.json)")
    for n in res.notes:
        note(f"note: {n}")


def cmd_flash(a, qe):
    import time
    with qe.session(a.target, a.board, scheme=a.model, out=a.out, port=a.port, ssh=a.ssh,
                    ssh_options=a.ssh_option, flasher=a.flasher, drive=a.drive, flash=True,
                    board_file=a.board_file) as s:
        board = s.board
        started_here = not s.port and board.kind in ("host", "emulated", "linux")
        flashed = getattr(s.running, "result", None)
        if flashed is not None:
            where = (f"the {flashed.drive} drive" if flashed.drive else
                     " ".join(flashed.command[:2]) + " ...")
            print(f"flashed {flashed.image.name} with {flashed.tool} ({where})", flush=True)
            for n in flashed.notes:
                note(f"note: {n}")
        found = " (found by its USB id)" if getattr(s.running, "found_by_usb", False) else ""
        print(f"board '{board.id}' runs {s.info.model_name} on {s.running.url}{found} "
              f"({s.info.cost_unit} cost unit)" + ("; Ctrl-C stops it" if started_here else ""),
              flush=True)
        if s.firmware is not None:
            note(f"built into {s.out_dir}")
        if started_here:   # the board lives as long as this command: keep it up
            s.release_port()   # ... and its port free for `validate --port URL`
            if s.running.reset_handle:
                note(f"reset it with a fault:// link: fault://?reset={s.running.reset_handle}"
                     f"&reset_at=N&url={s.running.url}")
            try:
                while s.running.alive():
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass


def _mismatch_why(cls: str, libm_ops: list) -> str:
    """One line on a class of differing outputs (quarl_edge/measure/compare.py)."""
    return {"mismatch": "ours: fails",
            "reference-undefined": "TFLM's QUANTIZE is undefined C++ there; equal on the "
                                   "saturated input",
            "libm-ulp": f"1 ulp: the C libraries round {'/'.join(libm_ops) or 'expf/tanhf'} differently",
            "nan-payload": "NaN on both, other payload bits"}.get(cls, "")


def cmd_validate(a, qe):
    res = qe.validate(a.model, a.board, inputs=a.inputs, random=a.random, seed=a.seed,
                      save_outputs=a.save_outputs, port=a.port, out=a.out, flasher=a.flasher,
                      drive=a.drive, board_file=a.board_file, samples=a.samples)
    if a.json:
        emit_json(as_json(res))
    else:
        lat, m = res.latency, res.memory
        if not res.bit_exact:
            verdict = (f"NOT bit-exact: {res.mismatches} of {res.n} outputs differ "
                       f"(max |diff| {res.max_abs_diff:g}, max relative {res.max_rel_diff:g})")
        elif res.differing:
            verdict = (f"bit-exact with TF Lite Micro where it is defined; {res.differing} of "
                       f"{res.n} outputs differ for reasons that are not ours")
        else:
            verdict = "bit-exact with TF Lite Micro"
        print(f"{res.n} inputs on '{res.board}': {verdict}")
        if res.differing:
            table(["class", "outputs", "why"],
                  [[c, k, _mismatch_why(c, res.libm_ops)] for c, k in res.classes.items()],
                  right=("outputs",))
        table(["output", "max |error|", "RMSE", "cosine", "top-1 agreement"],
              [[o["name"], f"{o['max_abs_error']:.3g}", f"{o['rmse']:.3g}",
                None if o["cosine"] is None else f"{o['cosine']:.6f}",
                None if o["top1_agreement"] is None else f"{o['top1_agreement']:.3f}"]
               for o in res.outputs], right=("max |error|", "RMSE", "cosine", "top-1 agreement"))
        print(f"  latency  median {cost(lat.median, lat.unit)} (p99 {cost(lat.p99, lat.unit)})")
        print(f"  flash {kib(m.get('flash_bytes'))}, RAM {kib(m.get('ram_bytes'))}, "
              f"stack {kib(m.get('stack_bytes'))}, arena {kib(m.get('arena_bytes'))}")
        if a.port is None:
            note(f"built into {res.out_dir}")
        if a.save_outputs:
            note(f"wrote the board's outputs to {a.save_outputs}")
    return EXIT_OK if res.bit_exact else EXIT_MISMATCH


def cmd_import(a, qe):
    res = qe.import_policy(a.source, out=a.out, env=a.env, vecnormalize=a.vecnormalize,
                           kind=a.kind)
    if a.json:
        return emit_json(res.info)
    fid = res.fidelity
    check = (f"argmax agreement {fid['argmax_agreement']:.3f}" if "argmax_agreement" in fid
             else f"max abs action error {fid['max_abs_error_actions']:.2e}")
    src = res.source
    what = " ".join(w for w in (src["kind"], src.get("algo")) if w)
    print(f"imported the {what} policy {src['file']} for {res.env}: "
          f"{check} against {fid['reference']} on {fid['observations']:,} observations")
    if src.get("env_renamed"):
        note(f"note: {src['env_renamed']['note']}")
    note(f"wrote the run to {res.run_dir} (run.json, policy.keras, calibration.npy); next: "
         f"quarl-edge quantize {res.run_dir} --scheme fp32 int8")


def cmd_hil(a, qe):
    res = qe.hil(a.run, a.board, model=a.model, episodes=a.episodes, seed=a.seed, port=a.port,
                 out=a.out, flasher=a.flasher, drive=a.drive, progress=True, env=a.env,
                 action=a.action, board_file=a.board_file)
    # a board whose returns are not TF Lite Micro's (the reference it is bit-exact with) is a
    # measured failure; without TFLM (fp16, hybrid models) tflite-runtime is only compared
    code = EXIT_OK if res.matches_reference or res.micro_mean_return is None \
        else EXIT_MISMATCH
    if a.json:
        emit_json(as_json(res))
        return code
    lat = res.latency
    print(f"{res.scheme} on '{res.board}', {res.episodes} episodes of {res.env} "
          f"(seeds {res.seeds[0]}..{res.seeds[-1]}):")
    agree = f"agreement with {res.agreement_with}"
    rows = [[f"board '{res.board}'", f"{res.mean_return:.1f} ± {res.std_return:.1f}",
             f"{res.agreement:.3f}"],
            [f"{res.host_interpreter.split()[0]} (host)",
             f"{res.tflite_mean_return:.1f} ± {res.tflite_std_return:.1f}",
             "1.000" if res.agreement_with == "tflite-runtime" else "-"]]
    if res.micro_mean_return is not None:
        rows.append(["TF Lite Micro (host)",
                     f"{res.micro_mean_return:.1f} ± {res.micro_std_return:.1f}", "-"])
    if res.fp32_mean_return is not None:
        rows.append(["fp32 network (host)",
                     f"{res.fp32_mean_return:.1f} ± {res.fp32_std_return:.1f}", "1.000"])
    table(["runs on", "return (mean ± std)", agree], rows, right=("return (mean ± std)", agree))
    ref = "TF Lite Micro's" if res.micro_mean_return is not None else "tflite-runtime's"
    print(f"the board's returns equal {ref}, episode by episode" if res.matches_reference
          else f"the board's returns DIFFER from {ref} on the same seeds")
    print(f"latency median {cost(lat.median, lat.unit)} (p99 {cost(lat.p99, lat.unit)}); "
          f"{res.steps_per_s:,.0f} steps/s")
    note(f"wrote the results to {res.results} (and the episode log beside it)")
    return code


def cmd_bench(a, qe):
    rows = qe.bench(a.run, a.boards, n=a.n, out=a.out, progress=not a.json, episodes=a.episodes,
                    env=a.env)
    if a.json:
        return emit_json(as_json(rows))
    speed = {}
    by = {(r.board, r.scheme): r for r in rows if r.error is None}
    for (b, p), r in by.items():
        f32 = by.get((b, "fp32"))
        if p == "int8" and f32 is not None and r.cost_mean:
            speed[b] = f32.cost_mean / r.cost_mean
    out = []
    for r in rows:
        if r.error is not None:
            out.append([r.board, r.cpu, r.scheme, None, None, None, None, None, None,
                        f"refused: {r.error}"] + [None] * (3 * bool(a.episodes)))
            continue
        est = None
        if r.clock_hz and r.unit in ("cycles", "instructions"):
            est = f"~{r.cost_mean / r.clock_hz * 1e6:,.0f} µs"
        out.append([r.board, r.cpu, r.scheme, cost(r.cost_mean, r.unit), est,
                    kib(r.flash_bytes), kib(r.ram_bytes), kib(r.stack_bytes),
                    kib(r.arena_bytes),
                    f"{speed[r.board]:.2f}x" if r.scheme == "int8" and r.board in speed else ""])
        if a.episodes:
            out[-1] += [f"{r.mean_return:,.1f} ± {r.std_return:,.1f}",
                        "yes" if r.matches_reference else "NO", f"{r.agreement:.3f}"]
    head = ["board", "cpu", "precision", "cost / inference", "at board clock", "flash", "RAM",
            "stack", "arena", "int8 speedup"]
    right = ("cost / inference", "at board clock", "flash", "RAM", "stack", "arena",
             "int8 speedup")
    if a.episodes:
        head += ["return", "= TF Lite Micro", "agreement"]
        right += ("return", "agreement")
    table(head, out, right=right)
    if a.episodes:
        ref = "the fp32 network's" if Path(a.run).suffix != ".tflite" else \
            "the same model's on TF Lite Micro"
        note(f"return: {a.episodes} episodes on seeds 0..{a.episodes - 1}, the board choosing "
             "every action; = TF Lite Micro: the same model on TF Lite Micro (the kernels the "
             f"firmware is bit-exact with) returns the same on every seed; agreement: with {ref} "
             "actions on the board's states")
    if any(r.unit == "instructions" for r in rows):
        note("instructions are counted by QEMU (-icount): exact and repeatable; the time at the "
             "board clock assumes one instruction per cycle (an estimate)")
    home = Path(a.run).parent if Path(a.run).suffix == ".tflite" else Path(a.run)
    note(f"wrote the rows to {Path(a.out) if a.out else home / 'results'}"
         "/bench.jsonl and bench.md")


def cmd_study(a, qe):
    res = qe.study(a.config, out=a.out, workers=a.workers, resume=a.resume, redo=a.redo,
                   ray=a.ray, progress=not a.json)
    if a.json:
        emit_json(as_json(res))
    else:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(res.status.items()))
        print(f"study {res.study}: {counts} of {res.rows} rows in {res.seconds} s")
        note(f"wrote the results to {res.results}")
    return EXIT_OK if res.complete else EXIT_MISMATCH


def cmd_farm_node(a, qe):
    res = qe.farm_node(head=a.head, address=a.address, port=a.port, instances=a.instances,
                       num_cpus=a.num_cpus, resources=a.resources, dry_run=a.print,
                       ray_args=a.ray_args)
    if a.json:
        return emit_json(res)
    if a.print:
        import shlex
        table(["resource", "count"], [[k, f"{v:g}"] for k, v in sorted(res["resources"].items())],
              right=("count",))
        print(shlex.join(res["command"]))
        return None
    return EXIT_OK if res["returncode"] == 0 else EXIT_MISMATCH


def cmd_report(a, qe):
    res = qe.report(a.results, out=a.out, tolerance=a.tolerance, bench=a.bench)
    print(f"report: {res.markdown}\n        {res.html}")


def cmd_demo(a, qe):
    from .demo import demo
    demo(pretrained=a.pretrained, board_id=a.board, episodes=a.episodes, workdir=Path(a.workdir),
         steps=a.steps, board_file=a.board_file)


def cmd_boards(a, qe):
    boards = qe.boards()
    if a.json:
        return emit_json({b.id: as_json(b) for b in boards})
    rows = []
    for b in boards:
        toolchain = ("installed" if not b.missing_build else
                     "; ".join(f"missing {m['what']} ({m['install']})" for m in b.missing_build))
        rows.append([b.id, b.kind, b.cpu, mhz(b.clock_hz), kib(b.flash_bytes or None),
                     kib(b.ram_bytes or None), b.cost_unit, toolchain, b.flasher_text])
    table(["board", "kind", "cpu", "clock", "flash", "RAM", "unit", "toolchain", "flasher"], rows,
          right=("clock", "flash", "RAM"))


def cmd_ports(a, qe):
    ports = qe.ports()
    if a.json:
        return emit_json([{"device": p.device, "usb": p.usb_id, "description": p.description,
                           "serial_number": p.serial_number, "boards": p.boards} for p in ports])
    if not ports:
        print("no serial ports found (a board over USB shows up as /dev/ttyACM* or /dev/ttyUSB*; "
              "on Linux your user needs the 'dialout' group)")
        return
    table(["device", "usb", "board", "description"],
          [[p.device, p.usb_id, ", ".join(p.boards) or "?", p.description] for p in ports])


# ------------------------------------------------------------------------------ parser
class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line on stderr like every other user error
    (exit 2): what is wrong, and where the usage is."""

    def error(self, message):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help with each option's default (when it has a real one) and the examples kept as
    written."""

    def _get_help_string(self, action):
        if action.default in (None, False, argparse.SUPPRESS) or action.default == []:
            return action.help
        return super()._get_help_string(action)


def _sub(sub, name: str, help_: str, example: str, fn):
    s = sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".",
                       epilog="example:\n  " + example.strip().replace("\n", "\n  "),
                       formatter_class=HelpFormatter)
    s.set_defaults(fn=fn)
    return s


def _board_option(s, default: str = "host") -> None:
    g = s.add_mutually_exclusive_group()
    g.add_argument("--board", default=default, metavar="BOARD",
                   help="board id: a file boards/BOARD.toml, shipped or the user's "
                        "(`quarl-edge boards` lists them); an id, never a path")
    g.add_argument("--board-file", default=None, metavar="PATH",
                   help="a board file elsewhere (PATH/ID.toml) instead of --board: a board file "
                        "names the compiler that runs, so a path is taken only here")


def _json_option(s) -> None:
    s.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout (the Python API's dataclass), "
                        "nothing else")


def _flash_options(s) -> None:
    s.add_argument("--flasher", default=None, metavar="TOOL",
                   help="real boards: the flash tool to use, one of the board's [flash] tools "
                        "(default: the first one installed)")
    s.add_argument("--drive", default=None, metavar="PATH",
                   help="real boards flashed by copying (DAPLink, UF2): the board's mounted USB "
                        "drive (default: found by its volume label)")


def _port_option(s) -> None:
    s.add_argument("--port", default=None,
                   help="the serial port (a device or a pyserial URL) of a board that already "
                        "runs this model (default: build, start or flash the board; a real "
                        "board's port is found by its USB VID:PID)")


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="quarl-edge", formatter_class=HelpFormatter,
        description="Quantized RL policies from training to a microcontroller, measured on the "
                    "board.",
        epilog=__doc__[__doc__.index("Exit codes:"):] + "\nexample:\n  quarl-edge demo "
               "--pretrained     # the shipped CartPole policy on an emulated Cortex-M4F")
    p.add_argument("--version", action="version", version=f"quarl-edge {__version__}")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show TensorFlow's, absl's and gym's own messages and the traceback of "
                        "user errors")
    p.add_argument("--boards-dir", action="append", default=[], metavar="DIR",
                   help="also look for board files (BOARD.toml) in DIR, before the shipped "
                        "ones; repeatable (also: $QUARL_EDGE_BOARDS, "
                        "~/.config/quarl-edge/boards)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = _sub(sub, "train", "train a policy with TF-Agents on a Gymnasium environment",
             "quarl-edge train --env CartPole-v1 --algo dqn --out runs/cartpole", cmd_train)
    s.add_argument("--env", default="CartPole-v1",
                   help="any Gymnasium id; tuned defaults exist for CartPole-v1, Acrobot-v1, "
                        "MountainCar-v0, LunarLander-v3, Pendulum-v1, MountainCarContinuous-v0, "
                        "LunarLanderContinuous-v3, HalfCheetah-v5, Hopper-v5")
    s.add_argument("--algo", default="dqn", choices=ALGOS, help="the algorithm")
    s.add_argument("--steps", type=positive_int, default=None,
                   help="environment steps (default: the tuned value for this algo and env)")
    s.add_argument("--seed", type=nonnegative_int, default=0, help="training seed")
    s.add_argument("--net", choices=("mlp", "lstm"), default=None,
                   help="the policy network: mlp, or lstm (a recurrent policy for partially "
                        "observed tasks such as QuarlEdge/CartPoleNoVel-v0; --algo ppo only); "
                        "default: the tuned value for this algo and env, else mlp")
    s.add_argument("--out", required=True, metavar="RUN", help="the run directory to write")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a field of the algo's config (quarl_edge/rl/: DQNConfig, PPOConfig, "
                        "OffPolicyConfig) over its per-env default, e.g. --set gamma=0.9 "
                        "--set hidden=[256,256]; repeatable")
    _json_option(s)

    s = _sub(sub, "import", "a policy trained elsewhere as a run directory (Stable-Baselines3, "
                            "ONNX, Keras, TF-Agents SavedModel)",
             "quarl-edge import ppo-LunarLander-v3.zip --out runs/lunar\n"
             "quarl-edge import policy.onnx --env Pendulum-v1 --out runs/p\n"
             "quarl-edge import rl-trained-agents/ppo/MountainCar-v0_1/ --out runs/mc",
             cmd_import)
    s.add_argument("source", metavar="SOURCE",
                   help="a Stable-Baselines3 .zip, an RL Zoo run folder (ALGO/ENV_N/), an "
                        ".onnx, a .keras/.h5 Keras model, or a TF-Agents PolicySaver / TF "
                        "SavedModel directory")
    s.add_argument("--out", required=True, metavar="RUN",
                   help="the run directory to write (must not exist, or be empty)")
    s.add_argument("--env", default=None, metavar="ID",
                   help="the Gymnasium id the policy acts in (an SB3 zip named after its env, "
                        "e.g. ppo-LunarLander-v3.zip, needs none)")
    s.add_argument("--vecnormalize", default=None, metavar="PKL",
                   help="SB3: VecNormalize statistics to fold into the network (default: "
                        "NAME.vecnormalize.pkl or vecnormalize.pkl beside the zip)")
    s.add_argument("--kind", default=None,
                   choices=IMPORT_KINDS,
                   help="the source's format (default: from the file)")
    _json_option(s)

    s = _sub(sub, "quantize", "convert a trained run to .tflite models, one per scheme",
             "quarl-edge quantize runs/cartpole --scheme fp32 int8", cmd_quantize)
    s.add_argument("run", metavar="RUN", help="a run directory (from `quarl-edge train`)")
    s.add_argument("--scheme", nargs="+", default=["fp32", "fp16", "int8"], choices=SCHEMES,
                   metavar="SCHEME", help=f"schemes to write to RUN/models/, of: "
                                          f"{', '.join(SCHEMES)}")
    s.add_argument("--calib-size", type=positive_int, default=1000,
                   help="calibration observations for the integer schemes")
    s.add_argument("--qat-steps", type=positive_int, default=None,
                   help="qat-int8: env steps of fine-tuning in the DQN loop (default 5000)")
    s.add_argument("--distill-steps", type=positive_int, default=None,
                   help="qat-distill-int8: env steps of student rollouts in the on-policy "
                        "distillation (default 3000)")
    _json_option(s)

    s = _sub(sub, "sweep", "QuaRL's n-bit sweep: greedy return against bits, fake-quantized",
             "quarl-edge sweep runs/cartpole --bits 4 6 8 --mode weights", cmd_sweep)
    s.add_argument("run", metavar="RUN", help="a run directory")
    s.add_argument("--bits", type=_int_at_least(2, 16), nargs="+", default=list(range(2, 9)), metavar="N",
                   help="bit widths (2..16)")
    s.add_argument("--mode", nargs="+", default=["weights+activations", "weights"],
                   choices=SWEEP_MODES, metavar="MODE",
                   help=f"what is fake-quantized, of: {', '.join(SWEEP_MODES)}")
    s.add_argument("--per-channel", action="store_true",
                   help="per-output-channel weight ranges (default: per tensor)")
    s.add_argument("--episodes", type=positive_int, default=20, help="test seeds SEED..SEED+N-1")
    s.add_argument("--seed", type=nonnegative_int, default=0, help="the first test seed")
    _json_option(s)

    for name, fn, help_, example in (
            ("build", cmd_build, "generate C and build the firmware for a board",
             "quarl-edge build runs/cartpole --model int8 --board mps2-an386"),
            ("flash", cmd_flash, "build and flash (or start) the firmware, and keep the board up",
             "quarl-edge flash runs/cartpole --board nucleo-f446re")):
        s = _sub(sub, name, help_, example, fn)
        s.add_argument("target", metavar="RUN_OR_MODEL", help="a run directory or a .tflite file")
        _board_option(s)
        s.add_argument("--model", default=None, metavar="SCHEME",
                       help="the scheme when RUN_OR_MODEL is a run (default: int8)")
        s.add_argument("--out", default=None, metavar="DIR",
                       help="build directory (default: RUN/build/BOARD/SCHEME for a run, "
                            "./build/BOARD/NAME for a .tflite)")
        if name == "build":
            _json_option(s)
        else:
            s.add_argument("--port", default=None,
                           help="serial port or pyserial URL; real boards: the port to flash "
                                "through (avrdude) and talk on (default: found by USB VID:PID)")
            s.add_argument("--ssh", default=None, metavar="USER@HOST[:PORT]",
                           help="linux boards: copy the agent and model over SSH and start it")
            s.add_argument("--ssh-option", action="append", default=[], metavar="KEY=VALUE",
                           help="an ssh_config option for --ssh (repeatable), e.g. "
                                "IdentityFile=~/.ssh/pi")
            _flash_options(s)

    s = _sub(sub, "validate", "run inputs on the board and compare each output bit for bit "
                              "with TF Lite Micro on the host",
             "quarl-edge validate runs/cartpole/models/int8.tflite --board mps2-an386 "
             "--random 200", cmd_validate)
    s.add_argument("model", metavar="MODEL.tflite", help="the model")
    _board_option(s)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--inputs", metavar="X.npy|X.npz",
                   help="inputs in the input's dtype: an .npy for a one-input model, else an "
                        ".npz with one array per input, named as the input (pos for "
                        "serving_default_pos:0) or arr_K by position. Each array is rows "
                        "(n, *shape[1:]) for an input of batch 1, exactly one sample (the "
                        "input's full shape; used with every row of the others), or, with "
                        "--samples, a stack of samples (n, *shape)")
    g.add_argument("--random", type=positive_int, default=None, metavar="N",
                   help="N random inputs over the input's range and beyond it (default 100; "
                        "at most 100000)")
    s.add_argument("--samples", action="store_true",
                   help="the --inputs arrays are stacks of whole samples, (n, *input shape): "
                        "for inputs without a batch axis (default: rows or one sample)")
    s.add_argument("--save-outputs", default=None, metavar="Y.npy|Y.npz",
                   help="write the board's outputs to this .npy (an .npz of one array per "
                        "output for a model of several outputs)")
    _port_option(s)
    _flash_options(s)
    s.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random inputs")
    s.add_argument("--out", default=None, metavar="DIR",
                   help="build directory (default: ./build/BOARD/NAME)")
    _json_option(s)

    s = _sub(sub, "hil", "hardware in the loop: Gymnasium on the host, the board choosing "
                         "every action",
             "quarl-edge hil runs/cartpole --model int8 --board mps2-an386 --episodes 20", cmd_hil)
    s.add_argument("run", metavar="RUN", help="a run directory with RUN/models/SCHEME.tflite, "
                                               "or a bare MODEL.tflite with --env")
    s.add_argument("--model", default="int8", choices=SCHEMES, metavar="SCHEME",
                   help=f"the scheme of the model to run (RUN/models/SCHEME.tflite), of: "
                        f"{', '.join(SCHEMES)}")
    s.add_argument("--env", default=None, metavar="ID",
                   help="the Gymnasium id a bare MODEL.tflite plays (a run knows its env)")
    s.add_argument("--action", default=None, choices=HEADS,
                   help="how the model's outputs become actions: argmax, identity (the output "
                        "is the action, clipped to the bounds) or scale (a [-1, 1] output "
                        "rescaled to the bounds); default: the run's, else argmax for "
                        "discrete and identity for Box actions")
    _board_option(s)
    s.add_argument("--episodes", type=positive_int, default=20,
                   help="episodes, on seeds SEED..SEED+N-1")
    s.add_argument("--seed", type=nonnegative_int, default=0, help="the first episode's seed")
    _port_option(s)
    _flash_options(s)
    s.add_argument("--out", default=None, metavar="DIR",
                   help="results directory (default: RUN/results)")
    _json_option(s)

    s = _sub(sub, "bench", "cost per inference and memory per board and precision",
             "quarl-edge bench runs/cartpole --boards host,mps2-an386,lm3s6965evb -n 100",
             cmd_bench)
    s.add_argument("run", metavar="RUN", help="a run directory with fp32 and int8 models, or a "
                                               "bare MODEL.tflite")
    s.add_argument("--env", default=None, metavar="ID",
                   help="the Gymnasium id a bare MODEL.tflite plays, for --episodes (its first "
                        "observation is also what BENCH repeats)")
    s.add_argument("--boards", default="all-emulated",
                   help="'all-emulated' and/or board ids, comma-separated")
    s.add_argument("-n", type=_int_at_least(1, BENCH_MAX_N), default=100,
                   help=f"inferences per BENCH command (1..{BENCH_MAX_N})")
    s.add_argument("--episodes", type=nonnegative_int, default=0, metavar="N",
                   help="also play N episodes per board and precision (seeds 0..N-1, the board "
                        "choosing every action) for a return column, checked against "
                        "tflite-runtime on the same seeds (0: no return column)")
    s.add_argument("--out", default=None, metavar="DIR",
                   help="results directory (default: RUN/results)")
    _flash_options(s)
    _json_option(s)

    s = _sub(sub, "study", "run a grid of (algo, env, seed, scheme) cells from a TOML file",
             "quarl-edge study studies/smoke.toml --workers 2 --out results/smoke", cmd_study)
    s.add_argument("config", metavar="CONFIG.toml", help="the study (studies/*.toml)")
    s.add_argument("--workers", type=positive_int, default=1, help="parallel processes (one run each)")
    s.add_argument("--resume", action="store_true", help="continue OUT/results.jsonl")
    s.add_argument("--redo", action="append", default=[], metavar="ALGO/ENV",
                   help="with --resume: make this task's rows again (e.g. after the evaluation "
                        "changed), reusing its trained runs; repeatable")
    s.add_argument("--out", default=None, metavar="DIR",
                   help="output directory (default: results/<study name>)")
    s.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the grid on an existing Ray cluster (needs the ray extra); board "
                        "cells go to the nodes that advertise their board (farm-node)")
    s.add_argument("--json", action="store_true", help="print only the summary, as JSON")

    s = _sub(sub, "farm-node", "start this machine's Ray node of a board farm, advertising the "
                               "boards it can serve (board:<id>) as Ray resources",
             "quarl-edge farm-node --head   (then: quarl-edge farm-node --address HEAD:6379)",
             cmd_farm_node)
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--head", action="store_true", help="start the cluster's head node")
    g.add_argument("--address", default=None, metavar="HEAD:PORT",
                   help="join the cluster whose head is at this address")
    s.add_argument("--port", type=positive_int, default=6379, help="the head's port (--head)")
    s.add_argument("--instances", type=positive_int, default=None, metavar="N",
                   help="board cells per host/emulated board at once (default: CPU count)")
    s.add_argument("--num-cpus", type=positive_int, default=None, metavar="N",
                   help="CPUs this node gives Ray (default: Ray's, all of them)")
    s.add_argument("--resources", default=None, metavar="JSON",
                   help="more resources, or overrides, e.g. '{\"board:nucleo-f446re\": 1}'")
    s.add_argument("--print", action="store_true",
                   help="show the resources and the `ray start` command; start nothing")
    s.add_argument("ray_args", nargs="*", metavar="RAY_ARG",
                   help="more `ray start` arguments, after --")
    _json_option(s)

    s = _sub(sub, "report", "Markdown + HTML report with figures and QuaRL verdicts from a "
                            "study's results",
             "quarl-edge report results/smoke/results.jsonl", cmd_report)
    s.add_argument("results", metavar="RESULTS.jsonl", help="a study's results file")
    s.add_argument("--out", default=None, metavar="DIR",
                   help="report directory (default: next to RESULTS)")
    s.add_argument("--tolerance", type=float, default=0.05,
                   help="relative return loss still counted as 'no loss'")
    s.add_argument("--bench", action="append", default=[], metavar="BENCH.jsonl",
                   help="rows of `quarl-edge bench RUN --episodes N` (its OUT/bench.jsonl) for "
                        "the board section: reward, latency and memory per board and scheme; "
                        "repeatable")

    s = _sub(sub, "demo", "the whole pipeline on CartPole, one table at the end",
             "quarl-edge demo --pretrained --board mps2-an386", cmd_demo)
    s.add_argument("--pretrained", action="store_true",
                   help="use the shipped run (examples/cartpole_dqn) instead of training")
    _board_option(s, DEMO_BOARD)
    s.add_argument("--episodes", type=positive_int, default=20, help="HIL episodes per model")
    s.add_argument("--steps", type=positive_int, default=None,
                   help="training steps (default: DQN's CartPole default)")
    s.add_argument("--workdir", default="runs", metavar="DIR",
                   help="where the run directory is made")

    s = _sub(sub, "boards", "list the boards (shipped and the user's board files), their memory, "
                            "clocks and whether their tools are installed", "quarl-edge boards",
             cmd_boards)
    _json_option(s)

    s = _sub(sub, "ports", "list attached serial ports and recognise our boards by USB id",
             "quarl-edge ports", cmd_ports)
    _json_option(s)
    return p


def _check_out_dir(out) -> None:
    """Every command's --out is a directory (made if missing): refuse a file there or on its
    way before anything runs."""
    if out is None:
        return
    for p in [Path(out), *Path(out).parents]:
        if p.exists():
            if not p.is_dir():
                raise QuarlError(f"--out {out}: {p} is a file, not a directory")
            return


def _close_progress_bars() -> None:
    """Close a stage's progress bar still on screen (an error raised inside its loop), so the
    message that follows starts a line of its own instead of running on after the bar."""
    std = sys.modules.get("tqdm.std")
    for bar in list(getattr(getattr(std, "tqdm", None), "_instances", ())):
        bar.close()


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    if not args.verbose:
        from .noise import quiet_third_party
        quiet_third_party()
    if args.boards_dir:    # first, before $QUARL_EDGE_BOARDS; the environment reaches workers
        os.environ["QUARL_EDGE_BOARDS"] = os.pathsep.join(
            [str(Path(d).resolve()) for d in args.boards_dir]
            + [d for d in os.environ.get("QUARL_EDGE_BOARDS", "").split(os.pathsep) if d])
    import quarl_edge as qe
    try:
        _check_out_dir(getattr(args, "out", None))
        for d in args.boards_dir or ():
            if not Path(d).is_dir():
                raise QuarlError(f"--boards-dir {d}: no such directory")
        return args.fn(args, qe) or EXIT_OK
    except QuarlError as e:
        _close_progress_bars()
        if args.verbose:
            traceback.print_exc()
        print(f"quarl-edge: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as e:
        _close_progress_bars()
        if isinstance(e, Terminated):
            print("quarl-edge: terminated", file=sys.stderr)
            return EXIT_TERMINATED
        print("quarl-edge: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        _close_progress_bars()
        line = missing_extra(e, args.command)    # an optional package (an extra) not installed
        if line is not None:
            if args.verbose:
                traceback.print_exc()
            print(f"quarl-edge: error: {args.command} {line}", file=sys.stderr)
            return EXIT_USER_ERROR
        traceback.print_exc()
        print(f"quarl-edge {__version__}: this is a bug in quarl-edge, not in your input; "
              "please report it with the traceback above", file=sys.stderr)
        return EXIT_BUG
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
