"""The benchmark tables are rendered from their raw rows (benchmarks/speed.py and
benchmarks/hil_speed.py, --md and --render): the committed .md files equal what --render makes
of the committed .jsonl beside them, and a board's rows run again replace its old ones."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "results" / "bench"
sys.path.insert(0, str(ROOT / "benchmarks"))


def _render(script: str, md: Path) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--render", "--md",
                        str(md)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]


def test_committed_tables_are_rendered_from_their_rows(tmp_path):
    for script, name in (("speed.py", "speed"), ("hil_speed.py", "hil_speed")):
        md, jsonl = BENCH / f"{name}.md", BENCH / f"{name}.jsonl"
        assert jsonl.exists(), jsonl
        shutil.copy(md, tmp_path / md.name)
        shutil.copy(jsonl, tmp_path / jsonl.name)
        _render(script, tmp_path / md.name)
        assert (tmp_path / md.name).read_text() == md.read_text(), name


def test_speed_rows_merge_per_board_and_model():
    import speed
    rows = [json.loads(ln) for ln in (BENCH / "speed.jsonl").read_text().splitlines()]
    boards = list(dict.fromkeys(r["board"] for r in rows))
    assert {"mps2-an386", "microbit", "atmega328p"} <= set(boards)
    first = next(r for r in rows if r["kind"] == "model")
    again = dict(first, optimized=dict(first["optimized"], total=1))
    merged = speed.merge_rows(rows, [again])
    assert len(merged) == len(rows) and merged[rows.index(first)]["optimized"]["total"] == 1
    new_board = dict(first, board="new-board")
    merged = speed.merge_rows(rows, [new_board, {"kind": "build_time", "board": "new-board",
                                                 "cold_s": 1.0, "warm_s": 0.1}])
    assert [r["board"] for r in merged[-2:]] == ["new-board", "new-board"]
    assert merged[-1]["kind"] == "build_time"
    for r in rows:       # every count per op adds up to the total less the harness
        if r["kind"] == "model":
            for kset in ("reference", "optimized"):
                assert sum(r[kset]["costs"]) + r[kset]["base"] == r[kset]["total"], (r["board"], r["model"])
