"""The walk of a command through quarl-edge's modules: which modules and functions of the package
a command enters, and how often, here and (`--against REV`) in another revision, side by side.
It is how issue 25 compares the demo's path and an SB3 import's path before and after the
second floor of the house (run.py holding only the run contract, one evaluation path, ...).

    .venv/bin/python benchmarks/walk.py [--walk demo|sb3-import] [--against REV]

Each walk runs `python -m quarl_edge.cli ...` in a child process with the tree's quarl_edge
first on PYTHONPATH and a profile hook (sys.setprofile) that records every call into a
function defined in the tree's quarl_edge/ (TensorFlow's, Gymnasium's, ... are not counted).
The walks:
  demo        quarl-edge demo --pretrained --board host --episodes 3 (the shipped run, no training)
  sb3-import  quarl-edge import tests/fixtures/sb3/dqn_cartpole.zip --env CartPole-v1
Printed per walk and tree: modules entered, distinct functions, calls; then each module with
its calls (the modules of either tree), so a module the path no longer enters shows as '-'.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from revtree import tree_of

ROOT = Path(__file__).resolve().parents[1]
WALKS = {
    "demo": ["demo", "--pretrained", "--board", "host", "--episodes", "3", "--workdir", "{tmp}"],
    "sb3-import": ["import", str(ROOT / "tests/fixtures/sb3/dqn_cartpole.zip"), "--env",
                   "CartPole-v1", "--out", "{tmp}/run"],
}


def record(args: list[str]) -> None:
    """In the child: run the CLI with a profile hook; print the calls per (module, function)."""
    import quarl_edge
    root = str(Path(quarl_edge.__file__).resolve().parent.parent) + "/"
    # quarl_edge.converters is the checkout's quarl_edge/converters/ (a link, or the editable install's map)
    prefixes = ((root + "quarl_edge/", "quarl_edge."), (root + "converters/", "quarl_edge.converters."))
    calls: collections.Counter = collections.Counter()

    def hook(frame, event, _arg):
        if event == "call":
            path = frame.f_code.co_filename
            for prefix, package in prefixes:
                if path.startswith(prefix) and path.endswith(".py"):
                    module = package + path[len(prefix):-3].replace("/", ".")
                    calls[(module.removesuffix(".__init__"), frame.f_code.co_name)] += 1
                    break

    from quarl_edge.cli import main
    sys.setprofile(hook)
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    finally:
        sys.setprofile(None)
    print(json.dumps({"code": code, "calls": [[m, f, n] for (m, f), n in calls.items()]}))


def walk(tree: Path, name: str) -> dict:
    """One walk with the quarl_edge of `tree`, in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace("{tmp}", tmp) for a in WALKS[name]]
        env = {**os.environ, "PYTHONPATH": str(tree), "TF_CPP_MIN_LOG_LEVEL": "3"}
        out = subprocess.run([sys.executable, __file__, "--one", json.dumps(args)], env=env,
                             capture_output=True, text=True, cwd=tree)
    if out.returncode != 0:
        raise SystemExit(f"walk {name} on {tree}: {out.stderr.strip()[-2000:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    if data["code"] not in (0, None):
        raise SystemExit(f"walk {name} on {tree}: the command exited {data['code']}")
    modules: collections.Counter = collections.Counter()
    for m, _f, n in data["calls"]:
        modules[m] += n
    return {"modules": modules, "functions": len(data["calls"]),
            "calls": sum(n for *_, n in data["calls"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walk", choices=sorted(WALKS), action="append",
                    help="the walk(s) to take (default: all)")
    ap.add_argument("--against", metavar="REV", help="also walk this git revision")
    ap.add_argument("--one", help=argparse.SUPPRESS)   # a child: one recorded command
    a = ap.parse_args()
    if a.one:
        record(json.loads(a.one))
        return
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": ROOT}
        if a.against:
            trees[a.against[:10]] = tree_of(a.against, Path(tmp))
        for name in a.walk or sorted(WALKS):
            res = {label: walk(tree, name) for label, tree in trees.items()}
            print(f"\n## {name}: quarl-edge {' '.join(WALKS[name])}")
            for label, r in res.items():
                print(f"{label:10s} {len(r['modules']):3d} modules, {r['functions']:4d} functions, "
                      f"{r['calls']:,} calls")
            mods = sorted(set().union(*(r["modules"] for r in res.values())))
            print(f"{'module':40s} " + " ".join(f"{label:>10s}" for label in res))
            for m in mods:
                print(f"{m:40s} " + " ".join(
                    f"{r['modules'][m]:>10,}" if m in r["modules"] else f"{'-':>10s}"
                    for r in res.values()))


if __name__ == "__main__":
    main()
