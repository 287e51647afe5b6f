"""quarl-edge bench: one table of cost per inference and memory, per board and scheme."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers_models import copy_example_tree

ROOT = Path(__file__).resolve().parents[1]


def test_bench_host_and_an_emulated_board(tmp_path):
    run = copy_example_tree(tmp_path / "run")
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "bench", str(run), "--boards",
                        "host,lm3s6965evb", "-n", "20", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(p.stdout)
    cells = {(r["board"], r["scheme"]): r for r in rows}
    assert set(cells) == {(b, s) for b in ("host", "lm3s6965evb") for s in ("fp32", "int8")}
    assert cells[("host", "int8")]["unit"] == "ns"
    lm = cells[("lm3s6965evb", "int8")]
    assert lm["unit"] == "instructions" and lm["n"] == 20
    assert lm["cost_min"] == lm["cost_max"] == lm["cost_first"]     # icount: exactly repeatable
    # no FPU on the Cortex-M3: soft-float fp32 costs many times the int8 instructions
    assert cells[("lm3s6965evb", "fp32")]["cost_mean"] > 3 * lm["cost_mean"]
    assert lm["flash_bytes"] < cells[("lm3s6965evb", "fp32")]["flash_bytes"]
    saved = [json.loads(line) for line in (run / "results" / "bench.jsonl").read_text().splitlines()]
    assert len(saved) == 4
    assert all("episodes" not in r and "mean_return" not in r for r in saved)  # off by default
    md = (run / "results" / "bench.md").read_text()
    assert "| lm3s6965evb | cortex-m3 | int8 |" in md and "x |" in md
    assert "return (mean ± std)" not in md


def _tflite_returns(run, scheme, seeds):
    """The run's model on tflite-runtime, played here with the env's argmax head."""
    from quarl_edge.measure.episodes import play
    from quarl_edge.measure.reference import host_reference
    ref = host_reference(run / "models" / f"{scheme}.tflite")
    returns, _, _ = play("CartPole-v1", lambda o: int(np.argmax(ref.run([o])[0])), seeds)
    return returns


def test_bench_episodes_gives_the_boards_return_equal_to_tflite_runtime(tmp_path):
    run = copy_example_tree(tmp_path / "run")
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "bench", str(run), "--boards",
                        "host,mps2-an386", "-n", "5", "--episodes", "3", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {(r["board"], r["scheme"]): r for r in json.loads(p.stdout)}
    assert set(rows) == {(b, s) for b in ("host", "mps2-an386") for s in ("fp32", "int8")}
    for (board, scheme), r in rows.items():
        assert r["n"] == 5 and r["cost_mean"] > 0                      # bench as before
        assert r["episodes"] == 3 and r["seeds"] == [0, 1, 2] and len(r["returns"]) == 3
        assert r["returns"] == _tflite_returns(run, scheme, [0, 1, 2]) == r["tflite_returns"]
        assert r["matches_tflite"] is True
        assert r["tflite_ref_returns"] == r["returns"] and r["matches_tflite_ref"] is True
        assert r["mean_return"] == pytest.approx(np.mean(r["returns"]))
        assert r["env"] == "CartPole-v1" and r["algo"] == "dqn" and r["run_dir"] == str(run)
    assert rows[("host", "fp32")]["agreement"] == 1.0   # the fp32 model acts as the fp32 network
    assert 0 < rows[("host", "int8")]["agreement"] <= 1.0
    md = (run / "results" / "bench.md").read_text()
    assert "| return (mean ± std) | = TF Lite Micro | agreement |" in md
    int8 = rows[("mps2-an386", "int8")]
    assert f"| {int8['mean_return']:,.1f} ± {int8['std_return']:,.1f} | yes |" in md

    # the report's board section from these rows (with the smoke study's committed results)
    bench = run / "results" / "bench.jsonl"
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "report",
                        str(ROOT / "results" / "smoke" / "results.jsonl"), "--bench", str(bench),
                        "--out", str(tmp_path / "report")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## On the board: reward, latency and memory" in report
    fp32 = rows[("mps2-an386", "fp32")]
    # the task's scheme x board table (issue 14's study board cells; bench rows join it)
    table = report[report.index("### DQN CartPole-v1: scheme × board"):]
    # n: one seed (the bench run) × its episodes
    assert (f"| mps2-an386 | int8 | 1 × {len(int8['returns'])} | {int8['mean_return']:,.1f} ± "
            f"{int8['std_return']:,.1f} | +0.0 % |") in table
    assert f"| {int8['cost_mean']:,.0f} instructions | ~{int8['cost_mean'] / int8['clock_hz'] * 1e6:,.1f} " \
           f"(estimate) | - | {int8['flash_bytes']:,} | {int8['ram_bytes']:,} |" in table
    # (mps2-an386, an FPGA image, has no energy figures: its µJ column says "-")
    assert (f"DQN CartPole-v1 on mps2-an386 (cortex-m4): int8 is "
            f"{fp32['cost_mean'] / int8['cost_mean']:.2f}× faster ({int8['cost_mean']:,.0f} vs "
            f"{fp32['cost_mean']:,.0f} instructions per inference) and "
            f"{fp32['flash_bytes'] / int8['flash_bytes']:.2f}× smaller in flash "
            f"({int8['flash_bytes']:,} vs {fp32['flash_bytes']:,} B) than fp32, with a return "
            "loss of") in report
