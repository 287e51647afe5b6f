"""The commands that put a model on a board: build, flash, validate, hil and bench. Each
command's options, then its handler: it calls the API (`qe`) and prints the result."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.errors import QuarlError
from ..core.names import BENCH_MAX_N, HEADS, SCHEMES
from .options import (board_option, command, deprecated_alias, flash_options, int_in,
                      json_option, nonnegative_int, port_option, positive_int, scheme_option)
from .output import (EXIT_MISMATCH, EXIT_OK, as_json, cost, emit_json, kib, note, printable,
                     share, table)
from .perop_table import print_perop


def add_commands(sub) -> None:
    """build, flash, validate, hil and bench, in --help's order."""
    _add_build_and_flash(sub)
    _add_validate(sub)
    _add_hil(sub)
    _add_bench(sub)


# ----------------------------------------------------------------------- build and flash
def _add_build_and_flash(sub) -> None:
    """build and flash: the firmware for a board, built, or also flashed or started."""
    for name, fn, help_, example in (
            ("build", cmd_build, "generate C and build the firmware for a board",
             "quarl-edge build runs/cartpole --scheme int8 --board mps2-an386"),
            ("flash", cmd_flash, "build and flash (or start) the firmware, and keep the board up",
             "quarl-edge flash runs/cartpole --board nucleo-f446re")):
        s = command(sub, name, help_, example, fn)
        s.add_argument("policy", metavar="RUN_OR_MODEL", help="a run directory or a .tflite file")
        board_option(s)
        scheme_option(s, None, "the scheme when RUN_OR_MODEL is a run (default: int8)",
                      choices=None)
        s.add_argument("--out", default=None, metavar="DIR",
                       help="build directory (default: RUN/build/BOARD/SCHEME for a run, "
                            "./build/BOARD/NAME for a .tflite)")
        if name == "build":
            json_option(s)
        else:
            s.add_argument("--port", default=None,
                           help="serial port or pyserial URL; real boards: the port to flash "
                                "through (avrdude) and talk on (default: found by USB VID:PID)")
            s.add_argument("--ssh", default=None, metavar="USER@HOST[:PORT]",
                           help="linux boards: copy the agent and model over SSH and start it")
            s.add_argument("--ssh-option", action="append", default=[], metavar="KEY=VALUE",
                           help="an ssh_config option for --ssh (repeatable), e.g. "
                                "IdentityFile=~/.ssh/pi")
            flash_options(s)


def _memory_lines(m: dict) -> None:
    """The flash and RAM lines of a build: bytes, share of the board's, and what is in them."""
    extra = m.get("layout_extra_bytes") or 0
    print(f"  flash  {share(m.get('flash_bytes'), m.get('board_flash_bytes'))}"
          f"  (weights and parameters {m.get('weights_bytes', 0):,} B"
          + (f", of which {extra:,} B the kernel variant's weight layout adds" if extra else "")
          + ")")
    print(f"  RAM    {share(m.get('ram_bytes'), m.get('board_ram_bytes'))}"
          f"  (model arena {m.get('arena_bytes', 0):,} B)")


def cmd_build(a, qe):
    """build: where the firmware is and the memory it takes."""
    res = qe.build(a.policy, a.board, out=a.out, scheme=a.scheme, board_file=a.board_file)
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
    """flash: the board flashed (or started) and kept up until it stops or Ctrl-C."""
    with qe.session(a.policy, a.board, scheme=a.scheme, out=a.out, port=a.port, ssh=a.ssh,
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
        print(f"board '{board.id}' runs {printable(s.info.model_name)} on {s.running.url}{found} "
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


# ------------------------------------------------------------------------------ validate
def _add_validate(sub) -> None:
    """validate: the board's outputs compared bit for bit with TF Lite Micro's."""
    s = command(sub, "validate", "run inputs on the board and compare each output bit for bit "
                                 "with TF Lite Micro on the host",
                "quarl-edge validate runs/cartpole/models/int8.tflite --board mps2-an386 "
                "--random 200", cmd_validate)
    s.add_argument("model", metavar="MODEL.tflite", help="the model")
    board_option(s)
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
    port_option(s)
    flash_options(s)
    s.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random inputs")
    s.add_argument("--out", default=None, metavar="DIR",
                   help="build directory (default: ./build/BOARD/NAME)")
    json_option(s)


def _mismatch_why(cls: str, libm_ops: list) -> str:
    """One line on a class of differing outputs (quarl_edge/measure/compare.py)."""
    return {"mismatch": "ours: fails",
            "reference-undefined": "TFLM's QUANTIZE is undefined C++ there; equal on the "
                                   "saturated input",
            "libm-ulp": f"1 ulp: the C libraries round {'/'.join(libm_ops) or 'expf/tanhf'} differently",
            "nan-payload": "NaN on both, other payload bits"}.get(cls, "")


def cmd_validate(a, qe):
    """validate: the verdict, the outputs' errors, latency and memory; exit 1 unless
    bit-exact."""
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


# ----------------------------------------------------------------------------------- hil
def _add_hil(sub) -> None:
    """hil: episodes with the board choosing every action."""
    s = command(sub, "hil", "hardware in the loop: Gymnasium on the host, the board choosing "
                            "every action",
                "quarl-edge hil runs/cartpole --scheme int8 --board mps2-an386 --episodes 20",
                cmd_hil)
    s.add_argument("policy", metavar="RUN", help="a run directory with RUN/models/SCHEME.tflite, "
                                                  "or a bare MODEL.tflite with --env")
    scheme_option(s, "int8", f"the scheme of the model to run (RUN/models/SCHEME.tflite), of: "
                             f"{', '.join(SCHEMES)}")
    s.add_argument("--env", default=None, metavar="ID",
                   help="the Gymnasium id a bare MODEL.tflite plays (a run knows its env)")
    s.add_argument("--action-head", default=None, choices=HEADS,
                   help="the action head, how the model's outputs become actions: argmax, "
                        "identity (the output "
                        "is the action, clipped to the bounds) or scale (a [-1, 1] output "
                        "rescaled to the bounds); default: the run's, else argmax for "
                        "discrete and identity for Box actions")
    deprecated_alias(s, "--action", "--action-head", "action_head", choices=HEADS)
    board_option(s)
    s.add_argument("--act", action="store_true",
                   help="the board computes each action with the policy as `quarl-edge export` "
                        "writes it (NAME_act in its firmware), checked every step against the "
                        "host's mapping of TF Lite Micro's outputs")
    s.add_argument("--episodes", type=positive_int, default=20,
                   help="episodes, on seeds SEED..SEED+N-1")
    s.add_argument("--seed", type=nonnegative_int, default=0, help="the first episode's seed")
    control_hz_option(s)
    port_option(s)
    flash_options(s)
    s.add_argument("--out", default=None, metavar="DIR",
                   help="results directory (default: RUN/results)")
    json_option(s)


def control_hz_option(s) -> None:
    """--control-hz HZ (hil, bench): the control loop's rate to hold the worst case against."""
    def hz(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not 0 < value <= 1e6:
            raise argparse.ArgumentTypeError(f"must be a rate in Hz, > 0 and <= 1e6, got {text!r}")
        return value
    hz.__name__ = "rate in Hz"
    s.add_argument("--control-hz", type=hz, default=None, metavar="HZ",
                   help="the control loop's rate: say per board and scheme whether the worst "
                        "time per action at the board's clock meets the period 1/HZ, with the "
                        "margin and the jitter (max - min, p99)")


def deadline_table(items) -> None:
    """The deadline answers of hil or bench: (board, scheme, deadline dict) each."""
    rows = [[b, sch, f"{d['control_hz']:g} Hz", f"{d['period_us']:,.1f} µs",
             f"{d['worst_us']:,.1f} µs", f"{d['margin_us']:,.1f} µs ({d['margin_pct']:.1f} %)",
             d["verdict"], f"{d['jitter_us']:,.2f} µs", f"{d['p99_us']:,.1f} µs"]
            for b, sch, d in items if d]
    if not rows:
        return
    table(["board", "scheme", "control rate", "period", "worst", "margin", "deadline",
           "jitter (max-min)", "p99"], rows,
          right=("period", "worst", "margin", "jitter (max-min)", "p99"))
    for basis in dict.fromkeys(d["time_basis"] for _, _, d in items if d):
        boards = ", ".join(dict.fromkeys(b for b, _, d in items if d and d["time_basis"] == basis))
        note(f"time on {boards}: {basis}")


def energy_table(items) -> None:
    """Energy per inference (bench): (board, scheme, energy dict) each; the estimate's
    figures and source once per board, or why it has none."""
    items = [(b, sch, e) for b, sch, e in items if e]
    if not items:
        return
    head = "energy / inference (estimate)"
    table(["board", "scheme", head],
          [[b, sch, "no energy figures" if e["uj"] is None else f"{e['uj']:,.1f} µJ{_span(e)}"]
           for b, sch, e in items], right=(head,))
    for b, _, e in {b: (b, s, e) for b, s, e in items}.values():
        note(f"energy on {b}: " + (f"no energy figures ({e['none']})" if e["uj"] is None else
                                  f"an estimate, {e['basis']}; from {e['source']}"))


def _span(e: dict) -> str:
    """' (11.2-22.4)': the estimate at either end of the board file's CPI range, when it has
    one (measure/energy.py's uj_range), else ''."""
    r = e.get("uj_range")
    return f" ({r[0]:,.1f}-{r[1]:,.1f})" if r else ""


def cmd_hil(a, qe):
    """hil: the board's returns beside the host's; exit 1 if they differ from the reference."""
    res = qe.hil(a.policy, a.board, scheme=a.scheme, episodes=a.episodes, seed=a.seed,
                 port=a.port, out=a.out, flasher=a.flasher, drive=a.drive, env=a.env,
                 progress=sys.stderr.isatty(),     # a bar on a terminal; errors stay one line
                 action_head=a.action_head, board_file=a.board_file, control_hz=a.control_hz,
                 act=a.act)
    # a board whose returns are not TF Lite Micro's (the reference it is bit-exact with) is a
    # measured failure; without TFLM (fp16, hybrid models) tflite-runtime is only compared
    code = EXIT_OK if res.matches_reference or res.micro_mean_return is None \
        else EXIT_MISMATCH
    if res.act is not None and res.act["differ"]:
        code = EXIT_MISMATCH
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
    if res.act is not None:
        print(f"{res.act['library']}_act on the board: {res.act['steps'] - res.act['differ']} "
              f"of {res.act['steps']} actions equal the host's mapping of TF Lite Micro's "
              "outputs" + (f"; first difference {res.act['first_difference']}"
                           if res.act["differ"] else ""))
    print(f"latency median {cost(lat.median, lat.unit)} (p99 {cost(lat.p99, lat.unit)}); "
          f"{res.steps_per_s:,.0f} steps/s")
    deadline_table([(res.board, res.scheme, res.deadline)])
    e = res.energy or {}
    if e.get("uj") is not None:
        print(f"energy (estimate) {e['uj']:,.1f} µJ{_span(e)} per inference, "
              f"{e['uj_per_episode']:,.0f} µJ per episode")
        note(f"energy: {e['basis']}; from {e['source']}")
    elif e:
        print(f"no energy figures ({e['none']})")
    note(f"wrote the results to {res.results} (and the episode log beside it)")
    return code


# --------------------------------------------------------------------------------- bench
def _add_bench(sub) -> None:
    """bench: cost per inference and memory per board and scheme."""
    s = command(sub, "bench", "cost per inference and memory per board and scheme",
                "quarl-edge bench runs/cartpole --boards host,mps2-an386,lm3s6965evb -n 100",
                cmd_bench)
    s.add_argument("policy", metavar="RUN", help="a run directory with fp32 and int8 models, or a "
                                                  "bare MODEL.tflite")
    s.add_argument("--env", default=None, metavar="ID",
                   help="the Gymnasium id a bare MODEL.tflite plays, for --episodes (its first "
                        "observation is also what BENCH repeats)")
    s.add_argument("--boards", default="all-emulated",
                   help="'all-emulated' and/or board ids, comma-separated")
    s.add_argument("-n", type=int_in(1, BENCH_MAX_N), default=100,
                   help=f"inferences per BENCH command (1..{BENCH_MAX_N})")
    s.add_argument("--episodes", type=nonnegative_int, default=0, metavar="N",
                   help="also play N episodes per board and scheme (seeds 0..N-1, the board "
                        "choosing every action) for a return column, checked against "
                        "tflite-runtime on the same seeds (0: no return column)")
    control_hz_option(s)
    s.add_argument("--per-op", action="store_true",
                   help="instead: each op's cost on the board (a per-op build, the same "
                        "counter), its share, MACs and cost per MAC, checked to add up to the "
                        "whole inference within the timer's measured overhead; written to "
                        "OUT/perop.jsonl (-n: runs, each op's smallest)")
    s.add_argument("--out", default=None, metavar="DIR",
                   help="results directory (default: RUN/results)")
    flash_options(s)
    json_option(s)


def cmd_bench(a, qe):
    """bench: one row per board and scheme, with the int8 speed-up."""
    if a.per_op:
        if a.episodes or a.control_hz is not None:
            raise QuarlError("--per-op times each op in its own build; run --episodes and "
                             "--control-hz in a bench without it")
        rows = qe.bench_per_op(a.policy, a.boards, runs=a.n, out=a.out, env=a.env)
        return emit_json(rows) if a.json else print_perop(rows, a, a.out or
                                                          qe.results_dir(a.policy))
    rows = qe.bench(a.policy, a.boards, n=a.n, out=a.out, progress=not a.json, episodes=a.episodes,
                    env=a.env, control_hz=a.control_hz)
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
    head = ["board", "cpu", "scheme", "cost / inference", "at board clock", "flash", "RAM",
            "stack", "arena", "int8 speedup"]
    right = ("cost / inference", "at board clock", "flash", "RAM", "stack", "arena",
             "int8 speedup")
    if a.episodes:
        head += ["return", "= TF Lite Micro", "agreement"]
        right += ("return", "agreement")
    table(head, out, right=right)
    deadline_table([(r.board, r.scheme, r.deadline) for r in rows])
    energy_table([(r.board, r.scheme, r.energy) for r in rows])
    if a.episodes:
        ref = "the fp32 network's" if Path(a.policy).suffix != ".tflite" else \
            "the same model's on TF Lite Micro"
        note(f"return: {a.episodes} episodes on seeds 0..{a.episodes - 1}, the board choosing "
             "every action; = TF Lite Micro: the same model on TF Lite Micro (the kernels the "
             f"firmware is bit-exact with) returns the same on every seed; agreement: with {ref} "
             "actions on the board's states")
    if any(r.unit == "instructions" for r in rows):
        note("instructions are counted by QEMU (-icount): exact and repeatable; the time at the "
             "board clock assumes one instruction per cycle (an estimate)")
    note(f"wrote the rows to {Path(a.out) if a.out else qe.results_dir(a.policy)}"
         "/bench.jsonl and bench.md")
