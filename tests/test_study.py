"""The study runner: config checks before anything runs, the smoke study through the CLI (and the
report on it), --status on a results file of known seconds, and a real subprocess killed with
SIGKILL mid-grid then resumed: no row lost, none repeated, finished runs not retrained, no worker
left behind, and --status reading the grid while it runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from quarl_edge.study.analysis import gaussian_policy_kl, policy_kl, weight_stats
from quarl_edge.core.errors import QuarlError
from quarl_edge.study.config import load_study
from quarl_edge.study.plan import plan
from quarl_edge.study.results import read_results, row_key
from quarl_edge.study.status import study_status

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "quarl_edge.cli"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}

TINY_DQN = """
[task.options]
learning_starts = 200
train_every = 200
updates_per_train = 16
eval_every = 400
eval_episodes = 2
hidden = [16, 16]
select_int8 = false
"""


def _write(tmp_path, text, name="study.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------------------ config checks
GOOD = """
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


@pytest.mark.parametrize("edit,match", [
    (('algo = "dqn"', 'algo = "a2c"'), r"unknown algorithm 'a2c'.*known: dqn, ppo"),
    (('env = "CartPole-v1"', 'env = "NoSuchEnv-v0"'), r"\(dqn, NoSuchEnv-v0\).*unknown Gymnasium environment 'NoSuchEnv-v0'"),
    (('"fp32", "int8"', '"fp32", "int4"'), r"unknown quantization scheme 'int4'.*known: fp32, fp16"),
    (('steps = 100', 'steps = 100\n[task.options]\nlearning_rat = 1.0'), r"unknown dqn option\(s\) learning_rat"),
    (('algo = "dqn"', 'algo = "sac"'), r"sac needs a Box"),
    (('episodes = 3', 'episodez = 3'), r"\[study\]: unknown key\(s\) episodez"),
    (('steps = 100', 'steps = 0'), r"'steps' must be in 1\.\.1000000000, got 0"),
])
def test_config_errors_name_the_bad_entry(tmp_path, edit, match):
    with pytest.raises(QuarlError, match=match):
        load_study(_write(tmp_path, GOOD.replace(*edit)))


def test_sweep_errors_and_the_plan(tmp_path):
    bad = GOOD + '[[sweep]]\nalgo = "ppo"\nenv = "CartPole-v1"\nbits = [4]\n'
    with pytest.raises(QuarlError, match=r"\(ppo, CartPole-v1\) is not a \[\[task\]\]"):
        load_study(_write(tmp_path, bad))
    bad = GOOD + '[[sweep]]\nalgo = "dqn"\nenv = "CartPole-v1"\nbits = [1]\n'
    with pytest.raises(QuarlError, match="bits must be in 2..16"):
        load_study(_write(tmp_path, bad))
    bad = GOOD + '[[sweep]]\nalgo = "dqn"\nenv = "CartPole-v1"\nmodes = ["bias"]\n'
    with pytest.raises(QuarlError, match="unknown sweep mode 'bias'"):
        load_study(_write(tmp_path, bad))
    ok = GOOD.replace("seeds = [0]", "seeds = [0, 1]") + (
        '[[sweep]]\nalgo = "dqn"\nenv = "CartPole-v1"\nbits = [3, 8]\nseeds = [1]\n')
    groups = plan(load_study(_write(tmp_path, ok)))
    assert [g.seed for g in groups] == [0, 1]
    assert groups[0].keys == [("run", "dqn", "CartPole-v1", 0),
                                 ("cell", "dqn", "CartPole-v1", 0, "fp32"),
                                 ("cell", "dqn", "CartPole-v1", 0, "int8")]
    assert groups[1].keys[-3:] == [("sweep", "dqn", "CartPole-v1", 1, "fp32", 32),
                                      ("sweep", "dqn", "CartPole-v1", 1, "weights+activations", 3),
                                      ("sweep", "dqn", "CartPole-v1", 1, "weights+activations", 8)]
    assert groups[0].task.eval_seeds == [0, 1, 2]


def test_the_shipped_configs_are_valid():
    smoke = load_study(ROOT / "studies" / "smoke.toml")
    assert [(t.algo, t.env, t.schemes) for t in smoke.tasks] == [
        ("dqn", "CartPole-v1", ["fp32", "int8", "int16x8", "int8-acc", "int8-centred"])]
    assert smoke.sweeps[0].bits == [2, 4, 8]
    classic = load_study(ROOT / "studies" / "classic.toml")  # needs box2d for LunarLander
    assert len(classic.tasks) == 11 and all(t.seeds == [0, 1, 2] for t in classic.tasks)
    assert {(s.algo, s.env) for s in classic.sweeps} == {("dqn", "CartPole-v1"),
                                                          ("ppo", "Pendulum-v1")}
    assert all(s.bits == list(range(2, 9)) for s in classic.sweeps)
    rows = sum(len(g.keys) for g in plan(classic))
    assert rows == 33 * 12 + 6 * 15  # per run: a run row + 11 schemes; sweeps: fp32 + 2 modes x 7
    # the classic grid's tasks again, with the same budgets and options, on six boards
    boards = load_study(ROOT / "studies" / "classic-boards.toml")
    same = lambda t: (t.algo, t.env, t.steps, t.options)   # noqa: E731
    assert list(map(same, boards.tasks)) == list(map(same, classic.tasks))
    assert all(t.boards == ["host", "mps2-an386", "lm3s6965evb", "microbit", "atmega328p",
                           "hifive1"]
               and t.seeds == [0, 1, 2, 3, 4] and t.board_episodes == 10
               for t in boards.tasks)   # issue 27: five seeds, 10 HIL episodes per board cell
    minatar = load_study(ROOT / "studies" / "minatar.toml")
    assert {t.env for t in minatar.tasks} == {"QuarlEdge/MinAtar-Breakout-v0",
                                              "QuarlEdge/MinAtar-SpaceInvaders-v0"}
    assert all(t.seeds == [0, 1, 2, 3, 4] and "mps2-an386" in t.boards and t.board_episodes == 10
               for t in minatar.tasks)   # issue 27: five seeds, 10 HIL episodes per board cell
    assert all("hifive1" in t.boards and {"int8x4", "qat-int8x4"} <= set(t.schemes)
               for t in minatar.tasks)   # issues 41 and 39: the RISC-V column, int4 weights


def test_unknown_config_fails_through_the_cli_before_anything_runs(tmp_path):
    cfg = _write(tmp_path, GOOD.replace('"fp32", "int8"', '"fp32", "int3"'))
    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and "unknown quantization scheme 'int3'" in p.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ analysis additions
def test_weight_stats_and_kl():
    rng = np.random.default_rng(0)
    k1, k2 = rng.normal(size=(200, 300)), rng.uniform(-2, 1, size=(300, 4))
    s = weight_stats([(k1, np.zeros(300), "relu"), (k2, np.ones(4), "linear")])
    assert [layer["shape"] for layer in s["layers"]] == [[200, 300], [300, 4]]
    assert abs(s["layers"][0]["kurtosis"]) < 0.05 and abs(s["layers"][0]["std"] - 1) < 0.01
    assert s["layers"][1]["kurtosis"] == pytest.approx(-1.2, abs=0.15)  # uniform: -6/5
    assert s["layers"][1]["min"] >= -2 and s["layers"][1]["range"] == pytest.approx(3, abs=0.01)
    assert s["layers"][1]["bias_abs_max"] == 1.0 and s["all"]["n"] == 200 * 300 + 300 * 4
    logits = rng.normal(size=(50, 3))
    assert policy_kl(logits, logits) == pytest.approx(0.0, abs=1e-12)
    assert policy_kl(logits, logits + 5.0) == pytest.approx(0.0, abs=1e-9)  # shift-invariant
    p = np.array([[0.0, 1.0]])
    assert policy_kl(p, p[:, ::-1]) == pytest.approx(0.4621171572600097)  # (e-1)/(e+1) * 1
    assert policy_kl(p, p * 2) > 0
    # same-std Gaussians: sum_i (mu1 - mu2)^2 / (2 std_i^2), averaged over states
    mu = rng.uniform(-2, 2, size=(40, 2))
    assert gaussian_policy_kl(mu, mu, [0.3, 0.5]) == 0.0
    kl = gaussian_policy_kl([[0.1, 0.0]], [[0.0, 0.2]], [0.2, 0.4])
    assert kl == pytest.approx(0.01 / 0.08 + 0.04 / 0.32)
    # ... which is the integral of p log(p / q) for p = N(0.1, 0.2^2), q = N(0, 0.2^2)
    x = np.linspace(-3, 3, 200_001)

    def log_pdf(m):
        return -0.5 * ((x - m) / 0.2) ** 2 - np.log(0.2 * np.sqrt(2 * np.pi))

    p_x = np.exp(log_pdf(0.1))
    numeric = np.sum(p_x * (log_pdf(0.1) - log_pdf(0.0))) * (x[1] - x[0])
    assert gaussian_policy_kl([[0.1]], [[0.0]], [0.2]) == pytest.approx(numeric, rel=1e-6)


# ----------------------------------------------------------------------- smoke through the CLI
def _smoke_study(out: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`quarl-edge study studies/smoke.toml --out OUT ARGS...`"""
    return subprocess.run(CLI + ["study", str(ROOT / "studies" / "smoke.toml"), "--out", str(out),
                                 *args], capture_output=True, text=True, env=ENV, cwd=ROOT,
                          timeout=timeout)


def _check_smoke_rows(out: Path) -> dict:
    """The smoke study's 10 rows: the run, its five cells, its sweep; returns the cells."""
    text = (out / "results.jsonl").read_text()
    assert '"algo": "dqn", "env": "CartPole-v1"' in text and '"scheme": "int8"' in text
    rows = read_results(out / "results.jsonl")
    assert len(rows) == 10 and len({row_key(r) for r in rows}) == 10
    run = rows[0]
    assert run["kind"] == "run" and len(run["returns"]) == 10 and run["random_return"] < 40
    assert len(run["weights"]["layers"]) == 3 and len(run["weight_quantiles"]) == 101
    cells = {r["scheme"]: r for r in rows if r["kind"] == "cell"}
    assert list(cells) == ["fp32", "int8", "int16x8", "int8-acc", "int8-centred"]
    # the accumulator readout has (next to) no ties; the plain int8 head may have many
    assert cells["int8-acc"]["ties"] <= min(cells["int8"]["ties"], 0.01)
    # the same int8 model plus a small metadata entry naming the readout
    assert 0 < cells["int8-acc"]["size_bytes"] - cells["int8"]["size_bytes"] < 200
    assert cells["fp32"]["agreement"] == 1.0 and cells["fp32"]["mean_return"] == run["fp32_return"]
    assert cells["int8"]["size_bytes"] < cells["fp32"]["size_bytes"] / 2
    assert all(r["kl"] is None and r["eval_seeds"] == list(range(10)) for r in cells.values())
    sweep = [(r["mode"], r["bits"]) for r in rows if r["kind"] == "sweep"]
    assert sweep == [("fp32", 32)] + [("weights+activations", b) for b in (2, 4, 8)]
    return cells


def _check_smoke_report(out: Path, cells: dict) -> None:
    """`quarl-edge report` on the smoke results: figures, claims, one self-contained page."""
    p = subprocess.run(CLI + ["report", str(out / "results.jsonl"), "--out", str(out / "report")],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    md = (out / "report" / "report.md").read_text()
    for png in ("return_vs_scheme", "return_vs_bits", "weight_histograms", "model_size"):
        assert f"]({png}.png)" in md
        assert (out / "report" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| 6-8 bit policies lose no reward |" in md
    assert "| QAT >= PTQ (and often >= fp32) | **insufficient data** | 0 (0 seeds × " in md
    assert "| wider weight distributions quantize worse | **insufficient data** |" in md
    assert f"{cells['int8']['mean_return']:,.1f}" in md  # numbers come from the results
    page = (out / "report" / "report.html").read_text()
    # one self-contained file: the figures are embedded, none is linked
    assert "<table>" in page and 'src="data:image/png;base64,' in page
    assert 'src="return_vs_bits.png"' not in page
    assert "http://" not in page and "https://" not in page and "<script" not in page


def _check_retrained_when_hyperparameters_changed(out: Path) -> None:
    """A run trained with other hyperparameters than the study would use now (the tuned
    defaults changed since): --resume retrains it and redoes all its rows."""
    meta = out / "runs" / "dqn-CartPole-v1-s0" / "run.json"
    info = json.loads(meta.read_text())
    lr = info["hyperparameters"]["learning_rate"]
    info["hyperparameters"]["learning_rate"] = 0.5
    del info["hyperparameters"]["n_step"]   # a field the run predates counts as its default
    meta.write_text(json.dumps(info))
    p = _smoke_study(out, "--resume", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (f"dqn CartPole-v1 seed 0: trained with other hyperparameters (learning_rate 0.5 -> "
            f"{lr!r}): retrained, its rows redone") in p.stdout
    assert "0 done, 1 runs to do" in p.stdout
    rows = read_results(out / "results.jsonl")
    assert len(rows) == 20 and {row_key(r) for r in rows[10:]} == {row_key(r) for r in rows[:10]}
    assert json.loads(meta.read_text())["hyperparameters"]["learning_rate"] == lr
    assert rows[10]["hyperparameters"]["learning_rate"] == lr and rows[10]["cached"] is False


def _check_redo(out: Path) -> None:
    """--redo ALGO/ENV makes a task's rows again from its trained run (evaluation changed)."""
    p = _smoke_study(out, "--resume", "--redo", "dqn/CartPole-v1", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "redo: the rows of dqn/CartPole-v1 are made again" in p.stdout
    rows = read_results(out / "results.jsonl")
    assert len(rows) == 30 and rows[20]["kind"] == "run" and rows[20]["cached"] is True
    assert rows[20]["fp32_return"] == rows[10]["fp32_return"]
    p = _smoke_study(out, "--resume", "--redo", "dqn/Pendulum-v1")
    assert p.returncode == 2 and "--redo dqn/Pendulum-v1: not a task (or task/sSEED run) of smoke" in p.stderr


@pytest.mark.long
def test_smoke_study_and_report_through_the_cli(tmp_path):
    out = tmp_path / "smoke"
    p = _smoke_study(out, "--json", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    assert summary["status"] == {"ok": 10} and summary["rows"] == 10
    cells = _check_smoke_rows(out)
    # the run is cached: resuming a finished study does nothing
    p = _smoke_study(out, "--resume")
    assert p.returncode == 0 and "10 done, 0 runs to do" in p.stdout
    assert len(read_results(out / "results.jsonl")) == 10
    # without --resume an existing results file is refused
    p = _smoke_study(out)
    assert p.returncode == 2 and "--resume" in p.stderr
    _check_smoke_report(out, cells)
    _check_retrained_when_hyperparameters_changed(out)
    _check_redo(out)


# ------------------------------------------------------------------------------ --status
STATUS_STUDY = GOOD.replace("seeds = [0]", "seeds = [0, 1, 2]") + """
[[task]]
algo = "ppo"
env = "CartPole-v1"
steps = 100
seeds = [0]
"""


def _row(kind, algo, seed, scheme=None, **cols):
    row = {"kind": kind, "study": "t", "algo": algo, "env": "CartPole-v1", "seed": seed,
           "status": "ok", **cols}
    return {**row, "scheme": scheme} if scheme else row


def test_status_counts_rows_and_runs_and_estimates_the_time_left(tmp_path):
    """study --status on a results file of known seconds: DQN seed 0 finished in 100 + 30 + 50
    worker seconds, seed 1 has its run and fp32 cell (130 s) done and an error, seed 2 nothing;
    PPO nothing. Left for DQN on 2 workers: ((180 - 130) + 180) / 2 = 115 s; PPO has no figure."""
    cfg = _write(tmp_path, STATUS_STUDY)
    out = tmp_path / "out"
    out.mkdir()
    rows = [_row("run", "dqn", 0, wall_seconds=100.0), _row("cell", "dqn", 0, "fp32", seconds=30.0),
            _row("cell", "dqn", 0, "int8", seconds=50.0),
            _row("run", "dqn", 1, wall_seconds=120.0), _row("cell", "dqn", 1, "fp32", seconds=10.0),
            _row("cell", "dqn", 1, "int8", status="error", reason="boom", seconds=7.0)]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(out), "--status", "--workers", "2",
                              "--json"], capture_output=True, text=True, env=ENV, cwd=ROOT,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)
    assert (st["rows"], st["rows_done"], st["runs"], st["runs_done"]) == (12, 5, 4, 1)
    assert st["running"] is False and st["unknown"] == ["ppo CartPole-v1"]
    dqn, ppo = st["tasks"]
    assert (dqn["runs_done"], dqn["rows_done"], dqn["errors"]) == (1, 5, 1)
    assert dqn["run_seconds"] == 180.0 and dqn["seconds_left"] == 50.0 + 180.0
    assert ppo["run_seconds"] is None and ppo["seconds_left"] is None
    assert st["seconds_left"] == 115.0
    # the table: a line per task, then the totals; nothing was run or written
    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(out), "--status", "--workers", "2"],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "dqn CartPole-v1" in p.stdout and "1/3" in p.stdout and "5/9" in p.stdout
    assert "5 of 12 rows, 1 of 4 runs done" in p.stdout
    assert "about 2 min" in p.stdout and "1 task(s) without a finished run" in p.stdout
    assert len(read_results(out / "results.jsonl")) == len(rows) and not (out / "runs").exists()
    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(out), "--status", "--resume"],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and "--status runs nothing: drop --resume" in p.stderr


# ------------------------------------------------------------------- kill -9 mid-grid, resume
KILL_STUDY = """
[study]
name = "killme"
seeds = [0, 1]
schemes = ["fp32", "dyn-int8", "int8"]
episodes = 3
calib_size = 100

[[task]]
algo = "dqn"
env = "CartPole-v1"
steps = 800
""" + TINY_DQN + """
[[task]]
algo = "ppo"
env = "CartPole-v1"
steps = 256
seeds = [0]
schemes = ["fp32", "int8", "qat-int8"]
[task.options]
collect_steps = 128
epochs = 1
eval_episodes = 1
hidden = [8, 8]
"""


def _children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.long
def test_sigkill_mid_grid_then_resume_loses_and_repeats_nothing(tmp_path):
    cfg = _write(tmp_path, KILL_STUDY)
    out = tmp_path / "out"
    results = out / "results.jsonl"
    expected = {k for g in plan(load_study(cfg)) for k in g.keys}
    assert len(expected) == 2 * 4 + 4

    proc = subprocess.Popen(CLI + ["study", str(cfg), "--out", str(out), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=ROOT)
    children: set[int] = set()
    deadline = time.time() + 180
    try:
        while time.time() < deadline:
            children |= _children(proc.pid)
            n = len(read_results(results)) if results.is_file() else 0
            if n >= 2:
                # --status reads the grid while it runs, and sees the study's lock
                st = study_status(cfg, out=out, workers=2)
                assert st.running and st.rows == len(expected) and st.rows_done >= 2
                break
            assert proc.poll() is None, "the study finished or failed before it could be killed"
            time.sleep(0.05)
        else:
            pytest.fail("no rows within 180 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = results.read_text()
    rows_before = read_results(results)
    assert 2 <= len(rows_before) < len(expected), "the kill should land mid-grid"
    # the workers die with the main process (PR_SET_PDEATHSIG): nothing writes behind our back
    deadline = time.time() + 10
    while any(_alive(c) for c in children) and time.time() < deadline:
        time.sleep(0.1)
    assert children and not any(_alive(c) for c in children)
    assert results.read_text() == before
    # a write cut by the kill: an unterminated last line is dropped on resume
    with results.open("a") as f:
        f.write('{"kind": "cell", "study": "killme", "algo": "dq')
    st = study_status(cfg, out=out, workers=2)
    assert not st.running and st.rows_done == len({row_key(r) for r in rows_before})
    assert st.runs_done < st.runs == 3
    finished_runs = {(r["algo"], r["env"], r["seed"]) for r in rows_before if r["kind"] == "run"}
    mtimes = {k: (out / "runs" / f"{k[0]}-{k[1]}-s{k[2]}" / "run.json").stat().st_mtime_ns
              for k in finished_runs}

    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(out), "--workers", "2", "--resume",
                              "--json"], capture_output=True, text=True, env=ENV, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["status"] == {"ok": 11, "skipped": 1}
    st = study_status(cfg, out=out)
    assert (st.rows_done, st.runs_done, st.seconds_left, st.unknown) == (12, 3, 0, [])
    assert all(t.run_seconds > 0 for t in st.tasks)
    text = results.read_text()
    assert text.startswith(before) and text.endswith("\n")
    rows = read_results(results)
    keys = [row_key(r) for r in rows]
    assert len(keys) == len(set(keys)), "a finished row was repeated"
    assert set(keys) == expected, "a row is missing"
    assert rows[:len(rows_before)] == rows_before
    for k, mtime in mtimes.items():  # finished trainings were reused, not redone
        assert (out / "runs" / f"{k[0]}-{k[1]}-s{k[2]}" / "run.json").stat().st_mtime_ns == mtime
    by_key = {row_key(r): r for r in rows}
    qat = by_key[("cell", "ppo", "CartPole-v1", 0, "qat-int8")]
    assert qat["status"] == "skipped" and "dqn only" in qat["reason"]
    # discrete PPO exports logits: KL between the fp32 and quantized action distributions
    fp32 = by_key[("cell", "ppo", "CartPole-v1", 0, "fp32")]
    int8 = by_key[("cell", "ppo", "CartPole-v1", 0, "int8")]
    assert fp32["kl"] == pytest.approx(0.0, abs=1e-9) and int8["kl"] >= 0.0
    assert by_key[("run", "ppo", "CartPole-v1", 0)]["output"] == "logits"
    assert by_key[("cell", "dqn", "CartPole-v1", 1, "int8")]["kl"] is None


# ------------------------------------------------------------------------------ board cells
def test_boards_in_a_study_are_checked_and_planned(tmp_path):
    bad = GOOD.replace("episodes = 3", 'episodes = 3\nboards = ["host", "no-such-board"]')
    with pytest.raises(QuarlError, match=r"\[study\]: 'boards': unknown board 'no-such-board'"):
        load_study(_write(tmp_path, bad))
    bad = GOOD.replace("episodes = 3", 'episodes = 3\nboards = ["host", "host"]')
    with pytest.raises(QuarlError, match="a board is listed twice"):
        load_study(_write(tmp_path, bad))
    bad = GOOD.replace("episodes = 3", "episodes = 3\nboards = \"host\"")
    with pytest.raises(QuarlError, match="'boards' must be list"):
        load_study(_write(tmp_path, bad))
    bad = GOOD.replace("episodes = 3", 'episodes = 3\nboards = ["host"]\nboard_episodes = 4')
    with pytest.raises(QuarlError, match="board_episodes = 4 but there are only 3"):
        load_study(_write(tmp_path, bad))
    ok = GOOD.replace("episodes = 3", 'episodes = 3\nboards = ["host", "mps2-an386"]\n'
                                      "board_episodes = 2\nbench_n = 7")
    (g,) = plan(load_study(_write(tmp_path, ok)))
    assert g.keys[3:-2] == [("board", "dqn", "CartPole-v1", 0, s, b)
                            for s in ("fp32", "int8") for b in ("host", "mps2-an386")]
    # and the per-op cells of the grid's one MLP policy on its exactly counting board
    assert g.keys[-2:] == [("perop", "dqn", "CartPole-v1", 0, s, "mps2-an386")
                           for s in ("fp32", "int8")]
    assert g.board_seeds == [0, 1] and g.task.bench_n == 7
    assert row_key({"kind": "board", "algo": "dqn", "env": "E", "seed": 0, "scheme": "int8",
                    "board": "host"}) == ("board", "dqn", "E", 0, "int8", "host")
    p = subprocess.run(CLI + ["study", str(_write(tmp_path, GOOD.replace(
        "episodes = 3", 'episodes = 3\nboards = ["nope"]'))), "--out", str(tmp_path / "o")],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "unknown board 'nope'" in p.stderr


@pytest.mark.long
def test_board_cells_locally_resume_and_a_board_too_small_is_a_row(tmp_path, monkeypatch):
    """The study's board cells in one process (no Ray) on the host board and on a board file
    whose flash is too small for the firmware: a "does-not-fit" row with the numbers; resuming
    repeats nothing."""
    from helpers_models import cached_example_study
    boards_dir = tmp_path / "boards"
    boards_dir.mkdir()
    host = (ROOT / "boards" / "host.toml").read_text()
    (boards_dir / "host-tiny.toml").write_text(
        host.replace('id = "host"', 'id = "host-tiny"').replace("flash_bytes = 0", "flash_bytes = 16384"))
    monkeypatch.setenv("QUARL_EDGE_BOARDS", str(boards_dir))
    out = tmp_path / "out"
    cfg = cached_example_study(out, ["host", "host-tiny"], name="local")
    env = {**ENV, "QUARL_EDGE_BOARDS": str(boards_dir)}
    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(out), "--json"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["status"] == {"ok": 7, "does-not-fit": 3}
    rows = read_results(out / "results.jsonl")
    by = {row_key(r): r for r in rows}
    tiny = by[("board", "dqn", "CartPole-v1", 0, "int8", "host-tiny")]
    assert tiny["status"] == "does-not-fit" and tiny["board_flash_bytes"] == 16384
    assert tiny["needs_flash_bytes"] > 16384 and tiny["arena_bytes"] > 0
    assert "needs" in tiny["reason"] and "16384 B" in tiny["reason"]
    ok = by[("board", "dqn", "CartPole-v1", 0, "int8", "host")]
    assert ok["status"] == "ok" and ok["node"] is None and ok["pid"] > 0
    assert ok["flash_bytes"] > 16384 and ok["validate"]["bit_exact"] is True
    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(out), "--resume"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 0 and "10 done, 0 runs to do" in p.stdout, p.stdout + p.stderr
    assert len(read_results(out / "results.jsonl")) == len(rows)


@pytest.mark.long
def test_a_board_cell_makes_its_model_when_the_cell_came_before(tmp_path):
    """A board added to a study, or a run trained again on --resume, meets board cells whose
    scheme cell was done in an earlier run: the board cell quantizes the model as the cell
    would (here int8x4: packed int4 weights), not an error row "no int8x4 model"."""
    from helpers_models import cached_example_study
    from quarl_edge.study.cells import run_board_cell
    out = tmp_path / "out"
    cfg = cached_example_study(out, ["host"], name="added", schemes=["int8x4"])
    (g,) = plan(load_study(cfg))
    model = out / "runs" / "dqn-CartPole-v1-s0" / "models" / "int8x4.tflite"
    assert not model.exists()
    row = run_board_cell(g, "int8x4", "host", out)
    assert row["status"] == "ok", row
    assert model.is_file() and row["model_bytes"] == model.stat().st_size
    assert row["bit_exact"] is True and row["matches_reference"] is True


def test_a_retrained_run_that_is_not_the_recorded_policy_is_said(tmp_path):
    """A run trained again while its run row was done (its directory gone): the same policy is
    silent; another one (training that is not deterministic) is said, with the --redo to run."""
    from helpers_models import EXAMPLE_RUN, cached_example_study
    from quarl_edge.core.nets import weighted_layers
    from quarl_edge.core.run import load_keras, load_run
    from quarl_edge.study.analysis import weight_stats
    from quarl_edge.study.cells import _check_retrained, _Run
    from quarl_edge.study.results import jsonable
    out = tmp_path / "out"
    cfg = cached_example_study(out, ["host"], name="again", schemes=["int8"])
    (g,) = plan(load_study(cfg))
    info = load_run(EXAMPLE_RUN)
    stats = weight_stats(weighted_layers(load_keras(EXAMPLE_RUN)))
    run = _Run(EXAMPLE_RUN, False, info, 0.0, [], None, True, False, None, [], None, stats)
    row = {"kind": "run", "study": "again", "algo": "dqn", "env": "CartPole-v1", "seed": 0,
           "status": "ok", "best_validation_return": info["best_greedy_return"],
           "weights": jsonable(stats)}
    for recorded, said in ((row, []), ({**row, "best_validation_return": -1.0}, [1])):
        (out / "results.jsonl").write_text(json.dumps(recorded) + "\n")
        lines = []
        _check_retrained(g, run, out, lines.append)
        assert len(lines) == len(said), lines
    assert "not the recorded policy" in lines[0] and "--redo dqn/CartPole-v1/s0" in lines[0]


def test_redo_names_a_task_or_one_run_of_it(tmp_path):
    """--redo ALGO/ENV forgets every row of the task, ALGO/ENV/sSEED those of one run."""
    from quarl_edge.study.grid import forget_rows
    cfg = _write(tmp_path, GOOD.replace("seeds = [0]", "seeds = [0, 1]"))
    groups = plan(load_study(cfg))
    every = {tuple(k): {} for g in groups for k in g.keys}
    for redo, left in ((["dqn/CartPole-v1"], set()), (["dqn/CartPole-v1/s1"], {0})):
        done = dict(every)
        forget_rows(groups, tmp_path, done, redo, lambda s: None)
        assert {k[3] for k in done} == left
    p = subprocess.run(CLI + ["study", str(cfg), "--out", str(tmp_path / "o"), "--resume",
                              "--redo", "dqn/CartPole-v1/s7"],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and "--redo dqn/CartPole-v1/s7: not a task (or task/sSEED run)" \
        in p.stderr


# ------------------------------------------------------------------------------ per-op cells
PEROP_STUDY = """
[study]
name = "families"
seeds = [3, 4]
schemes = ["fp32", "int8", "int16x8"]
episodes = 3
boards = ["host", "lm3s6965evb", "mps2-an386"]
[[task]]
algo = "ppo"
env = "CartPole-v1"
steps = 100
boards = ["host"]
[[task]]
algo = "dqn"
env = "CartPole-v1"
steps = 100
[[task]]
algo = "dqn"
env = "Acrobot-v1"
steps = 100
[[task]]
algo = "dqn"
env = "QuarlEdge/MinAtar-Breakout-v0"
steps = 100
schemes = ["int16x8", "int8"]
boards = ["atmega328p", "mps2-an386"]
[[task]]
algo = "ppo"
env = "QuarlEdge/CartPoleNoVel-v0"
steps = 100
schemes = ["int16x8"]
"""


def test_per_op_cells_are_planned_once_per_network_family(tmp_path):
    """One policy per family (MLP, CNN, LSTM): the first task with an exactly counting
    emulated board and fp32 or int8 among its schemes, its first seed, its first such board;
    the keys come last in that run's group and nowhere else."""
    from quarl_edge.study.plan import family, perop_plan
    study = load_study(_write(tmp_path, PEROP_STUDY))
    assert [family(t) for t in study.tasks] == ["mlp", "mlp", "mlp", "cnn", "lstm"]
    # ppo CartPole has only the host (wall clock): the MLP is DQN CartPole's, on lm3s6965evb
    # (the first emulated board of the list); the CNN's only int8 (no fp32 in its schemes) on
    # atmega328p (simavr's cycles); the LSTM task has neither fp32 nor int8: no LSTM cell
    assert perop_plan(study) == {
        ("dqn", "CartPole-v1", 3): ("mlp", "lm3s6965evb", ["fp32", "int8"]),
        ("dqn", "QuarlEdge/MinAtar-Breakout-v0", 3): ("cnn", "atmega328p", ["int8"])}
    keys = {(g.algo, g.env, g.seed): g.keys for g in plan(study)}
    perop = [k for ks in keys.values() for k in ks if k[0] == "perop"]
    assert perop == [("perop", "dqn", "CartPole-v1", 3, "fp32", "lm3s6965evb"),
                     ("perop", "dqn", "CartPole-v1", 3, "int8", "lm3s6965evb"),
                     ("perop", "dqn", "QuarlEdge/MinAtar-Breakout-v0", 3, "int8", "atmega328p")]
    assert keys[("dqn", "CartPole-v1", 3)][-2:] == perop[:2]
    assert row_key({"kind": "perop", "algo": "dqn", "env": "E", "seed": 0, "scheme": "int8",
                    "board": "b", "ops": []}) == ("perop", "dqn", "E", 0, "int8", "b")
    # a grid without an exactly counting emulated board has no per-op cell
    host_only = load_study(_write(tmp_path, GOOD.replace("episodes = 3",
                                                         'episodes = 3\nboards = ["host"]')))
    assert perop_plan(host_only) == {} and all(k[0] != "perop" for g in plan(host_only)
                                               for k in g.keys)


def _study_cli(cfg: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + ["study", str(cfg), "--out", str(out), *args],
                          capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)


@pytest.mark.long
def test_per_op_cells_in_a_study_resume_and_the_report_draws_them(tmp_path):
    """A real study (the example run, host + mps2-an386, fp32 and int8): two per-op rows whose
    ops add up to the whole inference; --status counts them; a results file made before
    per-op cells gets them on --resume (the run not retrained) and a second --resume makes
    nothing; the report draws perop.png and its table from the rows, and the same results
    without per-op rows report with neither."""
    from helpers_models import cached_example_study
    out = tmp_path / "out"
    cfg = cached_example_study(out, ["host", "mps2-an386"], name="perop",
                               schemes=("fp32", "int8"))
    p = _study_cli(cfg, out, "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["status"] == {"ok": 9}
    rows = read_results(out / "results.jsonl")
    perop = {r["scheme"]: r for r in rows if r["kind"] == "perop"}
    assert list(perop) == ["fp32", "int8"] and [r["kind"] for r in rows[-2:]] == ["perop"] * 2
    for r in perop.values():
        assert r["board"] == "mps2-an386" and r["family"] == "mlp" and r["unit"] == "instructions"
        assert r["status"] == "ok" and r["runs"] == 20 and r["noise"] == 0
        assert sum(op["cost"] for op in r["ops"]) == r["sum"] and r["ops"][-1]["type"] == "(return)"
        assert r["gap"] == r["sum"] - (r["whole"] - r["overhead"]) and r["within"] is True
        assert abs(r["gap"]) <= r["tolerance"] == (len(r["ops"]) * r["overhead"])
        assert sum(op["share"] for op in r["ops"]) == pytest.approx(1.0)
        fc = [op for op in r["ops"] if op["type"] == "FULLY_CONNECTED"]
        assert [op["macs"] for op in fc] == [4 * 64, 64 * 64, 64 * 2]
    board = {r["scheme"]: r for r in rows if r["kind"] == "board" and r["board"] == "mps2-an386"}
    # the per-op build's whole inference is the board cell's BENCH on the same observation
    assert perop["int8"]["whole"] == board["int8"]["cost_min"]
    assert {op["type"] for op in perop["int8"]["ops"]} >= {"QUANTIZE", "DEQUANTIZE"}
    status = json.loads(_study_cli(cfg, out, "--status", "--json").stdout)
    assert (status["rows"], status["rows_done"]) == (9, 9)

    # results made before the study had per-op cells: --resume makes only them
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(x for x in lines if '"kind": "perop"' not in x))
    status = json.loads(_study_cli(cfg, out, "--status", "--json").stdout)
    assert (status["rows"], status["rows_done"], status["runs_done"]) == (9, 7, 0)
    p = _study_cli(cfg, out, "--resume")
    assert p.returncode == 0 and "7 done, 1 runs to do" in p.stdout, p.stdout + p.stderr
    assert "train dqn" not in p.stdout and "per-op int8 on mps2-an386: 5 ops" in p.stdout
    again = read_results(out / "results.jsonl")
    assert [r["kind"] for r in again[7:]] == ["perop", "perop"] and len(again) == 9
    p = _study_cli(cfg, out, "--resume")
    assert p.returncode == 0 and "9 done, 0 runs to do" in p.stdout, p.stdout + p.stderr
    assert len(read_results(out / "results.jsonl")) == 9

    # the report: the figure and the table, numbers from the rows
    rep = subprocess.run(CLI + ["report", str(out / "results.jsonl"), "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Per-op cost" in md and "![per-op cost per policy and scheme](perop.png)" in md
    assert (tmp_path / "r" / "perop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    int8 = again[-1]
    fc_cost = sum(op["cost"] for op in int8["ops"] if op["type"] == "FULLY_CONNECTED")
    fc_share = sum(op["share"] for op in int8["ops"] if op["type"] == "FULLY_CONNECTED")
    assert (f"| MLP: DQN CartPole-v1 seed 0 on mps2-an386 | int8 | FULLY_CONNECTED | 3 | 4,480 | "
            f"{fc_cost:,} instructions | {100 * fc_share:.1f} % |") in md
    assert f"5 ops sum to {int8['sum']:,} instructions" in md
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<h2>Per-op cost</h2>" in page and page.count('src="data:image/png;base64,') >= 6
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.jsonl").write_text("".join(
        x for x in lines if '"kind": "perop"' not in x))
    rep = subprocess.run(CLI + ["report", str(tmp_path / "old" / "results.jsonl")],
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert "Per-op" not in (tmp_path / "old" / "report.md").read_text()
    assert not (tmp_path / "old" / "perop.png").exists()
