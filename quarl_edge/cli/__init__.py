"""The `quarl-edge` command line: one subcommand per pipeline step, each a thin layer over the
Python API (quarl_edge.api), whose result dataclasses are what `--json` prints.

The package, for a reader: this file builds the parser and runs a command (main: the exit
codes and error lines below); output.py prints (tables, units, --json); options.py holds the
parser's shared parts; each command group has a module with every command's options and its
handler, which calls the API and prints: runs.py (train, import, quantize, sweep), on_board.py
(build, flash, validate, hil, bench), studies.py (study, farm-node, report, demo) and
inventory.py (boards, ports).

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
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import quarl_edge as qe

from .. import __version__
from ..core.errors import QuarlError, missing_extra
from ..core.files import DISK_ERRNOS, disk_error
from ..core.noise import quiet_third_party
from . import inventory, on_board, runs, studies
from .options import HelpFormatter, Parser
from .output import (EXIT_BUG, EXIT_INTERRUPTED, EXIT_MISMATCH, EXIT_OK, EXIT_TERMINATED,
                     EXIT_USER_ERROR, printable)

__all__ = ["main", "parser", "EXIT_OK", "EXIT_MISMATCH", "EXIT_USER_ERROR", "EXIT_BUG",
           "EXIT_INTERRUPTED", "EXIT_TERMINATED", "HelpFormatter"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: every cleanup of Ctrl-C runs for it too."""


def _terminate(signum, frame):
    """The SIGTERM handler while a command runs."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)     # once: the cleanup is not interrupted
    raise Terminated()


def parser() -> argparse.ArgumentParser:
    """The whole command line: the global options, then every command group's commands."""
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
    for group in (runs, on_board, studies, inventory):    # the order --help lists them in
        group.add_commands(sub)
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
    """Run the command line `argv` (default sys.argv) -> its exit code (the table above)."""
    args = parser().parse_args(argv)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    if not args.verbose:
        quiet_third_party()
    if args.boards_dir:    # first, before $QUARL_EDGE_BOARDS; the environment reaches workers
        os.environ["QUARL_EDGE_BOARDS"] = os.pathsep.join(
            [str(Path(d).resolve()) for d in args.boards_dir]
            + [d for d in os.environ.get("QUARL_EDGE_BOARDS", "").split(os.pathsep) if d])
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
        print(f"quarl-edge: error: {printable(e)}", file=sys.stderr)   # one line, escaped
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
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:   # a full or read-only disk
            said = disk_error(e.filename, e, writing=False)
            print(f"quarl-edge: error: {args.command}: {said}", file=sys.stderr)
            return EXIT_USER_ERROR
        if line is not None:
            if args.verbose:
                traceback.print_exc()
            print(f"quarl-edge: error: {args.command} {printable(line)}", file=sys.stderr)
            return EXIT_USER_ERROR
        traceback.print_exc()
        print(f"quarl-edge {__version__}: this is a bug in quarl-edge, not in your input; "
              "please report it with the traceback above", file=sys.stderr)
        return EXIT_BUG
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)

