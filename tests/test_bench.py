"""quarl-edge bench: one table of cost per inference and memory, per board and precision."""
import json
import subprocess
import sys

from helpers_models import copy_example_tree


def test_bench_host_and_an_emulated_board(tmp_path):
    run = copy_example_tree(tmp_path / "run")
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "bench", str(run), "--boards",
                        "host,lm3s6965evb", "-n", "20", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(p.stdout)
    cells = {(r["board"], r["precision"]): r for r in rows}
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
    md = (run / "results" / "bench.md").read_text()
    assert "| lm3s6965evb | cortex-m3 | int8 |" in md and "x |" in md
