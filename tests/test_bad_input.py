"""Issue 15: every bad input is one clear line (exit 2, no traceback), and nothing is lost.

Each case runs the real command line (cli.main, or a subprocess where the process matters)
on the shipped example run, a board or study file with one thing wrong, or a damaged model."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import quarl_edge as qe
import quarl_edge.api
from quarl_edge import cli
from quarl_edge.core.errors import QuarlError
from quarl_edge.core.resources import boards_dir, examples_dir

EXAMPLE = examples_dir() / "cartpole_dqn"
INT8 = EXAMPLE / "models" / "int8.tflite"
ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """cli.main on `args` -> (exit code, stdout, stderr); argparse's exits count as returns."""
    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(code: int, err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def run(tmp_path) -> Path:
    """A copy of the example run (run.json, qnet.keras, int8 and fp32 models)."""
    d = tmp_path / "run"
    d.mkdir()
    for name in ("run.json", "qnet.keras", "calibration.npy"):
        shutil.copy(EXAMPLE / name, d / name)
    (d / "models").mkdir()
    for scheme in ("int8", "fp32"):
        shutil.copy(EXAMPLE / "models" / f"{scheme}.tflite", d / "models")
    return d


def edit_run_json(run: Path, edit) -> None:
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(edit(meta)))


# --------------------------------------------------------------------------- run.json
@pytest.mark.parametrize("edit, words", [
    (lambda m: {k: v for k, v in m.items() if k != "env"}, ["run.json: missing key 'env'"]),
    (lambda m: {**m, "env": 3}, ["run.json: 'env' must be str, got 3"]),
    (lambda m: {**m, "obs_shape": "4"}, ["'obs_shape' must be list"]),
    (lambda m: {**m, "algo": "a2c"}, ["'algo' is 'a2c'; expected one of dqn"]),
    (lambda m: [1, 2], ["run.json: must be a JSON object"]),
])
def test_a_bad_run_json_names_the_file_and_the_key(capsys, run, edit, words):
    edit_run_json(run, edit)
    code, _, err = run_cli(capsys, "hil", run, "--episodes", 1)
    one_line_error(code, err, str(run / "run.json"), *words)
    assert not (run / "build").exists()


def test_an_env_that_does_not_fit_the_model_is_refused_before_building(capsys, run):
    edit_run_json(run, lambda m: {**m, "env": "Pendulum-v1"})
    code, _, err = run_cli(capsys, "hil", run, "--episodes", 1)
    one_line_error(code, err, "Pendulum-v1 observes shape (3,)", "takes input [1, 4]")
    assert not (run / "build").exists() and not (run / "results").exists()


# ----------------------------------------------------------------------------- counts
@pytest.mark.parametrize("args, words", [
    (["hil", "RUN", "--episodes", "0"], ["--episodes: must be an integer >= 1, got '0'"]),
    (["hil", "RUN", "--episodes", "-1"], ["--episodes: must be an integer >= 1, got '-1'"]),
    (["hil", "RUN", "--seed", "-3"], ["--seed: must be an integer >= 0"]),
    (["validate", INT8, "--random", "-5"], ["--random: must be an integer >= 1, got '-5'"]),
    (["validate", INT8, "--random", "0", "--json"], ["--random: must be an integer >= 1"]),
    (["bench", "RUN", "--boards", "host", "-n", "0", "--json"], ["-n: must be an integer in 1..65535"]),
    (["bench", "RUN", "--boards", "host", "-n", "-1"], ["-n: must be an integer in 1..65535"]),
    (["bench", "RUN", "-n", "70000"], ["-n: must be an integer in 1..65535"]),
    (["study", "x.toml", "--workers", "0"], ["--workers: must be an integer >= 1"]),
    (["sweep", "RUN", "--bits", "1"], ["--bits: must be an integer in 2..16"]),
    (["train", "--out", "x", "--steps", "ten"], ["--steps: must be an integer >= 1, got 'ten'"]),
])
def test_every_count_is_range_checked_by_the_cli(capsys, run, args, words):
    code, out, err = run_cli(capsys, *[run if a == "RUN" else a for a in args])
    one_line_error(code, err, *words)
    assert out == "" and not (run / "results").exists()


@pytest.mark.parametrize("call, words", [
    (lambda run: qe.hil(run, episodes=0), "episodes must be an integer >= 1, got 0"),
    (lambda run: qe.hil(run, episodes=2.5), "episodes must be an integer >= 1, got 2.5"),
    (lambda run: qe.validate(INT8, random=0), "random must be an integer >= 1, got 0"),
    (lambda run: qe.bench(run, "host", n=0), "n must be an integer in 1..65535, got 0"),
    # quarl_edge.api.study: `qe.study` is the subpackage once quarl_edge.study is imported
    (lambda run: qe.api.study(ROOT / "studies" / "smoke.toml", workers=0), "workers must be"),
    (lambda run: qe.sweep(run, bits=[1]), "bits must be an integer in 2..16"),
    (lambda run: qe.sweep(run, seeds=[]), "at least one seed"),
])
def test_the_api_checks_the_same_counts(run, call, words):
    with pytest.raises(QuarlError, match=words.replace(".", r"\.")):
        call(run)
    assert not (run / "results").exists() and not (run / "build").exists()


# ------------------------------------------------------------------------------ inputs
def test_empty_inputs_are_an_error_not_a_pass(capsys, tmp_path):
    x = tmp_path / "empty.npy"
    np.save(x, np.zeros((0, 4), np.float32))
    code, out, err = run_cli(capsys, "validate", INT8, "--inputs", x, "--json",
                             "--out", tmp_path / "b")
    one_line_error(code, err, "empty.npy holds no inputs (shape (0, 4))")
    assert out == ""                  # no JSON claiming bit_exact: true


def test_an_npz_archive_without_the_inputs_array_is_refused(capsys, tmp_path):
    """(An .npz of one array is taken for a one-input model; of two, they must be named: the
    multi-input cases are tests/test_multi_io.py.)"""
    x = tmp_path / "x.npz"
    np.savez(x, a=np.zeros((3, 4), np.float32), b=np.zeros((3, 4), np.float32))
    code, _, err = run_cli(capsys, "validate", INT8, "--inputs", x, "--out", tmp_path / "b")
    one_line_error(code, err, "x.npz has no array for the model's input 0 'observation'",
                   "it has a, b")


def _bad_name_model(tmp_path) -> Path:
    """The int8 model with a byte of its input tensor's name made invalid UTF-8: our reader
    takes it (names are decoded with replacement), tflite-runtime fails decoding it."""
    data = bytearray(INT8.read_bytes())
    at = data.index(b"serving_default_observation:0")
    data[at + 3] = 0xA2
    path = tmp_path / "bad-name.tflite"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("damage, words", [
    (lambda d: d[:len(d) // 2], ["half.tflite is a malformed TFLite flatbuffer"]),
    (lambda d: b"hello world" * 10, ["half.tflite is not a"]),
    (lambda d: d[:4] + b"XXXX" + d[8:], ["no 'TFL3' flatbuffer identifier"]),
])
def test_a_damaged_model_is_one_line(capsys, tmp_path, damage, words):
    path = tmp_path / "half.tflite"
    path.write_bytes(damage(INT8.read_bytes()))
    code, _, err = run_cli(capsys, "validate", path, "--random", 2, "--out", tmp_path / "b")
    one_line_error(code, err, *words)


def test_tflite_runtimes_unicode_error_is_a_model_error(tmp_path):
    from quarl_edge.core import tflite_host
    from quarl_edge.core.errors import ModelError
    from quarl_edge.measure.reference import TFLiteRuntime
    with pytest.raises(ModelError, match="bad-name.tflite is not a valid TFLite model "
                                         rf"\({tflite_host.runtime_name()}: UnicodeDecodeError"):
        TFLiteRuntime(_bad_name_model(tmp_path))


def test_a_bad_socket_port_is_named(capsys, tmp_path):
    code, _, err = run_cli(capsys, "validate", INT8, "--port", "socket://127.0.0.1:99999",
                           "--out", tmp_path / "b")
    line = one_line_error(code, err, "socket://127.0.0.1:99999", "PORT in 1..65535")
    assert "debug|info" not in line


# ------------------------------------------------------------------------------ boards
def board_file(tmp_path, edit, name="mine") -> Path:
    text = (boards_dir() / "host.toml").read_text().replace('id = "host"', f'id = "{name}"', 1)
    path = tmp_path / f"{name}.toml"
    path.write_text(edit(text))
    return path


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace('ldflags = ["-Wl,-z,now", "-lm"]', 'ldflags = "-lm"'),
     ["[build]: 'ldflags' must be list, got '-lm'"]),
    (lambda t: t.replace('cflags = ["-O2", "-D_DEFAULT_SOURCE"]', 'cflags = ["-O2", 3]'),
     ["[build]: 'cflags' must be a list of str, got ['-O2', 3]"]),
    (lambda t: t.replace("cflags =", "cflag ="),
     ["unknown key(s) cflag (did you mean 'cflags'?)"]),
    (lambda t: t.replace("clock_hz = 0 ", "clock_hz = -1 "), ["'clock_hz' must be >= 0"]),
    (lambda t: t.replace('method = "pty"', 'method = "pty"\nbaud = "fast"'),
     ["[connect]: 'baud' must be int, got 'fast'"]),
])
def test_bad_board_files_are_refused_with_the_type_named(capsys, tmp_path, edit, words):
    path = board_file(tmp_path, edit)
    code, _, err = run_cli(capsys, "build", INT8, "--board-file", path, "--out", tmp_path / "b")
    one_line_error(code, err, str(path), *words)
    assert not (tmp_path / "b").exists()


def test_board_takes_an_id_and_a_path_needs_board_file(capsys, tmp_path):
    path = board_file(tmp_path, lambda t: t)
    code, _, err = run_cli(capsys, "build", INT8, "--board", str(path.with_suffix("")),
                           "--out", tmp_path / "b")
    one_line_error(code, err, "--board takes a board id", "--board-file PATH")
    code, _, err = run_cli(capsys, "validate", INT8, "--board", "../../x/host")
    one_line_error(code, err, "'../../x/host'")
    code, out, err = run_cli(capsys, "build", INT8, "--board-file", path, "--out",
                             tmp_path / "b", "--json")
    assert code == 0, err
    assert json.loads(out)["board"] == "mine" and (tmp_path / "b" / "firmware.elf").is_file()


def test_a_killed_compiler_says_so(capsys, tmp_path):
    cc = tmp_path / "killed-cc"
    cc.write_text("#!/bin/sh\nkill -9 $$\n")
    cc.chmod(0o755)
    path = board_file(tmp_path, lambda t: t.replace('cc = "gcc"', f'cc = "{cc}"'))
    code, _, err = run_cli(capsys, "build", INT8, "--board-file", path, "--out", tmp_path / "b")
    one_line_error(code, err, "building firmware for mine failed: killed-cc was killed by "
                              "signal 9 (SIGKILL) and printed nothing")


def test_every_shipped_board_and_study_still_loads():
    from quarl_edge.study.config import load_study
    from quarl_edge.targets.boards import all_boards
    assert len(all_boards()) == len(list(boards_dir().glob("*.toml")))
    for config in sorted((ROOT / "studies").glob("*.toml")):
        if config.stem == "mujoco":
            pytest.importorskip("mujoco")
        assert load_study(config).tasks


# ------------------------------------------------------------------------------ studies
STUDY = """
[study]
name = "t"
seeds = [0]
schemes = ["fp32", "int8"]
episodes = 3
[[task]]
algo = "dqn"
env = "CartPole-v1"
steps = 100
"""


@pytest.mark.parametrize("edit, words", [
    (('seeds = [0]', 'seeds = "0"'), ["[study]: 'seeds' must be list, got '0'"]),
    (('seeds = [0]', 'seeds = [-1]'), ["'seeds' must be in 0..4294967295, got -1"]),
    (('episodes = 3', 'episodes = "ten"'), ["'episodes' must be int, got 'ten'"]),
    (('schemes = ["fp32", "int8"]', 'schemes = "int8"'), ["'schemes' must be list, got 'int8'"]),
    (('steps = 100', 'steps = 1e3'), ["[[task]] #1: 'steps' must be int, got 1000.0"]),
    (('steps = 100', 'steps = 100\n[task.options]\nlearning_starts = "x"'),
     ["dqn options: 'learning_starts' must be int, got 'x'"]),
    (('steps = 100', 'steps = 100\n[task.options]\nlearning_start = 5'),
     ["unknown dqn option(s) learning_start (did you mean 'learning_starts'?)"]),
    (('episodes = 3', 'episode = 3'), ["unknown key(s) episode (did you mean 'episodes'?)"]),
    (('[[task]]', '[task]'), ["'task' must be list, got {"]),
    (('steps = 100', 'steps = 100\n[[sweep]]\nalgo = "dqn"\nenv = "CartPole-v1"\nbits = 3'),
     ["[[sweep]] #1: 'bits' must be list, got 3"]),
])
def test_study_values_of_the_wrong_type_are_one_line(tmp_path, edit, words):
    config = tmp_path / "t.toml"
    config.write_text(STUDY.replace(*edit))
    # a process of its own: in this one `qe.study` may be the subpackage quarl_edge.study
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "study", config, "--out",
                        tmp_path / "out"], capture_output=True, text=True, timeout=120)
    one_line_error(p.returncode, p.stderr, str(config), *words)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------- nothing is lost
def test_a_failed_hil_keeps_the_previous_results(capsys, run):
    results = run / "results"
    results.mkdir()
    log = results / "hil_host_int8.episodes.jsonl"
    summary = results / "hil_host_int8.json"
    log.write_text('{"who": "board", "seed": 0, "return": 500.0, "steps": 500}\n')
    summary.write_text('{"mean_return": 500.0}\n')
    before = log.read_bytes(), summary.read_bytes()
    # the board is not there: the run fails after its log was opened
    code, _, err = run_cli(capsys, "hil", run, "--episodes", 1, "--port", "/dev/no-such-board")
    assert code == 2 and "Traceback" not in err and "/dev/no-such-board" in err
    assert (log.read_bytes(), summary.read_bytes()) == before


def test_a_finished_hil_replaces_them(capsys, run):
    results = run / "results"
    results.mkdir()
    log = results / "hil_host_int8.episodes.jsonl"
    log.write_text("old\n")
    code, _, err = run_cli(capsys, "hil", run, "--episodes", 1)
    assert code == 0, err
    rows = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [r["who"] for r in rows] == ["board", "tflite-runtime", "tflm", "fp32"]
    assert not log.with_name(log.name + ".partial").exists()


def test_a_linux_tflite_run_leaves_no_temp_directory(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "validate", INT8, "--board",
                        "linux-tflite", "--random", "3", "--out", tmp_path / "b"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "bit-exact" in p.stdout
    assert sorted(x.name for x in tmp.iterdir()) == []
