"""The row schema (quarl_edge/measure/rows.py): one name per concept in hil, bench and study rows,
and older files read with today's names (rows.migrate) without being rewritten."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from quarl_edge.measure.bench import merge_rows
from quarl_edge.measure.rows import RENAMED, BenchRow, BoardCellRow, HilResult, migrate
from quarl_edge.study.report import read_bench
from quarl_edge.study.results import Results, read_results

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "results").glob("*/results.jsonl"))
OLD = set(RENAMED)


def fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_the_schema_has_one_name_per_concept():
    for cls in (HilResult, BenchRow, BoardCellRow):
        assert not fields(cls) & OLD, cls       # no old name is a field
    assert set(RENAMED.values()) <= fields(HilResult) | fields(BenchRow)
    assert "run_dir" in fields(BenchRow) and RENAMED["run"] == "run_dir"    # bench's old "run"
    assert {"scheme", "matches_reference", "tflite_mean_return"} <= fields(BenchRow)
    assert fields(BenchRow) < fields(BoardCellRow)


def test_migrate_renames_old_keys_in_place_and_keeps_new_rows_as_they_are():
    old_hil = {"board": "host", "model": "int8", "env": "CartPole-v1",
               "host_mean_return": 500.0, "host_std_return": 0.0,
               "board_equals_reference": True, "agreement": 0.9}
    new = migrate(old_hil)
    assert list(new) == ["board", "scheme", "env", "tflite_mean_return", "tflite_std_return",
                         "matches_reference", "agreement"]
    assert new["scheme"] == "int8" and new["matches_reference"] is True
    assert old_hil["model"] == "int8" and "scheme" not in old_hil      # the input is untouched
    assert migrate(new) == new                                          # today's rows unchanged
    # a study board row had both names: one is left
    study = {"kind": "board", "scheme": "int8", "board": "host", "precision": "int8",
             "matches_reference": False, "matches_tflite": True}
    assert migrate(study) == {"kind": "board", "scheme": "int8", "board": "host",
                              "matches_reference": False, "matches_tflite": True}
    # a row from before the TF Lite Micro reference: its check was tflite-runtime's
    assert migrate({"precision": "fp32", "matches_tflite": False}) == {
        "scheme": "fp32", "matches_tflite": False, "matches_reference": False}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_results_file_loads_with_todays_keys(path):
    before = path.read_bytes()
    rows = read_results(path)
    assert path.read_bytes() == before           # read with today's keys, never rewritten
    assert rows and all(isinstance(r, dict) for r in rows)
    assert not any(OLD & set(r) for r in rows)
    res = Results(rows)
    boards = [r for r in res.all if r["kind"] == "board"]
    assert all(r["scheme"] for r in boards)
    assert all(isinstance(r["matches_reference"], bool) for r in res.board_ok)
    for r in boards:      # every key of a board row is a field of the schema
        assert set(r) <= fields(BoardCellRow), set(r) - fields(BoardCellRow)
    raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(raw) == len(rows)                 # migrating drops no row
    assert [r.get("scheme") for r in raw] == [r.get("scheme") for r in rows]


def test_an_old_bench_file_reads_and_merges_with_todays_keys(tmp_path):
    old = ROOT / "results" / "bench-cartpole-dqn" / "bench.jsonl"
    assert '"precision"' in old.read_text()
    rows = read_bench(old)
    assert rows and all("scheme" in r and "precision" not in r for r in rows)
    for r in rows:
        assert set(r) <= fields(BenchRow)
    # a bench merging its rows into an old file: the old rows come back with today's keys and
    # a row of the same cell is replaced
    path = tmp_path / "bench.jsonl"
    path.write_text(old.read_text())
    first = rows[0]
    again = {**first, "cost_mean": 1.0}
    merged = merge_rows(path, [again])
    assert len(merged) == len(rows)
    assert merged[-1] is again
    assert all("precision" not in r and "scheme" in r for r in merged)
