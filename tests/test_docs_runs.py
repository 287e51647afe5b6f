"""The cheap commands README.md and docs/*.md show run for real (RUNS); every other one says
why not (PARSE_ONLY) (issue 25: docs that cannot rot). Each is also checked against what it names
in test_docs_commands.py.
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest
from helpers_docs import COMMANDS, PROGRAMS, ROOT, Command


@dataclass(frozen=True)
class Run:
    """A documented command run for real in a scratch directory: exit 0 and a line of its
    output. `needs` makes the files its example names from committed ones (scratch path: repo
    path); `argv` is what runs when the docs show a synopsis (RUN, [--out DIR]) rather than a
    command; `after` is a command whose output this one reads."""
    shown: str
    expect: str                                  # a regex for a line of stdout
    needs: tuple[tuple[str, str], ...] = ()
    argv: tuple[str, ...] = ()
    after: str = ""


EXAMPLE = "examples/cartpole_dqn"
RUNS = [
    Run("quarl-edge boards", r"^board\s+kind\s+cpu.*\n(.*\n)*host\s+host\b"),
    Run("quarl-edge ports", r"^(device\s+usb\s+board|no serial ports found)"),
    Run("quarl-edge --version", r"^quarl-edge \d+\.\d+"),
    Run("quarl-edge import ppo-LunarLander-v3.zip --out runs/lunar",
        r"^imported the stable-baselines3 PPO policy ppo-LunarLander-v3.zip for LunarLander-v3",
        needs=(("ppo-LunarLander-v3.zip", "tests/fixtures/sb3/ppo_lunar.zip"),)),
    Run("quarl-edge quantize runs/lunar --scheme fp32 int8 int16x8",
        r"^int16x8\s+runs/lunar/models/int16x8.tflite",
        after="quarl-edge import ppo-LunarLander-v3.zip --out runs/lunar"),
    Run("quarl-edge import policy.onnx --env Pendulum-v1 --out runs/p",
        r"^imported the onnx policy policy.onnx for Pendulum-v1",
        needs=(("policy.onnx", "tests/fixtures/sb3/onnx_pendulum_actor.onnx"),)),
    Run("quarl-edge import rl-trained-agents/ppo/MountainCar-v0_1/ --out runs/mc",
        r"^imported the stable-baselines3 PPO policy .* for MountainCar-v0",
        needs=(("rl-trained-agents/ppo/MountainCar-v0_1", "tests/fixtures/rl-zoo/ppo/MountainCar-v0_1"),)),
    Run("quarl-edge hil my_policy.tflite --env CartPole-v1 --board host --episodes 20",
        r"^the board's returns equal TF Lite Micro's, episode by episode",
        needs=(("my_policy.tflite", f"{EXAMPLE}/models/int8.tflite"),)),
    Run("quarl-edge farm-node --head-node --print", r"ray start --head --port=6379"),
    Run("quarl-edge validate MODEL.tflite --board BOARD [--inputs X.npy|X.npz | --random N] "
        "[--save-outputs Y.npy|Y.npz] [--out DIR] --json", r'^  "bit_exact": true,',
        needs=(("int8.tflite", f"{EXAMPLE}/models/int8.tflite"),),
        argv=("quarl-edge", "validate", "int8.tflite", "--board", "host", "--random", "50",
              "--out", "build", "--json")),
    Run("quarl-edge report RESULTS.jsonl [--out DIR] [--bench BENCH.jsonl]",
        r"^report: report/report.md",
        argv=("quarl-edge", "report", str(ROOT / "results/smoke/results.jsonl"), "--out", "report")),
    Run("python tests/test_layout.py", r"^\d+ modules, \d+ imports, \d+ import levels"),
    Run("python -m quarl_edge.converters.cgen --help", r"^- FULLY_CONNECTED int8"),
    Run("python -m quarl_edge.link.protocol --header > firmware/core/qe_protocol.h", ""),
]

# The others are parsed and checked only, each for the first reason that matches it.
PARSE_ONLY = [
    (r"^quarl-edge (train|study|sweep|demo)\b",
     "trains a policy, a grid of them, or plays many episodes per model: minutes to hours"),
    (r"--board (arduino-uno|microbit-v1|nucleo-\S+|pico|teensy41)\b|--port /dev/",
     "needs a real board on USB"),
    (r"^quarl-edge (bench|hil) .*(--control-hz|--per-op)\b",
     "benches or plays on three emulated boards (minutes on a loaded machine): "
     "tests/test_deadline.py and tests/test_perop.py run them"),
    (r"^quarl-edge bench examples/cartpole_dqn --boards netduinoplus2\b",
     "builds and benches on an emulated STM32F405 (QEMU): tests/test_energy.py checks that estimate's "
     "arithmetic and that bench prints its range"),
    (r"^quarl-edge emulate\b|--flasher gdb=",
     "starts an emulator that runs until Ctrl-C, or flashes through its GDB server: "
     "tests/test_flash_emulated.py runs emulate, flash and hil end to end"),
    (r"^quarl-edge farm-node --(head|address)",
     "starts a Ray node that keeps running (`farm-node --head-node --print` runs)"),
    (r"^quarl-edge hil runs/lunar --scheme int8 --board mps2-an386",
     "20 LunarLander episodes on QEMU (and 60 on the host references): a minute or more; the host board's hil runs"),
    (r"^quarl-edge export\b",
     "plays an episode on TF Lite Micro and compiles the folder: tests/test_export*.py run it "
     "for every run kind and board family"),
    (r"^quarl-edge hil \S+ .*--act\b",
     "builds the exported library into QEMU firmware and plays on it: tests/test_hil_act.py"),
    (r"^quarl-edge import (saved_policy|actor\.keras)",
     "loads a SavedModel or Keras model in TensorFlow: ~25-30 s each on a loaded 2-core machine "
     "(tests/test_import.py runs both importers)"),
    (r"^quarl-edge report results/classic/",
     "the 486-row classic grid's report takes ~85 s; `report` runs on results/smoke instead"),
    (r"^(\S+=\S+ )*make (setup|demo|demo-pretrained|test|test-core|test-slow|wheel|fuzz|docs)\b",
     "runs scripts/setup.sh (apt packages, the venv from the lock), then the demo, the suite, "
     "a wheel, fuzzing or the site (its build: test_the_site_builds_strict_without_a_warning)"),
    (r"^make ray-sim$",
     "starts five Ray nodes and runs a study twice: ~4 min (tests/test_ray_sim.py, marker slow)"),
    (r"^make (sb3-fixtures|onnx-fixtures|rl-zoo-table|tflm-integration|vs-tflm)\b",
     "makes side venvs with torch, or needs source checkouts (ZOO, TFLM, ...): tens of minutes"),
    (r"^make (header|clean)$",
     "writes or deletes files in the checkout (`make header`'s command runs above)"),
    (r"^pytest\b", "the test suite itself"),
    (r"^(scripts/setup\.sh|benchmarks/\S+\.py)",
     "installs system packages, or benchmarks for minutes (their options: checked in --help)"),
    (r"^tests/\S+\.py$", "a test file named in prose (it exists)"),
]


def parse_only_reason(c: Command) -> str | None:
    why = next((why for pattern, why in PARSE_ONLY if re.search(pattern, c.text)), None)
    if why is None and c.kind == "quarl-edge" and not c.concrete:
        why = ("a synopsis or example with placeholders (RUN, BOARD, N, [--option]), or a "
               "command's name in prose (validate, hil and report run above)")
    return why


RUN_BY_TEXT = {r.shown: r for r in RUNS}


def test_every_documented_command_is_run_or_says_why_not():
    """A command added to the docs is either run below (RUNS) or matches a reason in
    PARSE_ONLY; each of RUNS is still shown in the docs."""
    texts = {c.text for c in COMMANDS}
    assert [r.shown for r in RUNS if r.shown not in texts] == [], "no longer in the docs"
    unclassified = [f"{c.where}: {c.text}" for c in COMMANDS
                    if c.text not in RUN_BY_TEXT and parse_only_reason(c) is None]
    assert unclassified == [], "run it (RUNS) or say why not (PARSE_ONLY)"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("documented"), set()


def _run(run: Run, scratch) -> subprocess.CompletedProcess:
    work, done = scratch
    if run.after and run.after not in done:
        _run(RUN_BY_TEXT[run.after], scratch)
    for dest, src in run.needs:
        if not (work / dest).exists():
            (work / dest).parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (ROOT / src).is_dir() else shutil.copy)(ROOT / src, work / dest)
    argv = list(run.argv or shlex.split(run.shown))
    if ">" in argv:
        argv = argv[:argv.index(">")]
    if PROGRAMS.get(argv[0]) == "quarl-edge":
        argv, cwd = [sys.executable, "-m", "quarl_edge.cli", *argv[1:]], work
    else:                                           # python: a repository script or module
        argv, cwd = [sys.executable, *argv[1:]], ROOT
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{run.shown}: exit {out.returncode}\n{out.stderr[-3000:]}"
    done.add(run.shown)
    return out


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.shown[:60])
def test_a_cheap_documented_command_runs(run, scratch):
    """The documented commands that take seconds (up to ~25 s on a loaded 2-core machine), run
    as shown in a scratch directory, with the committed files their examples name (the SB3,
    ONNX and RL Zoo fixtures for ppo-LunarLander-v3.zip, policy.onnx and the Zoo folder; the
    example run's int8.tflite for my_policy.tflite), exit 0 and a key line of output:
    boards, ports, --version; import (SB3 zip, ONNX, RL Zoo folder), then quantize of the
    imported run; hil of a bare .tflite on the host board; farm-node --head-node --print; the
    validate and report synopses on the host board and on results/smoke; test_layout.py,
    cgen --help, and the protocol header, which must equal the committed one.

    Parse-only (PARSE_ONLY says which matches what): train, study, sweep and demo (minutes to
    hours of training or episodes); anything on a real USB board (flash, hil and validate with
    nucleo-*, arduino-uno, microbit-v1, pico, --port /dev/...); farm-node --head-node/--address (a
    Ray node that keeps running); hil on mps2-an386 (QEMU, a minute or more); import of a
    SavedModel or .keras (~25-30 s of TensorFlow each; test_import.py covers them); the report
    of the 486-row classic grid (~85 s); synopses with placeholders and bare command names;
    every make target (setup.sh first, then the suite, demo, wheel, fuzzing, side venvs with
    torch or source checkouts; header and clean write into the checkout); pytest (the suite
    itself); scripts/setup.sh and the benchmarks (their options are checked in --help)."""
    out = _run(run, scratch)
    if ">" in run.shown:        # the file it writes is the committed one
        target = run.shown.split(">")[1].strip()
        assert out.stdout == (ROOT / target).read_text(), f"{target} is not what it prints"
    else:
        assert re.search(run.expect, out.stdout, re.M), f"{run.shown}:\n{out.stdout[-3000:]}"
