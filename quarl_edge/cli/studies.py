"""The commands of a study and of the whole pipeline: study, farm-node, report and demo. Each
command's options, then its handler: it calls the API (`qe`) and prints the result."""
from __future__ import annotations

import shlex
from pathlib import Path

from .options import board_option, command, deprecated_alias, json_option, positive_int
from .output import EXIT_MISMATCH, EXIT_OK, as_json, emit_json, note, table

DEMO_BOARD = "mps2-an386"


def add_commands(sub) -> None:
    """study, farm-node, report and demo, in --help's order."""
    _add_study(sub)
    _add_farm_node(sub)
    _add_report(sub)
    _add_demo(sub)


# --------------------------------------------------------------------------------- study
def _add_study(sub) -> None:
    """study: a grid of (algo, env, seed, scheme) cells from a TOML file."""
    s = command(sub, "study", "run a grid of (algo, env, seed, scheme) cells from a TOML file",
                "quarl-edge study studies/smoke.toml --workers 2 --out results/smoke", cmd_study)
    s.add_argument("config", metavar="CONFIG.toml", help="the study (studies/*.toml)")
    s.add_argument("--workers", type=positive_int, default=1, help="parallel processes (one run each)")
    s.add_argument("--resume", action="store_true", help="continue OUT/results.jsonl")
    s.add_argument("--redo", action="append", default=[], metavar="ALGO/ENV[/sSEED]",
                   help="with --resume: make this task's (or this run's) rows again (e.g. after the evaluation "
                        "changed), reusing its trained runs; repeatable")
    s.add_argument("--out", default=None, metavar="DIR",
                   help="output directory (default: results/<study name>)")
    s.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the grid on an existing Ray cluster (needs the ray extra); board "
                        "cells go to the nodes that advertise their board (farm-node)")
    s.add_argument("--status", action="store_true",
                   help="run nothing: how far OUT's grid has come per task, and an estimate of "
                        "the time left on --workers processes (also while a study runs)")
    s.add_argument("--json", action="store_true", help="print only the summary, as JSON")


def cmd_study(a, qe):
    """study: rows per status; exit 1 if any row failed. --status: the progress (exit 0)."""
    if a.status:
        return _study_status(a, qe)
    res = qe.study(a.config, out=a.out, workers=a.workers, resume=a.resume, redo=a.redo,
                   ray=a.ray, progress=not a.json)
    if a.json:
        emit_json(as_json(res))
    else:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(res.status.items()))
        print(f"study {res.study}: {counts} of {res.rows} rows in {res.seconds} s")
        note(f"wrote the results to {res.results}")
    return EXIT_OK if res.complete else EXIT_MISMATCH


def _study_status(a, qe):
    """study --status: a line per task, then the rows done and the time left."""
    mixed = [f for f, on in (("--resume", a.resume), ("--redo", a.redo), ("--ray", a.ray)) if on]
    if mixed:
        raise qe.QuarlError(f"--status runs nothing: drop {', '.join(mixed)}")
    st = qe.study_status(a.config, out=a.out, workers=a.workers)
    if a.json:
        emit_json({**as_json(st), "seconds_left": st.seconds_left, "unknown": st.unknown})
        return EXIT_OK
    for why in st.redone:
        note(why)
    table(["task", "runs done", "rows done", "errors", "per run", "left"],
          [[f"{t.algo} {t.env}", f"{t.runs_done}/{t.runs}", f"{t.rows_done}/{t.rows}",
            t.errors, _minutes(t.run_seconds), _minutes(t.seconds_left)] for t in st.tasks],
          right=("runs done", "rows done", "errors", "per run", "left"))
    print(f"study {st.study}: {st.rows_done:,} of {st.rows:,} rows, {st.runs_done} of {st.runs} "
          f"runs done{'; a study is running into it now' if st.running else ''}")
    if st.rows_done < st.rows:
        left = st.seconds_left
        print(f"time left on {st.workers} worker(s): "
              + (f"about {_minutes(left)}" if left is not None else "no figure yet")
              + (f", and more for the {len(st.unknown)} task(s) without a finished run"
                 if st.unknown and left is not None else ""))
    note(f"read {st.results}")
    return EXIT_OK


def _minutes(seconds: float | None) -> str | None:
    """Seconds as minutes below two hours, else hours."""
    if seconds is None:
        return None
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


# ----------------------------------------------------------------------------- farm node
def _add_farm_node(sub) -> None:
    """farm-node: this machine's Ray node of a board farm."""
    s = command(sub, "farm-node", "start this machine's Ray node of a board farm, advertising the "
                                  "boards it can serve (board:<id>) as Ray resources",
                "quarl-edge farm-node --head-node   (then: quarl-edge farm-node --address "
                "HEAD:6379)",
                cmd_farm_node)
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--head-node", action="store_true", help="start the cluster's head node")
    deprecated_alias(g, "--head", "--head-node", "head_node", nargs=0, const=True)
    g.add_argument("--address", default=None, metavar="HEAD:PORT",
                   help="join the cluster whose head node is at this address")
    s.add_argument("--ray-port", type=positive_int, default=6379,
                   help="the Ray port of the head node (--head-node)")
    deprecated_alias(s, "--port", "--ray-port", "ray_port", type=positive_int)
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
    json_option(s)


def cmd_farm_node(a, qe):
    """farm-node: the node started (exit 1 if `ray start` failed), or with --print what it would
    run."""
    res = qe.farm_node(head_node=a.head_node, address=a.address, ray_port=a.ray_port,
                       instances=a.instances, num_cpus=a.num_cpus, resources=a.resources, dry_run=a.print,
                       ray_args=a.ray_args)
    if a.json:
        return emit_json(res)
    if a.print:
        table(["resource", "count"], [[k, f"{v:g}"] for k, v in sorted(res["resources"].items())],
              right=("count",))
        print(shlex.join(res["command"]))
    note(_auth_note(res["auth"], a.head_node))
    if a.print:
        return None
    return EXIT_OK if res["returncode"] == 0 else EXIT_MISMATCH


def _auth_note(auth: dict, head_node: bool) -> str:
    """Who may use the node: the token (where it is, never its value) and how the others pass
    it, or that the user turned authentication off."""
    if auth["mode"] != "token":
        return (f"RAY_AUTH_MODE={auth['mode']}: no authentication; anyone who reaches this "
                "node's Ray ports can run code on it (docs/boards.md: Board farm on Ray)")
    where = auth["token"]
    if where.startswith("$"):
        return (f"Ray token authentication with the token in {where}: every node and the study "
                f"need the same {where[1:]} and RAY_AUTH_MODE=token")
    if not head_node:
        return f"Ray token authentication with the head node's token, read from {where}"
    return (f"Ray token authentication: the token is in {where} (readable by you only). Copy "
            "that file to the same path on every other machine of the farm (or export "
            f"RAY_AUTH_TOKEN=\"$(cat {where})\" there); farm-node --address passes it to its "
            "node, and `quarl-edge study --ray HEAD:PORT` needs RAY_AUTH_MODE=token exported")


# -------------------------------------------------------------------------------- report
def _add_report(sub) -> None:
    """report: Markdown and HTML from a study's results."""
    s = command(sub, "report", "Markdown + HTML report with figures and QuaRL verdicts from a "
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


def cmd_report(a, qe):
    """report: where the Markdown and HTML went."""
    res = qe.report(a.results, out=a.out, tolerance=a.tolerance, bench=a.bench)
    print(f"report: {res.markdown}\n        {res.html}")


# ---------------------------------------------------------------------------------- demo
def _add_demo(sub) -> None:
    """demo: the whole pipeline on CartPole."""
    s = command(sub, "demo", "the whole pipeline on CartPole, one table at the end",
                "quarl-edge demo --pretrained --board mps2-an386", cmd_demo)
    s.add_argument("--pretrained", action="store_true",
                   help="use the shipped run (examples/cartpole_dqn) instead of training")
    board_option(s, DEMO_BOARD)
    s.add_argument("--episodes", type=positive_int, default=20, help="HIL episodes per model")
    s.add_argument("--steps", type=positive_int, default=None,
                   help="training steps (default: DQN's CartPole default)")
    s.add_argument("--workdir", default="runs", metavar="DIR",
                   help="where the run directory is made")


def cmd_demo(a, qe):
    """demo: the pipeline, which prints its own table."""
    from ..demo import demo     # lazy: demo imports the API and so every stage (gymnasium, the generator); --help must not
    demo(pretrained=a.pretrained, board_id=a.board, episodes=a.episodes, workdir=Path(a.workdir),
         steps=a.steps, board_file=a.board_file)
