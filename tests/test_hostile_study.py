"""Issue 36: hostile study configs and results files. Counts and sizes past the study's limits,
values of the wrong type, deep or absurd results lines: one line `quarl-edge: error: ...` (exit
2) naming the key, or the file and line, before anything is allocated (within 60 s and 1 GB),
and nothing written."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers_hostile import assert_refused, assert_unchanged, run_hostile, snapshot

REPO = Path(__file__).resolve().parents[1]
SMOKE = (REPO / "studies" / "smoke.toml").read_text()
BOARDS = ["host", "mps2-an386", "mps2-an500", "mps2-an505", "lm3s6965evb", "netduinoplus2",
          "microbit", "atmega328p", "linux-tflite", "nucleo-f446re"]
SCHEMES = ["fp32", "int8", "int16x8", "int8-acc", "int8-centred", "fp16", "dyn-int8",
           "int8-i16head", "qat-int8", "qat-distill-int8"]


def study_file(tmp_path: Path, study: str = "") -> Path:
    """smoke.toml with the `study` lines in its [study] table (replacing a key it has)."""
    text = SMOKE
    for line in filter(None, study.split("\n")):
        key = line.split("=")[0].strip()
        old = re.search(rf"^{key} = .*$", text, re.M)
        text = (text[:old.start()] + line + text[old.end():] if old else
                text.replace('name = "smoke"\n', f'name = "smoke"\n{line}\n'))
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def status(case: str, tmp_path: Path, config: Path):
    before = snapshot(tmp_path)
    o = run_hostile(case, ["study", str(config), "--status", "--out", str(tmp_path / "out")],
                    tmp_path)
    assert_unchanged(before, snapshot(tmp_path), allowed=(tmp_path / "out",))
    return o


CONFIGS = {   # case: (lines for [study], words of the error)
    "study-episodes-billion": ("episodes = 1000000000",
                               "'episodes' must be in 1..10000, got 1000000000"),
    "study-episodes-float": ("episodes = 1e9", "'episodes' must be int, got 1000000000.0"),
    "study-episodes-string": ('episodes = "20"', "'episodes' must be int, got '20'"),
    "study-seed-bool": ("seeds = [true]", "'seeds' must be a list of int, got [True]"),
    "study-seed-huge": ("seeds = [99999999999]", "'seeds' must be in 0..4294967295"),
    "study-seeds-many": (f"seeds = {list(range(5000))}",
                         "'seeds' holds 5,000 items; at most 1,000"),
    "study-eval-seeds-many": (f"eval_seeds = {list(range(5000))}",
                              "'eval_seeds' holds 5,000 items; at most 1,000"),
    "study-calib-billion": ("calib_size = 1000000000",
                            "'calib_size' must be in 1..1000000, got 1000000000"),
    "study-calib-float": ("calib_size = 300.5", "'calib_size' must be int, got 300.5"),
    "study-validate-n": ("validate_n = 10000000", "'validate_n' must be in 1..100000"),
    "study-board-episodes": ("board_episodes = true", "'board_episodes' must be int"),
    "study-qat-steps": ("qat_steps = 100000000000", "'qat_steps' must be in 1..1000000000"),
    "study-grid": (f"seeds = {list(range(1000))}\nschemes = {SCHEMES}\nboards = {BOARDS}",
                   "the grid has 114,000 rows (tasks x seeds x schemes x boards, and sweeps); "
                   "at most 100,000"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_study_config_past_its_limits_is_refused_at_load(case, tmp_path):
    study, words = CONFIGS[case]
    o = status(case, tmp_path, study_file(tmp_path, study))
    assert_refused(o, words)
    assert case == "study-grid" or "[study]" in o.line


def test_a_task_whose_steps_are_absurd(tmp_path):
    config = study_file(tmp_path)
    config.write_text(config.read_text().replace("steps = 2500", "steps = 10000000000000"))
    o = status("study-task-steps", tmp_path, config)
    assert_refused(o, "[[task]] #1: 'steps' must be in 1..1000000000, got 10000000000000")


def test_a_sweep_with_bits_repeated(tmp_path):
    config = study_file(tmp_path)
    config.write_text(config.read_text().replace("bits = [2, 4, 8]", f"bits = {[8] * 100}"))
    o = status("study-sweep-bits", tmp_path, config)
    assert_refused(o, "[[sweep]] #1: 'bits' holds 100 items; at most 15")


# ------------------------------------------------------------------------- results.jsonl
GOOD_ROW = '{"kind": "run", "algo": "dqn", "env": "CartPole-v1", "seed": 0, "status": "ok"}'
RESULTS = {   # case: (the bad line, words of the error)
    "results-deep": ("[" * 200_000 + "]" * 200_000, "line 2: JSON nested too deeply to read"),
    "results-not-json": ('{"kind": "run", ', "line 2: not valid JSON"),
    "results-list-row": ("[1, 2, 3]", "line 2 is not a results row (a JSON object), but list"),
    "results-key-object": ('{"kind": {"a": [1]}, "algo": "dqn"}',
                           "line 2: 'kind' must be a plain value, not dict"),
    "results-seconds-string": (GOOD_ROW[:-1] + ', "seconds": "abc"}',
                               "line 2: 'seconds' must be a number, not str"),
    "results-long-line": ('{"note": "' + "x" * (2 << 20) + '"}',
                          "line 2 is longer than 1,048,576 bytes: not a results row"),
}


@pytest.mark.parametrize("case", list(RESULTS))
def test_a_results_file_with_a_bad_line(case, tmp_path):
    """study --status and report read results.jsonl: a bad line (not the last one, which a kill
    may have cut) is one line naming the file and the line."""
    line, words = RESULTS[case]
    out = tmp_path / "out"
    out.mkdir()
    results = out / "results.jsonl"
    results.write_text(f"{GOOD_ROW}\n{line}\n{GOOD_ROW}\n")
    o = status(case, tmp_path, study_file(tmp_path))
    assert_refused(o, f"{results}: {words}")
    o = run_hostile(f"{case}-report", ["report", str(results), "--out", str(tmp_path / "rep")],
                    tmp_path)
    assert_refused(o, f"{results}: {words}")


def test_a_cut_last_line_is_still_ignored(tmp_path):
    """A kill mid-write leaves an unterminated last line: read past, not refused."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text(f'{GOOD_ROW}\n{{"kind": "cell", "alg')
    o = status("results-cut-tail", tmp_path, study_file(tmp_path))
    assert o.exit == 0, o.stderr
    assert "study smoke:" in o.stdout
