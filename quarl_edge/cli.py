"""The `quarl-edge` command line: argument parsing only; each stage lives in its own module."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import QuarlError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")   # keep TensorFlow's start-up chatter out


def resolve_model(target: str, scheme: str | None) -> tuple[Path, Path]:
    """RUN_OR_MODEL -> (model .tflite, build directory)."""
    path = Path(target)
    if path.is_dir():
        from .run import tflite_path
        scheme = scheme or "int8"
        return tflite_path(path, scheme), path / "build"
    if path.is_file():
        return path, path.parent / "build"
    raise QuarlError(f"{target} is neither a run directory nor a .tflite file")


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


def cmd_train(a):
    from .measure.selection import int8_judge
    from .rl.train import train
    options = dict(option_value(t) for t in a.set)
    info = train(a.env, a.algo, steps=a.steps, seed=a.seed, out=Path(a.out), judge=int8_judge,
                 **options)
    print(json.dumps(info, indent=2) if a.json else
          f"trained {a.algo} on {a.env} in {info.get('train_seconds', 0):.0f} s; best greedy "
          f"validation return {info.get('best_greedy_return')}; run in {a.out}")


def cmd_quantize(a):
    from .quant.schemes import quantize
    for scheme in a.scheme:
        path = quantize(Path(a.run), scheme, calib_size=a.calib_size,
                        qat={"steps": a.qat_steps} if a.qat_steps is not None else None,
                        distill={"steps": a.distill_steps} if a.distill_steps is not None else None)
        print(f"{scheme:8s} {path}  {path.stat().st_size:,} B")


def cmd_sweep(a):
    from .quant.nbit import nbit_sweep
    rows = nbit_sweep(Path(a.run), bits=a.bits, seeds=range(a.seed, a.seed + a.episodes),
                      modes=a.mode, per_channel=a.per_channel)
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'mode':20s} {'bits':>4s} {'return (mean ± std)':>20s} {'agree':>6s}")
    for r in rows:
        print(f"{r['mode']:20s} {r['bits']:4d} {r['mean_return']:11.1f} ± {r['std_return']:6.1f} "
              f"{r['agreement']:6.3f}")


def cmd_build(a):
    from .targets.boards import get_board
    from .targets.build import build
    board = get_board(a.board)
    model, build_root = resolve_model(a.target, a.model)
    fw = build(model, board, Path(a.out) if a.out else build_root / board.id / model.stem)
    m = fw.memory
    print(f"firmware: {fw.elf}\n"
          f"  flash  {m.flash_bytes:>9,} B   (weights and parameters {m.weights_bytes:,} B)\n"
          f"  RAM    {m.ram_bytes:>9,} B   (model arena {m.arena_bytes:,} B)\n"
          f"  stack  measured on the board: `quarl-edge validate` or `hil` report it")


def cmd_flash(a):
    import time
    from .link.session import BoardSession
    from .targets.boards import get_board
    board = get_board(a.board)
    model, build_root = resolve_model(a.target, a.model)
    port = a.port
    if a.ssh:
        from .targets.launch import ssh_deploy
        if board.kind != "linux":
            raise QuarlError(f"--ssh deploys to linux boards; {board.id} is {board.kind}")
        port = ssh_deploy(board, model, a.ssh, a.ssh_option)
    with BoardSession(model, board, build_root / board.id / model.stem, port=port,
                      flasher=a.flasher, drive=a.drive, flash=True) as s:
        started_here = not port and board.kind in ("host", "emulated", "linux")
        flashed = getattr(s.running, "result", None)
        if flashed is not None:
            where = (f"the {flashed.drive} drive" if flashed.drive else
                     " ".join(flashed.command[:2]) + " ...")
            print(f"flashed {flashed.image.name} with {flashed.tool} ({where})", flush=True)
            for note in flashed.notes:
                print(f"note: {note}", file=sys.stderr)
        found = " (found by its USB id)" if getattr(s.running, "found_by_usb", False) else ""
        print(f"board '{board.id}' runs {s.info.model_name} on {s.running.url}{found} "
              f"({s.info.cost_unit} cost unit)" + ("; Ctrl-C stops it" if started_here else ""),
              flush=True)
        if started_here:   # the board lives as long as this command: keep it up
            try:
                while s.running.alive():
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass


def cmd_validate(a):
    from .measure.validate import validate
    from .targets.boards import get_board
    board = get_board(a.board)
    model = Path(a.model)
    res = validate(model, board, model.parent / "build" / board.id / model.stem,
                   inputs=Path(a.inputs) if a.inputs else None, random_n=a.random,
                   save_outputs=Path(a.save_outputs) if a.save_outputs else None,
                   port=a.port, seed=a.seed, flasher=a.flasher, drive=a.drive)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        lat = res["latency"]
        print(f"{res['n']} inputs on '{res['board']}': bit_exact={res['bit_exact']} "
              f"max_abs_diff={res['max_abs_diff']:g}; latency median {lat['median']:,.0f} "
              f"{lat['unit']} (p99 {lat['p99']:,.0f}); memory {res['memory']}")
    return 0 if res["bit_exact"] else 1


def cmd_hil(a):
    from .measure.hil import run_hil
    from .targets.boards import get_board
    res = run_hil(Path(a.run), a.model, get_board(a.board), a.episodes, seed=a.seed,
                  port=a.port, flasher=a.flasher, drive=a.drive)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        lat = res["latency"]
        print(f"{res['model']} on '{res['board']}', {res['episodes']} episodes of {res['env']}: "
              f"return {res['mean_return']:.1f} ± {res['std_return']:.1f} (tflite-runtime "
              f"{res['host_mean_return']:.1f}, fp32 {res['fp32_mean_return']:.1f}); agreement "
              f"{res['agreement']:.3f}; latency median {lat['median']:,.0f} {lat['unit']}; "
              f"{res['steps_per_s']:.0f} steps/s")


def cmd_bench(a):
    from .measure.bench import run_bench, select_boards
    rows = run_bench(Path(a.run), select_boards(a.boards), n=a.n,
                     out=Path(a.out) if a.out else None, progress=not a.json,
                     flasher=a.flasher, drive=a.drive)
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        from .measure.bench import markdown
        print(markdown(rows))


def cmd_study(a):
    from .study.grid import run_study
    summary = run_study(Path(a.config), out=Path(a.out) if a.out else None, workers=a.workers,
                        resume=a.resume, ray_address=a.ray, redo=a.redo,
                        echo=None if a.json else (lambda s: print(s, flush=True)))
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(summary["status"].items()))
        print(f"study {summary['study']}: {counts} of {summary['rows']} rows in "
              f"{summary['seconds']} s; results in {summary['results']}")
    return 0 if set(summary["status"]) <= {"ok", "skipped"} else 1


def cmd_report(a):
    from .study.report import write_report
    paths = write_report(Path(a.results), Path(a.out) if a.out else None,
                         tolerance=a.tolerance)
    print(f"report: {paths['markdown']}\n        {paths['html']}")


DEMO_BOARD = "mps2-an386"


def cmd_demo(a):
    from .demo import demo
    demo(pretrained=a.pretrained, board_id=a.board, episodes=a.episodes, workdir=Path(a.workdir),
         steps=a.steps)


def cmd_boards(a):
    from .targets.boards import all_boards
    from .targets.flash_tools import describe_tools
    boards = all_boards()
    rows = []
    for b in boards.values():
        missing = b.missing_tools()
        rows.append((b, missing, describe_tools(b) if b.flashers else "-"))
    if a.json:
        print(json.dumps({b.id: {"name": b.name, "kind": b.kind, "cpu": b.cpu, "clock_hz": b.clock_hz,
                                 "flash_bytes": b.flash_bytes, "ram_bytes": b.ram_bytes,
                                 "cost_unit": b.cost_unit, "installed": not missing,
                                 "missing": [m for m, _ in missing],
                                 "flasher": b.flasher_status(), "flasher_text": flasher}
                          for b, missing, flasher in rows}, indent=2))
        return
    print(f"{'board':16s} {'kind':9s} {'cpu':14s} {'clock':>10s} {'flash':>10s} {'RAM':>10s} "
          f"{'unit':13s} {'toolchain':10s} flasher")
    for b, _, flasher in rows:
        build_missing = b.missing_build_tools()    # the flasher column speaks for the flashers
        toolchain = ("installed" if not build_missing else
                     "; ".join(f"missing {m} ({how})" for m, how in build_missing))
        print(f"{b.id:16s} {b.kind:9s} {b.cpu:14s} {b.clock_hz or '-':>10} "
              f"{b.flash_bytes or '-':>10} {b.ram_bytes or '-':>10} {b.cost_unit:13s} "
              f"{toolchain:10s} {flasher}")


def cmd_ports(a):
    from .targets.ports import list_ports
    ports = list_ports()
    if a.json:
        print(json.dumps([{"device": p.device, "usb": p.usb_id, "description": p.description,
                           "serial_number": p.serial_number, "boards": p.boards} for p in ports],
                         indent=2))
        return
    if not ports:
        print("no serial ports found (a board over USB shows up as /dev/ttyACM* or /dev/ttyUSB*; "
              "on Linux your user needs the 'dialout' group)")
        return
    print(f"{'device':20s} {'usb':10s} {'board':24s} description")
    for p in ports:
        print(f"{p.device:20s} {p.usb_id:10s} {', '.join(p.boards) or '?':24s} {p.description}")


def add_flash_options(s) -> None:
    s.add_argument("--flasher", default=None, metavar="TOOL",
                   help="real boards: the flash tool to use (one of the board's [flash] tools; "
                        "default: the first one installed)")
    s.add_argument("--drive", default=None, metavar="PATH",
                   help="real boards flashed by copying (DAPLink, UF2): the board's mounted USB "
                        "drive (default: found by its volume label)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quarl-edge", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("train", help="train a policy with TF-Agents")
    s.add_argument("--env", default="CartPole-v1")
    s.add_argument("--algo", default="dqn")
    s.add_argument("--steps", type=int, default=None, help="environment steps (default: per algo/env)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True, help="run directory to create")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a field of the algo's config (train.py: DQNConfig, PPOConfig, "
                        "OffPolicyConfig in quarl_edge/rl/) over its per-env default, e.g. --set gamma=0.9 "
                        "--set hidden=[256,256]; repeatable")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("quantize", help="convert a trained run to .tflite models")
    s.add_argument("run")
    s.add_argument("--scheme", nargs="+", default=["fp32", "fp16", "int8"])
    s.add_argument("--calib-size", type=int, default=1000, help="calibration observations (int8)")
    s.add_argument("--qat-steps", type=int, default=None,
                   help="qat-int8: env steps of fine-tuning in the RL loop (default 5000)")
    s.add_argument("--distill-steps", type=int, default=None,
                   help="qat-distill-int8: env steps of student rollouts in the on-policy "
                        "distillation (default: qat.DistillConfig)")
    s.set_defaults(fn=cmd_quantize)

    s = sub.add_parser("sweep", help="n-bit fake-quantization sweep (QuaRL): return vs bits")
    s.add_argument("run", metavar="RUN")
    s.add_argument("--bits", type=int, nargs="+", default=list(range(2, 9)))
    s.add_argument("--mode", nargs="+", default=["weights+activations", "weights"],
                   choices=["weights+activations", "weights", "activations"])
    s.add_argument("--per-channel", action="store_true", help="per-output-channel weight ranges")
    s.add_argument("--episodes", type=int, default=20, help="test seeds SEED..SEED+N-1")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_sweep)

    for name, fn, help_ in (("build", cmd_build, "generate C and build the firmware"),
                            ("flash", cmd_flash, "build and flash (start) the firmware")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("target", metavar="RUN_OR_MODEL")
        s.add_argument("--board", default="host")
        s.add_argument("--model", default=None, help="scheme when RUN_OR_MODEL is a run (default int8)")
        if name == "build":
            s.add_argument("--out", default=None, help="build directory")
        else:
            s.add_argument("--port", default=None,
                           help="serial port or pyserial URL; real boards: the port to flash "
                                "through (avrdude) and talk on (default: found by USB VID:PID)")
            s.add_argument("--ssh", default=None, metavar="USER@HOST[:PORT]",
                           help="linux boards: copy the agent and model over SSH and start it")
            s.add_argument("--ssh-option", action="append", default=[], metavar="KEY=VALUE",
                           help="an ssh_config option for --ssh (repeatable), e.g. "
                                "IdentityFile=~/.ssh/pi")
            add_flash_options(s)
        s.set_defaults(fn=fn)

    s = sub.add_parser("validate", help="compare on-board outputs with TF Lite Micro")
    s.add_argument("model", metavar="MODEL.tflite")
    s.add_argument("--board", default="host")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--inputs", help="inputs .npy of shape (n, *input_shape[1:])")
    g.add_argument("--random", type=int, default=None, metavar="N")
    s.add_argument("--save-outputs", default=None)
    s.add_argument("--port", default=None,
                   help="the board's serial port (a real board must run this model already); "
                        "without it a real board is built, flashed and found by USB VID:PID")
    add_flash_options(s)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_validate)

    s = sub.add_parser("hil", help="hardware-in-the-loop evaluation")
    s.add_argument("run", metavar="RUN")
    s.add_argument("--model", default="int8", help="scheme: fp32, int8, ...")
    s.add_argument("--board", default="host")
    s.add_argument("--episodes", type=int, default=20)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--port", default=None,
                   help="the board's serial port (a real board must run this model already); "
                        "without it a real board is built, flashed and found by USB VID:PID")
    add_flash_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_hil)

    s = sub.add_parser("demo", help="the whole pipeline on CartPole, one table at the end")
    s.add_argument("--pretrained", action="store_true", help="use examples/cartpole_dqn, skip training")
    s.add_argument("--board", default=DEMO_BOARD, help=f"default {DEMO_BOARD} (Cortex-M4F under QEMU)")
    s.add_argument("--episodes", type=int, default=20)
    s.add_argument("--steps", type=int, default=None)
    s.add_argument("--workdir", default="runs")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("bench", help="cost per inference and memory per board and precision")
    s.add_argument("run", metavar="RUN")
    s.add_argument("--boards", default="all-emulated",
                   help="'all-emulated' or a comma-separated list of board ids")
    s.add_argument("-n", type=int, default=100, help="inferences per BENCH")
    s.add_argument("--out", default=None, help="results directory (default RUN/results)")
    add_flash_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("study", help="run a grid of (algo, env, seed, scheme) cells from a TOML file")
    s.add_argument("config", metavar="CONFIG.toml")
    s.add_argument("--workers", type=int, default=1, help="parallel processes (one run each)")
    s.add_argument("--resume", action="store_true", help="continue OUT/results.jsonl")
    s.add_argument("--redo", action="append", default=[], metavar="ALGO/ENV",
                   help="with --resume: make this task's rows again (e.g. after the evaluation "
                        "changed), reusing its trained runs; repeatable")
    s.add_argument("--out", default=None, help="output directory (default results/<study name>)")
    s.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the grid on an existing Ray cluster (needs ray installed)")
    s.add_argument("--json", action="store_true", help="print only the summary, as JSON")
    s.set_defaults(fn=cmd_study)

    s = sub.add_parser("report", help="Markdown + HTML report with figures from a study's results")
    s.add_argument("results", metavar="RESULTS.jsonl")
    s.add_argument("--out", default=None, help="report directory (default: next to RESULTS)")
    s.add_argument("--tolerance", type=float, default=0.05,
                   help="relative return loss still counted as 'no loss' (default 0.05)")
    s.set_defaults(fn=cmd_report)

    s = sub.add_parser("ports", help="list attached serial ports and recognise our boards")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_ports)

    s = sub.add_parser("boards", help="list the boards in boards/")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_boards)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args) or 0
    except QuarlError as e:
        print(f"quarl-edge: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("quarl-edge: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
