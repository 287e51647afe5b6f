"""--control-hz: the worst time per action at the board's clock against the control period."""
import json
import subprocess
import sys

import pytest

from helpers_hostile import assert_bounded, run_hostile
from helpers_models import copy_example_tree
from quarl_edge.core.errors import QuarlError
from quarl_edge.measure.deadline import check_control_hz, deadline


def test_the_arithmetic_of_a_cycle_count_against_the_period():
    # the int8 CartPole policy on the ATmega328P: 66,475 cycles at 16 MHz = 4,154.6875 µs
    d = deadline([66475, 66475], "cycles", 16_000_000, 500, "emulated")
    assert d["period_us"] == 2000.0 and d["worst_us"] == pytest.approx(4154.6875)
    assert d["margin_us"] == pytest.approx(-2154.6875) and d["verdict"] == "misses"
    assert d["margin_pct"] == pytest.approx(-107.734375) and d["jitter_us"] == 0.0
    assert "exact cycle count" in d["time_basis"] and "16 MHz" in d["time_basis"]
    # at 200 Hz the same policy meets its 5,000 µs period with 845.3 µs to spare
    d = deadline([66475], "cycles", 16_000_000, 200)
    assert d["verdict"] == "meets" and d["margin_us"] == pytest.approx(845.3125)


def test_wall_time_jitter_and_p99_and_the_worst_case_not_the_median():
    costs = [1000] * 99 + [5000]                       # ns: one slow inference in a hundred
    d = deadline(costs, "ns", None, 500)
    assert d["median_us"] == 1.0 and d["worst_us"] == 5.0 and d["jitter_us"] == 4.0
    assert 1.0 < d["p99_us"] < 5.0 and d["time_basis"] == "measured wall time"
    d = deadline([199_000, 201_000], "ns", None, 5000)  # worst 201 µs over a 200 µs period
    assert d["verdict"] == "misses" and d["margin_us"] == pytest.approx(-1.0)
    d = deadline([4726], "instructions", 25_000_000, 500)
    assert d["worst_us"] == pytest.approx(189.04) and "estimate" in d["time_basis"]


def test_a_cost_without_a_clock_or_a_bad_rate_is_refused():
    with pytest.raises(QuarlError, match="clock_hz"):
        deadline([10], "cycles", 0, 500)
    with pytest.raises(QuarlError, match="no inference"):
        deadline([], "ns", None, 500)
    for bad in (0, -1, float("nan"), float("inf"), 2e6, True, "500"):
        with pytest.raises(QuarlError, match="control-hz"):
            check_control_hz(bad)


def test_bench_control_hz_on_host_and_the_avr(tmp_path):
    run = copy_example_tree(tmp_path / "run")
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "bench", str(run), "--boards",
                        "host,atmega328p", "-n", "10", "--control-hz", "500", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {(r["board"], r["scheme"]): r for r in json.loads(p.stdout)}
    for (board, scheme), r in rows.items():
        d = r["deadline"]
        assert d["control_hz"] == 500 and d["period_us"] == 2000 and d["n"] == 13
        assert d["margin_us"] == pytest.approx(2000 - d["worst_us"])
        assert d["verdict"] == ("meets" if d["worst_us"] <= 2000 else "misses")
    avr = rows[("atmega328p", "int8")]["deadline"]    # cycle-accurate: exactly the count / clock
    assert avr["worst_us"] == rows[("atmega328p", "int8")]["cost_max"] / 16.0
    assert avr["jitter_us"] == 0.0 and avr["verdict"] == "misses"       # ~4.2 ms > 2 ms
    host = rows[("host", "int8")]["deadline"]
    assert host["time_basis"] == "measured wall time" and host["verdict"] == "meets"
    assert host["worst_us"] >= rows[("host", "int8")]["cost_max"] / 1e3
    # the energy estimate beside it (tests/test_energy.py: the arithmetic)
    e = rows[("atmega328p", "int8")]["energy"]
    assert e["uj"] == pytest.approx(rows[("atmega328p", "int8")]["cost_mean"] * 5 * 650 / 1e6)
    assert rows[("host", "int8")]["energy"]["uj"] is None
    md = (run / "results" / "bench.md").read_text()
    assert "| atmega328p | int8 | 216.0 µJ | Atmel" in md
    assert "| atmega328p | int8 | 500 Hz | 2,000.0 | 4,154.7 | -2,154.7 | -107.7 % | misses |" in md
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "bench", str(run), "--boards",
                        "atmega328p", "-n", "3", "--control-hz", "200"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("atmega328p  int8"))
    assert "5,000.0 µs" in line and "845.3 µs (16.9 %)" in line and "meets" in line
    assert any(x.split() == ["atmega328p", "int8", "216.0", "µJ"] for x in p.stdout.splitlines())


def test_hil_control_hz_holds_every_step_against_the_period(tmp_path):
    run = copy_example_tree(tmp_path / "run")
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "hil", str(run), "--board",
                        "mps2-an386", "--episodes", "2", "--control-hz", "1000", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    d = res["deadline"]
    assert d["n"] == res["latency"]["n"] > 2 and d["period_us"] == 1000
    assert d["p99_us"] == pytest.approx(res["latency"]["p99"] / 25)     # instructions at 25 MHz
    assert d["verdict"] == "meets" and "estimate" in d["time_basis"]
    assert res["energy"]["uj"] is None and "FPGA" in res["energy"]["none"]


@pytest.mark.parametrize("rate", ["0", "-5", "nan", "fast"])
def test_a_bad_control_rate_is_one_line(tmp_path, rate):
    run = copy_example_tree(tmp_path / "run")
    o = run_hostile(f"control-hz-{rate}", ["bench", str(run), "--boards", "host",
                                           "--control-hz", rate], tmp_path)
    lines = o.stderr.strip().splitlines()   # argparse's line: `quarl-edge bench: error: ...`
    assert o.exit == 2 and len(lines) == 1 and lines[0].startswith("quarl-edge bench: error:")
    assert f"--control-hz: must be a rate in Hz, > 0 and <= 1e6, got '{rate}'" in lines[0]
    assert_bounded(o)
    assert not (run / "results").exists() and not (run / "build").exists()
