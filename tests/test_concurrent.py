"""Two `hil` and two `bench` at once on one run directory (host board) keep both results
(issue 24): per-process temporary names, results keyed by board, model and seeds, bench rows
merged under a lock."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers_models import copy_example_tree


def start(*args):
    return subprocess.Popen([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs):
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]


def lines(path):
    return [json.loads(ln) for ln in path.read_text().splitlines()]


@pytest.mark.long
def test_two_hil_and_two_bench_at_once_keep_both_results(tmp_path):
    run = copy_example_tree(tmp_path / "run")
    results = run / "results"
    # build once first: the concurrent runs then share the cached firmware
    finish([start("hil", run, "--board", "host", "--episodes", 1, "--seed", 50)])
    finish([start("hil", run, "--board", "host", "--episodes", 3, "--seed", s) for s in (0, 100)])
    for s in (0, 100):
        summary = json.loads((results / f"hil_host_int8_seeds{s}-{s + 2}.json").read_text())
        assert summary["seeds"] == [s, s + 1, s + 2]
        assert summary["episodes_log"].endswith(f"hil_host_int8_seeds{s}-{s + 2}.episodes.jsonl")
        rows = lines(results / f"hil_host_int8_seeds{s}-{s + 2}.episodes.jsonl")
        assert len(rows) == 12 and {r["seed"] for r in rows} == {s, s + 1, s + 2}
        assert [r["who"] for r in rows] == ["board"] * 3 + ["tflite-runtime"] * 3 + \
            ["tflm"] * 3 + ["fp32"] * 3
        assert [r["return"] for r in rows if r["who"] == "board"] == summary["returns"]
    latest = json.loads((results / "hil_host_int8.json").read_text())    # one of the two, whole
    assert latest["seeds"] in ([0, 1, 2], [100, 101, 102])
    assert [r["seed"] for r in lines(results / "hil_host_int8.episodes.jsonl")][:3] == \
        latest["seeds"]

    finish([start("bench", run, "--boards", "host", "-n", 10, "--episodes", k, "--json")
            for k in (1, 2)])
    rows = lines(results / "bench.jsonl")
    assert sorted((r["scheme"], r["episodes"]) for r in rows) == [
        ("fp32", 1), ("fp32", 2), ("int8", 1), ("int8", 2)]
    assert all(r["returns"] == r["micro_returns"] for r in rows)
    assert not [p.name for p in results.iterdir() if p.name.endswith((".partial", ".tmp"))]


def test_a_killed_runs_temporary_files_are_removed_by_the_next(tmp_path):
    from quarl_edge.core.files import remove_stale
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = [f"bench.jsonl.{dead.pid}.partial", f"hil_host_int8.json.{dead.pid}.tmp",
                 "hil_host_int8.episodes.jsonl.partial",     # an older version's killed run
                 f"bench.jsonl.{alive.pid}.partial", "bench.jsonl", "notes.partial"]
        for n in names:
            (tmp_path / n).write_text("x\n")
        remove_stale(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])
    finally:
        alive.kill()
        alive.wait()
