"""TF Lite Micro's own integration tests (issue 26): a few of tflite-micro's seanet models
(tests/fixtures/tflm-seanet, Apache 2.0, commit in SOURCE.md) through
benchmarks/tflm_integration.py, as the whole suite runs: each model's CSV inputs as one sample
of its input tensors, validated on the host and on mps2-an386, the board's output against
today's TF Lite Micro and against the committed golden CSV."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "fixtures" / "tflm-seanet"


def test_the_seanet_models_equal_tflm_and_the_stale_csv_is_named(tmp_path):
    md = tmp_path / "seanet.md"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tflm_integration.py"),
                        "--suite", str(SUITE), "--boards", "host,mps2-an386", "--commit",
                        "90b983c2b", "--md", str(md)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {r["model"]: r for r in map(json.loads, md.with_suffix(".jsonl").read_text()
                                       .splitlines())}
    assert sorted(rows) == ["conv0.tflite", "leaky_relu0.tflite", "leaky_relu3.tflite",
                            "pad0.tflite", "quantize0.tflite", "quantize1.tflite",
                            "strided_slice0.tflite", "transpose_conv0.tflite"]
    for name, r in rows.items():
        assert "refused" not in r, r
        for board in ("host", "mps2-an386"):
            assert r["boards"][board]["equals_tflm"], (name, board)
            assert r["boards"][board]["within_1_of_csv"], (name, board)   # TFLM's own bar
    stale = {n for n, r in rows.items() if not r["boards"]["host"]["equals_csv"]}
    assert stale == {"leaky_relu3.tflite"}
    assert rows["leaky_relu3.tflite"]["boards"]["host"]["csv_values_off"] == 3
    text = md.read_text()
    assert "| **all** | 8 | 0 | 8 | 8 | 7 | 8 |" in text
    assert "`leaky_relu/leaky_relu3.tflite`: 3 values off, at most 1" in text
    # an interrupted run resumes: the rows are read back, nothing is run again
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tflm_integration.py"),
                            "--suite", str(SUITE), "--boards", "host,mps2-an386", "--commit",
                            "90b983c2b", "--md", str(md)], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and ": host:" not in again.stderr
    assert md.read_text().split("\n", 1)[1] == text.split("\n", 1)[1]
