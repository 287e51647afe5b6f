"""Issue 36: a hostile board (tests/hostile_board.py: the linux agent on a pty of its own, lying
in one way) reached as a user's real board with --port. Every lie in a HELLO, MEM, INFER or
BENCH reply, and a board that floods the port, is one line `quarl-edge: error: ...` (exit 2)
that says the board sent something impossible, within 60 s and 1 GB; an honest board of the
same kind validates and plays. Text from the board (names, error messages) reaches the
terminal with its control characters escaped."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_hostile import assert_bounded, assert_refused, run_hostile
from helpers_models import copy_example_tree

pytest.importorskip("serial")
REPO = Path(__file__).resolve().parents[1]
# a model whose input is int16 with a scale (the CartPole models' inputs and outputs are float)
KEYWORD = REPO / "tests" / "fixtures" / "tflm-keyword" / "keyword_scrambled_8bit.tflite"
HOSTILE = Path(__file__).with_name("hostile_board.py")
IMPOSSIBLE = "sent something impossible, not a measurement"

BOARD_TOML = """\
id = "hostile"
name = "a board that lies (tests/hostile_board.py)"
kind = "real"
cpu = "python"
clock_hz = 0
flash_bytes = 65536
ram_bytes = 16384
cost_unit = "ns"

[build]
family = "host"
cc = "gcc"
cflags = []
max_payload = 4096

[connect]
method = "serial"

[flash]
tools = ["pyocd"]

[flash.pyocd]
target = "none"
"""


@pytest.fixture
def boards_dir(tmp_path):
    d = tmp_path / "boards"
    d.mkdir()
    (d / "hostile.toml").write_text(BOARD_TOML)
    return d


@pytest.fixture
def hostile_run(tmp_path):
    return copy_example_tree(tmp_path / "run")


class Board:
    """tests/hostile_board.py running MODE on `model`; its port is `.port`."""

    def __init__(self, model: Path, mode: str):
        self.proc = subprocess.Popen([sys.executable, str(HOSTILE), str(model), mode],
                                     stdout=subprocess.PIPE, text=True)
        self.port = self.proc.stdout.readline().strip()
        assert self.port.startswith("/dev/"), f"hostile board {mode} did not start"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def validate(case: str, mode: str, boards_dir: Path, model: Path, tmp_path: Path):
    with Board(model, mode) as b:
        return run_hostile(case, ["--boards-dir", str(boards_dir), "validate", str(model),
                                  "--board", "hostile", "--port", b.port, "--random", "3",
                                  "--out", str(tmp_path / "out")], tmp_path)


def hil(case: str, mode: str, boards_dir: Path, run: Path, tmp_path: Path, scheme="fp32"):
    with Board(run / "models" / f"{scheme}.tflite", mode) as b:
        return run_hostile(case, ["--boards-dir", str(boards_dir), "hil", str(run),
                                  "--scheme", scheme, "--board", "hostile", "--port", b.port,
                                  "--episodes", "1", "--out", str(tmp_path / "out")], tmp_path)


def test_an_honest_board_of_this_kind_validates_and_plays(boards_dir, hostile_run, tmp_path):
    """The control: the same board file and program, telling the truth, is measured."""
    o = validate("board-honest-validate", "honest", boards_dir,
                 hostile_run / "models" / "int8.tflite", tmp_path)
    assert o.exit == 0, o.stderr[-2000:]
    assert "3 inputs on 'hostile': bit-exact" in o.stdout, o.stdout
    assert "stack 800 B" in o.stdout, o.stdout
    o = hil("board-honest-hil", "honest", boards_dir, hostile_run, tmp_path)
    assert o.exit == 0, o.stderr[-2000:]
    assert_bounded(o)


LIES = {   # mode -> words its error line holds
    "hello-shape": "HELLO's input 0 is float32 [1, 5]; the model's is float32 [1, 4]",
    "hello-dtype": "HELLO's input 0 is int32",
    "hello-scale": "HELLO's input 0 is int16 [1, 96] scale 0.00125 zero point 0; the model's "
                   "is int16 [1, 96] scale 0.000625 zero point 0",
    "hello-zero-point": "HELLO's input 0 is int16 [1, 96] scale 0.000625 zero point 1",
    "hello-outputs": "HELLO names 2 outputs; the model has 1",
    "hello-unit": "HELLO's cost unit is cycles; board hostile's is ns",
    "hello-payload": "HELLO's max_payload is 8 B; board hostile takes 32..4096",
    "hello-arena": "HELLO's arena is 1,073,741,824 B; board hostile has 16,384 B of RAM",
    "mem-stack": "MEM reports 4,294,901,760 B of stack; board hostile has 16,384 B of RAM",
    "mem-flash": "MEM reports 1,048,576 B of flash; board hostile has 65,536 B of flash",
    "mem-used": "MEM reports 4,097 B of stack used in a stack of 4,096 B",
    "mem-arena": "MEM reports an arena of 12,000 B; its HELLO said 0 B",
    "infer-cost": "an INFER's cost is 4,294,967,280",
    "infer-short": "its INFER reply has 11 bytes; the model's outputs make 12",
}


@pytest.mark.parametrize("mode", list(LIES))
def test_a_board_that_lies_is_refused_by_validate(mode, boards_dir, hostile_run, tmp_path):
    model = KEYWORD if mode in ("hello-scale", "hello-zero-point") else \
        hostile_run / "models" / "int8.tflite"
    o = validate(f"board-{mode}", mode, boards_dir, model, tmp_path)
    assert_refused(o, IMPOSSIBLE)
    assert LIES[mode] in o.line, o.line
    assert not (tmp_path / "out" / "validate.json").exists()


@pytest.mark.parametrize("mode", ["hello-shape", "mem-stack", "infer-cost"])
def test_a_board_that_lies_is_refused_by_hil(mode, boards_dir, hostile_run, tmp_path):
    o = hil(f"board-hil-{mode}", mode, boards_dir, hostile_run, tmp_path)
    assert_refused(o, IMPOSSIBLE)    # no progress bar off a terminal: one line
    assert not list((tmp_path / "out").glob("hil_*.json"))


def test_a_board_that_changes_its_specs_mid_session(boards_dir, hostile_run, tmp_path):
    """A second handshake (asked for by a boot announcement) with the same boot id but another
    output scale: not the board it was."""
    o = validate("board-infer-changes", "infer-changes", boards_dir,
                 hostile_run / "models" / "int8.tflite", tmp_path)
    assert_refused(o, "a second HELLO, without a restart, names other outputs: float32 "
                      "[1, 3] instead of float32 [1, 2]")


@pytest.mark.parametrize("mode,words", [
    ("flood", "no HELLO answer"),
    ("endless-frame", "no HELLO answer"),
    ("huge-length", "no HELLO answer"),
    ("boot-storm", "answers HELLO but not INFER"),
    ("flood-after-hello", "INFER"),
    ("endless-frame-after-hello", "INFER"),
    ("huge-length-after-hello", "INFER"),
])
def test_a_board_that_never_stops_sending(mode, words, boards_dir, hostile_run, tmp_path):
    """Random bytes, a frame that never ends, headers with huge lengths: bounded time and
    memory, one line."""
    o = validate(f"board-{mode}", mode, boards_dir, hostile_run / "models" / "int8.tflite", tmp_path)
    assert_refused(o, words, limit_s=30)


def test_text_from_the_board_is_escaped(boards_dir, hostile_run, tmp_path):
    """A model name, board id and error message holding terminal escapes are printed escaped:
    no ESC, CR, BS or bidi override reaches the terminal."""
    model = hostile_run / "models" / "int8.tflite"
    for mode, words in (("hello-hash", "runs model 'evil\\x1b[2J\\x1b]0;owned\\x07\\r\\x08"
                                       "\\x7fmodel'"),
                        ("infer-error", "board answered INFER with UNKNOWN_CMD: no such thing"
                                        "\\x1b[2J")):
        o = validate(f"board-{mode}", mode, boards_dir, model, tmp_path)
        assert_refused(o, words)
        for c in "\x1b\r\b\x07\x7f":
            assert c not in o.stderr and c not in o.stdout, (mode, repr(o.stderr))


def renamed_output(src: Path, dest: Path, name: bytes) -> Path:
    """`src` with its graph output renamed to `name` (any bytes: the flatbuffer holds them)."""
    import flatbuffers
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    m = schema.ModelT.InitFromPackedBuf(src.read_bytes(), 0)
    g = m.subgraphs[0]
    g.tensors[g.outputs[0]].name = name
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    dest.write_bytes(bytes(b.Output()))
    return dest


def test_a_model_whose_tensor_names_hold_escapes(boards_dir, hostile_run, tmp_path):
    """validate prints the model's output names in its table: escaped, whatever they hold (the
    reader already writes every byte outside a name's characters as %XX: quarl_edge/converters/safe_text.py;
    cli/output.printable is the second net)."""
    name = "q\x1b[2J\x1b]0;owned\x07\r\b\u202eevil\u2066\x9b31m"
    model = renamed_output(hostile_run / "models" / "int8.tflite", tmp_path / "evil.tflite",
                           name.encode())
    o = validate("model-escape-names", "honest", boards_dir, model, tmp_path)
    assert o.exit == 0, o.stderr[-2000:]
    assert "q%1B[2J%1B]0;owned%07%0D%08%E2%80%AEevil%E2%81%A6%C2%9B31m" in o.stdout, o.stdout
    for c in "\x1b\r\b\x07\u202e\u2066\x9b":
        assert c not in o.stdout + o.stderr, repr(o.stdout)


# ------------------------------------------------------------------------------ bench
# bench builds and starts its boards itself (no --port): the hostile board is then a `pty`
# board whose compiler (its board file names it) links a program that runs the hostile board
# on its stdin/stdout, as the host firmware runs behind its pty.
STUB_CC = """#!/bin/sh
out=""; compile=0; prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"; [ "$a" = "-c" ] && compile=1; prev="$a"
done
[ "$1" = "--version" ] && { echo hostile-cc 1; exit 0; }
if [ $compile = 1 ]; then printf '' | gcc -x c -c - -o "$out"; exit $?; fi
printf '%s\\n' '#include <unistd.h>' \\
  'int main(void) { execl("{py}", "{py}", "{board}", "{model}", "{mode}", "--stdio", (char *)0); return 127; }' \\
  | gcc -x c - -o "$out"
"""


def pty_board(tmp_path: Path, model: Path, mode: str) -> Path:
    """A boards folder with `hostile-pty`: the hostile board in MODE, built by STUB_CC."""
    d = tmp_path / f"boards-{mode}"
    d.mkdir()
    cc = d / "hostile-cc"
    cc.write_text(STUB_CC.replace("{py}", sys.executable).replace("{board}", str(HOSTILE))
                  .replace("{model}", str(model)).replace("{mode}", mode))
    cc.chmod(0o755)
    toml = BOARD_TOML.replace('id = "hostile"', 'id = "hostile-pty"').replace(
        'kind = "real"', 'kind = "host"').replace('cc = "gcc"', f'cc = "{cc}"')
    toml = toml[:toml.index("[connect]")] + '[connect]\nmethod = "pty"\n'
    (d / "hostile-pty.toml").write_text(toml)
    return d


def bench(case: str, mode: str, tmp_path: Path, model: Path):
    return run_hostile(case, ["--boards-dir", str(pty_board(tmp_path, model, mode)), "bench",
                              str(model), "--boards", "hostile-pty", "-n", "20", "--out",
                              str(tmp_path / f"out-{mode}")], tmp_path)


def test_bench_on_an_honest_pty_board_measures(hostile_run, tmp_path):
    model = hostile_run / "models" / "int8.tflite"
    o = bench("board-honest-bench", "honest", tmp_path, model)
    assert o.exit == 0, o.stderr[-2000:]
    (row,) = [json.loads(x) for x in (tmp_path / "out-honest" / "bench.jsonl").open()]
    assert "error" not in row and row["n"] == 20 and row["unit"] == "ns", row
    assert row["cost_min"] <= row["cost_mean"] <= row["cost_max"] and row["stack_bytes"] == 800


@pytest.mark.parametrize("mode,words", [
    ("bench-n", "BENCH reports 19 inferences; 20 were asked for"),
    ("bench-sum", "BENCH reports min"),
    ("bench-zeros", "BENCH reports 0 inferences; 20 were asked for"),
    ("bench-cost", "BENCH's sum of 20 costs is"),
    ("mem-stack", "MEM reports 4,294,901,760 B of stack"),
])
def test_bench_refuses_a_board_that_lies(mode, words, hostile_run, tmp_path):
    """bench keeps going over its cells, a failed one a row of its error (exit 0): the lie is
    that row's error, and no cost or memory figure of the board is in it."""
    model = hostile_run / "models" / "int8.tflite"
    o = bench(f"board-bench-{mode}", mode, tmp_path, model)
    assert o.exit == 0, o.stderr[-2000:]
    assert_bounded(o)
    (row,) = [json.loads(x) for x in (tmp_path / f"out-{mode}" / "bench.jsonl").open()]
    assert IMPOSSIBLE in row["error"] and words in row["error"], row
    assert not {"cost_mean", "cost_min", "stack_bytes", "flash_bytes"} & set(row), row
