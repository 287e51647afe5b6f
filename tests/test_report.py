"""The report: verdicts on QuaRL's claims are computed from the rows (agree, disagree, partly,
insufficient data), duplicates resolve to the last row, figures are real PNGs, the HTML is
self-contained. Synthetic results here; the smoke study's real ones in test_study.py."""
from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from quarl_edge.errors import QuarlError
from quarl_edge.study.claims import claims
from quarl_edge.study.report import write_report
from quarl_edge.study.results import Results, latest_rows, read_results
from quarl_edge.study.statistics import normalised_loss, reward_threshold, spearman


def _run(algo, env, seed, fp32, rnd, wrange, eval_seeds=(0, 1, 2)):
    stats = {"n": 10, "min": -wrange / 2, "max": wrange / 2, "range": wrange, "std": wrange / 6,
             "kurtosis": 0.5, "abs_max": wrange / 2}
    return {"kind": "run", "study": "synthetic", "algo": algo, "env": env, "seed": seed,
            "status": "ok", "steps": 1000, "train_seconds": 1.0, "best_validation_return": fp32,
            "eval_seeds": list(eval_seeds), "fp32_return": fp32, "random_return": rnd,
            "weights": {"layers": [{"layer": 0, "shape": [4, 2], **stats}], "all": stats},
            "weight_quantiles": list(np.linspace(-wrange / 2, wrange / 2, 101)),
            "output": "q_values"}


def _cell(algo, env, seed, scheme, ret, fp32, size=1000, kl=None, eval_seeds=(0, 1, 2)):
    return {"kind": "cell", "study": "synthetic", "algo": algo, "env": env, "seed": seed,
            "scheme": scheme, "status": "ok", "mean_return": ret, "std_return": 0.0,
            "returns": [ret] * 3, "fp32_return": fp32, "agreement": 0.9, "ties": 0.0, "kl": kl,
            "size_bytes": size, "eval_seeds": list(eval_seeds)}


def _sweep(algo, env, seed, mode, bits, ret):
    return {"kind": "sweep", "study": "synthetic", "algo": algo, "env": env, "seed": seed,
            "status": "ok", "mode": mode, "bits": bits, "mean_return": ret, "std_return": 0.0,
            "agreement": 1.0 if mode == "fp32" else 0.8, "eval_seeds": [0, 1, 2]}


def _grid(loss_of_range, qat_delta, sweep_loss=0.0):
    """6 DQN runs (fp32 200, random 0), weight ranges 1..6, int8 loss = loss_of_range(range),
    qat-int8 = int8 + qat_delta, a sweep with 6..8 bits losing `sweep_loss` of the gain."""
    rows = []
    for i, env in enumerate(["CartPole-v1", "Acrobot-v1"]):
        for seed in range(3):
            wrange = 1.0 + 3 * i + seed
            rows.append(_run("dqn", env, seed, 200.0, 0.0, wrange))
            rows.append(_cell("dqn", env, seed, "fp32", 200.0, 200.0, size=20_000))
            int8 = 200.0 * (1 - loss_of_range(wrange))
            rows.append(_cell("dqn", env, seed, "int8", int8, 200.0, size=7_000))
            rows.append(_cell("dqn", env, seed, "qat-int8", int8 + qat_delta, 200.0, size=7_000))
            rows.append(_sweep("dqn", env, seed, "fp32", 32, 200.0))
            for b in (2, 6, 7, 8):
                rows.append(_sweep("dqn", env, seed, "weights+activations", b,
                                   10.0 if b == 2 else 200.0 * (1 - sweep_loss)))
    return rows


def _verdicts(rows, tol=0.05):
    return {c["claim"]: c["verdict"] for c in claims(Results(rows), tol)}


C1, C2, C3 = ("6-8 bit policies lose no reward", "QAT >= PTQ (and often >= fp32)",
              "wider weight distributions quantize worse")


def test_claims_agree():
    rows = _grid(lambda r: 0.004 * r, qat_delta=+1.0)  # int8 loss 0.4 %..2.4 %, grows with range
    v = _verdicts(rows)
    assert v == {C1: "agree", C2: "agree", C3: "agree"}
    cl = {c["claim"]: c for c in claims(Results(rows), 0.05)}
    assert cl[C1]["n"] == 6 * 2 + 6 * 3  # int8 + qat-int8 cells, 6/7/8-bit sweep points
    assert cl[C1]["evidence"][0].startswith("Mean loss +0.5 %, 95 % CI [")
    assert "n = 6 training seed(s) over 2 tasks (3 per task), 3 episodes per seed -> agree" \
        in cl[C1]["evidence"][0]
    assert "30 of 30 policies at 6-8 bits are within 5%" in cl[C1]["evidence"][1]
    assert "6 of 6 runs" in cl[C2]["evidence"][1] and "strictly better in 6" in cl[C2]["evidence"][1]
    assert "Spearman rho = +1.00" in cl[C3]["evidence"][0] and "-> agree" in cl[C3]["evidence"][0]


def test_claims_disagree():
    rows = _grid(lambda r: 0.5 - 0.05 * r, qat_delta=-40.0, sweep_loss=0.3)  # wider: less loss
    v = _verdicts(rows)
    assert v[C1] == "disagree" and v[C2] == "disagree"
    assert v[C3] == "disagree"  # the sweep's loss is constant here: insufficient on its own
    cl = {c["claim"]: c for c in claims(Results(rows), 0.05)}
    assert "Spearman rho = -1.00" in cl[C3]["evidence"][0]


def test_verdicts_are_decided_by_the_interval_not_by_a_count():
    # per seed, mean loss of int8, qat-int8 (= int8) and three sweep points (0):
    # 2/5 of the int8 loss, CartPole 1.6 %, Acrobot 3.2 %: no seed-to-seed spread
    rows = _grid(lambda r: 0.04 if r < 4 else 0.08, qat_delta=0.0)
    c1 = {c["claim"]: c for c in claims(Results(rows), 0.05)}[C1]
    assert c1["effect"] == pytest.approx(0.024) and c1["ci"] == pytest.approx([0.024, 0.024])
    assert "3 of 6" not in c1["verdict"] and c1["verdict"] == "agree"  # 24 of 30 within 5 %
    assert _verdicts(rows, 0.02)[C1] == "disagree"       # the whole interval above 2 %
    assert _verdicts(rows)[C2] == "agree"                # equal counts as >= PTQ
    # a seed-to-seed spread that straddles the tolerance: per seed CartPole 3/4/5 %,
    # Acrobot 6/7/8 %: pooled 5.5 % with an interval across 5 %
    rows = _grid(lambda r: 0.025 * (r - 1), qat_delta=0.0, sweep_loss=0.05)
    c1 = {c["claim"]: c for c in claims(Results(rows), 0.05)}[C1]
    assert c1["effect"] == pytest.approx(0.055)
    assert c1["ci"][0] < 0.05 < c1["ci"][1] and c1["verdict"] == "inconclusive"
    assert {t["task"]: t["verdict"] for t in c1["per_task"]} == {
        "DQN Acrobot-v1": "disagree", "DQN CartPole-v1": "inconclusive"}
    assert [t["n_seeds"] for t in c1["per_task"]] == [3, 3] and c1["n_seeds"] == 6


def test_qat_verdict_each_outcome_from_constructed_rows():
    def with_qat(deltas):   # qat-int8 = int8 + deltas[seed] (the gain is 200)
        rows = _grid(lambda r: 0.01, qat_delta=0.0)
        return [dict(r, mean_return=r["mean_return"] + deltas[r["seed"]])
                if r.get("scheme") == "qat-int8" else r for r in rows]
    assert _verdicts(with_qat([2.0, 4.0, 6.0]))[C2] == "agree"
    assert _verdicts(with_qat([-30.0, -40.0, -50.0]))[C2] == "disagree"   # -15..-25 % of the gain
    c2 = {c["claim"]: c for c in claims(Results(with_qat([0.0, -10.0, -20.0])), 0.05)}[C2]
    assert c2["effect"] == pytest.approx(-0.05)                 # 0, -5, -10 %: mean on -5 %
    assert c2["ci"][0] < -0.05 < c2["ci"][1] and c2["verdict"] == "inconclusive"
    assert c2["test"] == "paired bootstrap of the mean difference over training seeds"


def test_weight_range_verdict_inconclusive_when_the_interval_holds_zero():
    loss = {1: 0.02, 2: 0.01, 3: 0.03, 4: 0.01, 5: 0.03, 6: 0.02}
    c3 = {c["claim"]: c for c in claims(Results(_grid(lambda r: loss[r], 0.0)), 0.05)}[C3]
    assert c3["ci"][0] < 0 < c3["ci"][1] and c3["verdict"] == "inconclusive"
    assert c3["comparisons"][0]["comparison"] == "int8 loss"


def test_one_seed_has_no_interval_and_is_inconclusive_by_rule(tmp_path):
    rows = [r for r in _grid(lambda r: 0.004 * r, qat_delta=+1.0) if r["seed"] == 0]
    found = {c["claim"]: c for c in claims(Results(rows), 0.05)}
    for c in (found[C1], found[C2]):
        assert c["ci"] is None and c["verdict"] == "inconclusive" and c["n_seeds"] == 2
        assert c["ci_note"] == "one training seed in a task: no interval"
    assert found[C3]["verdict"] == "insufficient data"   # 2 runs: fewer than 4
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = write_report(path, tmp_path / "rep")["markdown"].read_text()
    assert "no interval (one training seed in a task: no interval)" in md


def test_insufficient_data_and_not_learned_runs():
    rows = _grid(lambda r: 0.0, qat_delta=0.0)
    v = _verdicts(rows)
    assert v[C3] == "insufficient data"  # no variation in the loss
    # runs that did not beat a random policy are left out of every claim
    unlearned = [dict(r, random_return=300.0) if r["kind"] == "run" else r for r in rows]
    assert set(_verdicts(unlearned).values()) == {"insufficient data"}
    only_fp32 = [r for r in rows if r["kind"] == "run" or r.get("scheme") == "fp32"]
    assert set(_verdicts(only_fp32).values()) == {"insufficient data"}


def test_claim2_counts_rl_loop_and_distillation_qat_separately():
    rows = _grid(lambda r: 0.02, qat_delta=+1.0)  # RL-loop QAT (qat-int8) >= int8 in 6 of 6
    for i, env in enumerate(["CartPole-v1", "Acrobot-v1"]):  # distillation: Acrobot 20 % worse
        for seed in range(3):
            rows.append(_cell("dqn", env, seed, "qat-distill-int8", 196.0 - 40 * i, 200.0))
    for seed in range(3):  # an actor-critic task: distillation only, qat-int8 skipped
        rows.append(_run("sac", "Pendulum-v1", seed, -150.0, -1200.0, 1.0))
        rows.append(_cell("sac", "Pendulum-v1", seed, "int8", -160.0, -150.0))
        rows.append(_cell("sac", "Pendulum-v1", seed, "qat-distill-int8", -155.0, -150.0))
        rows.append({"kind": "cell", "study": "synthetic", "algo": "sac", "env": "Pendulum-v1",
                     "seed": seed, "scheme": "qat-int8", "status": "skipped",
                     "reason": "qat-int8 fine-tunes in the RL loop of dqn only"})
    c2 = {c["claim"]: c for c in claims(Results(rows), 0.05)}[C2]
    assert c2["verdict"] == "agree" and c2["n"] == 6 and c2["method"] == "qat-int8"
    # distillation - int8: CartPole 0, Acrobot -20 %, Pendulum +0.5 % of the gain, equal over seeds
    assert c2["by_method"] == {
        "qat-int8": {"n": 6, "ok": 6, "verdict": "agree", "effect": pytest.approx(0.005),
                     "ci": pytest.approx([0.005, 0.005])},
        "qat-distill-int8": {"n": 9, "ok": 6, "verdict": "disagree",
                             "effect": pytest.approx((0 - 0.20 + 5 / 1050) / 3),
                             "ci": pytest.approx([(0 - 0.20 + 5 / 1050) / 3] * 2)}}
    ev = " ".join(c2["evidence"])
    assert "RL-loop QAT: qat-int8 is at least as good as int8 (within 5%) in 6 of 6 runs" in ev
    assert "counted separately: qat-distill-int8 is at least as good as int8 (within 5%) in 6 " \
           "of 9 runs; strictly better in 3" in ev
    assert "Verdict on distillation QAT alone: disagree; the claim's verdict is RL-loop " \
           "QAT's." in ev
    assert "Where both methods ran (6 runs), qat-distill-int8 >= qat-int8 in 0." in ev
    # without RL-loop QAT cells the verdict is the distillation method's, and says so
    only = [r for r in rows if r.get("scheme") != "qat-int8" or r.get("status") == "skipped"]
    c2 = {c["claim"]: c for c in claims(Results(only), 0.05)}[C2]
    assert c2["verdict"] == "disagree" and c2["n"] == 9 and c2["n_seeds"] == 9
    assert c2["method"] == "qat-distill-int8"
    assert c2["evidence"][1].startswith("No learned run has both qat-int8 and int8 cells (3 "
                                        "qat-int8 cells skipped")
    assert "with no RL-loop QAT pair, it is the claim's verdict" in " ".join(c2["evidence"])


def test_normalised_loss_and_spearman():
    assert normalised_loss(200.0, 180.0, 20.0) == pytest.approx(20 / 180)
    assert normalised_loss(-150.0, -165.0, -1200.0) == pytest.approx(15 / 1050)  # Pendulum
    assert normalised_loss(10.0, 5.0, 20.0) is None  # fp32 no better than random
    assert spearman([1, 2, 3, 4], [1, 2, 2, 5]) > 0.9
    assert spearman([1, 2, 3], [5, 5, 5]) is None


def test_report_files_last_row_wins_and_self_contained_html(tmp_path):
    rows = _grid(lambda r: 0.004 * r, qat_delta=+1.0)
    err = {**rows[2], "status": "error", "reason": "boom", "mean_return": None}
    path = tmp_path / "results.jsonl"
    # an error for int8 of the first run, then its successful retry: the retry is used
    path.write_text("".join(json.dumps(r) + "\n" for r in [err] + rows) + '{"kind": "ce')
    out = write_report(path, tmp_path / "rep")
    md = out["markdown"].read_text()
    assert "boom" not in md and "Skipped and failed" not in md
    assert "| DQN CartPole-v1 | int8 | 3 |" in md
    # every table of means says n: seeds per row, episodes per seed in the header
    assert "| task | scheme | seeds (n) | return (mean ± std over seeds; 3 episodes per seed) |" in md
    assert "| seeds (n) | return (mean over seeds; 3 episodes per seed) |" in md
    # the synthetic runs return 200: below CartPole's 475, above Acrobot's -100
    below = next(line for line in md.splitlines() if line.startswith("Below Gymnasium"))
    assert "DQN CartPole-v1 seed 0 (200.0 < 475.0)" in below and "Acrobot" not in below
    assert len(out["figures"]) == 4
    for f in out["figures"]:
        assert f.read_bytes()[:4] == b"\x89PNG" and f.parent == tmp_path / "rep"
    page = out["html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http" not in page.replace('charset="utf-8"', "")
    assert json.loads(out["claims"].read_text())[0]["verdict"] == "agree"
    with pytest.raises(QuarlError, match="no results file"):
        write_report(tmp_path / "nope.jsonl")
    (tmp_path / "other.jsonl").write_text('{"kind": "bench"}\n')
    with pytest.raises(QuarlError, match="unknown kind 'bench'"):
        write_report(tmp_path / "other.jsonl")


def test_remedy_table_picks_the_winner_per_task(tmp_path):
    from quarl_edge.study.claims import remedy_table
    rows = []
    for seed in range(2):
        rows.append(_run("dqn", "Acrobot-v1", seed, -80.0, -500.0, 1.0))
        for scheme, ret, ties in (("int8", -120.0, 0.3), ("int8-centred", -130.0, 0.1),
                                  ("int8-acc", -85.0 - seed, 0.0), ("int8-i16head", -90.0, 0.0)):
            rows.append({**_cell("dqn", "Acrobot-v1", seed, scheme, ret, -80.0), "ties": ties})
        rows.append(_run("dqn", "CartPole-v1", seed, 500.0, 20.0, 1.0))
        for scheme in ("int8", "int8-acc"):
            rows.append(_cell("dqn", "CartPole-v1", seed, scheme, 500.0, 500.0))
        # a continuous task: its remedy cells are skipped, so it has no remedy row
        rows.append({**_run("sac", "Pendulum-v1", seed, -150.0, -1200.0, 1.0), "output": "action"})
        rows.append(_cell("sac", "Pendulum-v1", seed, "int8", -150.0, -150.0))
        rows.append({"kind": "cell", "study": "synthetic", "algo": "sac", "env": "Pendulum-v1",
                     "seed": seed, "scheme": "int8-acc", "status": "skipped",
                     "reason": "continuous actions"})
    table = {t["task"]: t for t in remedy_table(Results(rows))}
    assert list(table) == ["DQN Acrobot-v1", "DQN CartPole-v1"]
    acro = table["DQN Acrobot-v1"]
    assert acro["winner"] == "int8-acc"
    assert acro["schemes"]["int8-acc"]["mean_return"] == pytest.approx(-85.5)
    assert acro["schemes"]["int8"]["ties"] == pytest.approx(0.3)
    assert acro["schemes"]["int8-centred"]["loss"] == pytest.approx(50 / 420)
    assert table["DQN CartPole-v1"]["winner"] == "all equal"
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = write_report(path, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Tie remedies for argmax heads" in md
    assert "| DQN Acrobot-v1 | int8 | 0,1 | -120.0 ± 0.0 |" in md
    # remedies do not apply to continuous actions: said once, not listed per cell
    assert "| int8-acc | a tie remedy for argmax heads: discrete actions only " \
           "(quarl_edge/quant/remedies.py) | SAC Pendulum-v1 | 2 |" in md
    assert "| cell | SAC Pendulum-v1" not in md and "No other row was skipped or failed." in md
    assert json.loads(out["remedies"].read_text())[0]["winner"] == "int8-acc"


def test_reward_threshold_is_gymnasiums_solved_return():
    assert reward_threshold("CartPole-v1") == 475.0
    assert reward_threshold("MountainCarContinuous-v0") == 90.0
    assert reward_threshold("Pendulum-v1") is None        # registered without one
    assert reward_threshold("NoSuchEnv-v0") is None


# ------------------------------------------------------------ the committed classic results
CLASSIC = Path(__file__).resolve().parents[1] / "results" / "classic" / "results.jsonl"


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def classic(tmp_path_factory):
    """The committed classic grid's report, with one unexpected skip and one failed cell
    added (an int8 cell of a DQN run: int8 applies to every task)."""
    rows = [json.loads(line) for line in CLASSIC.read_text().splitlines() if line.strip()]
    extra = [{"kind": "cell", "study": "classic", "algo": "dqn", "env": "Acrobot-v1", "seed": 7,
              "scheme": "int8", "status": "skipped", "reason": "no run for seed 7"},
             {"kind": "cell", "study": "classic", "algo": "dqn", "env": "Acrobot-v1", "seed": 8,
              "scheme": "fp16", "status": "error", "reason": "converter crashed"}]
    path = tmp_path_factory.mktemp("classic") / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    out = write_report(path, path.parent / "report")
    return rows, out


def test_classic_report_figures_are_bounded_and_embedded(classic):
    _, out = classic
    assert {f.name for f in out["figures"]} == {"return_vs_precision.png", "return_vs_bits.png",
                                                "weight_histograms.png", "model_size.png"}
    for f in out["figures"]:
        width, height = _png_size(f)
        assert 300 < width <= 1600 and height <= 1600, (f.name, width, height)
    page = out["html"].read_text()
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) == 4 and all(s.startswith("data:image/png;base64,") for s in sources)
    for src, f in zip(sources, ("return_vs_precision", "return_vs_bits", "weight_histograms",
                                "model_size")):
        assert base64.b64decode(src.split(",", 1)[1]) == (out["html"].parent / f"{f}.png").read_bytes()
    assert "http" not in page.replace('charset="utf-8"', "") and "<script" not in page


def test_classic_report_claims_are_a_table_of_their_numbers(classic):
    rows, out = classic
    md = out["markdown"].read_text()
    found = json.loads(out["claims"].read_text())
    assert "| claim | our data | n | the numbers |" in md
    for c in found:
        n = f"{c['n']} ({c['n_seeds']} seeds × {c['episodes_per_seed']} episodes)"
        assert f"| {c['claim']} | **{c['verdict']}** | {n} | {c['summary']} |" in md
        assert f"Rule: {c['rule']}" in md and f"Test: {c['test']}." in md
        assert c["tables"] and all(t["rows"] for t in c["tables"])
    assert " ".join(found[0]["evidence"]) not in md            # no wall of text
    # claim 2's method table: the counts of by_method, from the rows
    c2 = found[1]
    rl = c2["by_method"]["qat-int8"]
    assert f"| qat-int8 (RL-loop QAT) | {rl['n']} | {rl['ok']} |" in md
    # claim 1's per-setting counts add up to n
    assert sum(int(r[1]) for r in found[0]["tables"][1]["rows"]) == found[0]["n"]
    # and its per-task interval table: a row per task, then the pooled row with n seeds
    pooled = found[0]["tables"][0]["rows"][-1]
    assert pooled[0] == "**pooled**" and pooled[1] == str(found[0]["n_seeds"])
    assert "percentile bootstrap, 4000 resamples of the training seeds" in md


def test_classic_report_lists_only_unexpected_skips(classic):
    rows, out = classic
    md = out["markdown"].read_text()
    section = md[md.index("## Skipped and failed"):]
    skipped = [r for r in latest_rows(rows).values() if r.get("status") == "skipped"]
    table = section[section.index("| schemes | why | not applicable to | cells |"):].split("\n\n")[0]
    lines = table.splitlines()[2:]
    assert [line.split(" | ")[0].lstrip("| ") for line in lines] == [
        "qat-int8", "int8-centred, int8-acc, int8-centred-acc, int8-i16head"]
    assert sum(int(line.rstrip(" |").rsplit("| ", 1)[1]) for line in lines) == len(skipped)
    assert "PPO CartPole-v1" in lines[0] and "PPO CartPole-v1" not in lines[1]  # discrete PPO
    # only the two rows added by the fixture are listed one by one
    listed = [line for line in section.splitlines() if line.startswith("| cell |")]
    assert listed == ["| cell | DQN Acrobot-v1 | 7 | int8 | skipped | no run for seed 7 |",
                      "| cell | DQN Acrobot-v1 | 8 | fp16 | error | converter crashed |"]


# ------------------------------------------------------------------------ board cells (real)
BOARDS_EXAMPLE = Path(__file__).resolve().parents[1] / "results" / "boards-example" / "results.jsonl"
# A real does-not-fit row: the example run's int8 model on a copy of the host board file with
# 16 KiB of flash (cells.run_board_cell; tests/test_study.py makes such rows end to end)
NO_FIT = {"kind": "board", "study": "boards-example", "algo": "dqn", "env": "CartPole-v1",
          "seed": 0, "scheme": "int8", "board": "host-tiny", "node": None, "host": "vm",
          "pid": 13520, "status": "does-not-fit",
          "reason": "firmware for host-tiny needs 40263 B of flash; the board has 16384 B",
          "board_flash_bytes": 16384, "board_ram_bytes": 0, "needs_flash_bytes": 40263,
          "arena_bytes": 128, "weight_bytes": 5000, "seconds": 12.48}


def test_board_tables_pareto_plots_and_the_int8_claim_from_real_rows(tmp_path):
    """The committed board study (the shipped example run on five boards) through the report:
    per task one scheme x board table, one Pareto plot per board embedded in the HTML, and the
    int8-vs-fp32 line per board whose numbers are the rows' own."""
    rows = read_results(BOARDS_EXAMPLE)
    boards = [r for r in rows if r["kind"] == "board" and r["status"] == "ok"]
    assert len({r["board"] for r in boards}) >= 4
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + [NO_FIT]))
    out = write_report(path, tmp_path / "rep")
    md = out["markdown"].read_text()
    section = md[md.index("## On the board"):]
    header = ("| board | scheme | seeds (n) × episodes | return (mean ± std) | normalised loss | agreement | "
              "= tflite-runtime (ref. kernels) | = tflite-runtime (optimized) | "
              "= TF Lite Micro | bit-exact | cost / inference | "
              "µs / inference | flash (B) | "
              "RAM (B) | arena (B) | stack (B) |")
    assert "### DQN CartPole-v1: scheme × board" in section and header in section
    for r in boards:     # every board cell is a row of the table with its own numbers
        line = next(ln for ln in section.splitlines()
                    if ln.startswith(f"| {r['board']} | {r['scheme']} | 1"
                                     + (f" × {r['episodes']}" if r.get("episodes") else "") + " |"))
        assert f"{r['mean_return']:,.1f} ± {r['std_return']:,.1f}" in line
        assert f"{r['cost_mean']:,.0f} {r['unit']}" in line and f"{r['flash_bytes']:,}" in line
        tflite = "yes" if r["matches_tflite"] else "NO"
        ref = {True: "yes", False: "NO", None: "-"}[r.get("matches_tflite_ref")]
        # = tflite-runtime's reference kernels ("-": the row predates them), its optimized
        # kernels, = TF Lite Micro, bit-exact
        assert f"| {ref} | {tflite} | yes | yes |" in line
    # the count of board cells equal to each host interpreter, per family, from the rows
    int8 = [r for r in boards if r["scheme"] not in ("fp32", "int16x8") and r.get("episodes")]
    assert int8 and (f"{len(int8)} int8 cells ({', '.join(sorted({r['scheme'] for r in int8}))}"
                     "): the same returns as its optimized kernels in "
                     f"{sum(bool(r['matches_tflite']) for r in int8)} of {len(int8)}; TF Lite "
                     f"Micro in {len(int8)} of {len(int8)}") in section
    assert ("| host-tiny | int8 | - | does not fit (needs 40,263 B flash; arena 128 B; "
            "weights 5,000 B) |") in section
    assert "40,263 / 16,384" in section
    # the claim, per board with fp32 and int8, computed from those rows
    by = {(r["board"], r["scheme"]): r for r in boards}
    for board in {b for b, s in by if s == "int8" and (b, "fp32") in by}:
        q, f = by[(board, "int8")], by[(board, "fp32")]
        speed = f["cost_mean"] / q["cost_mean"]
        faster = f"{speed:.2f}× faster" if speed >= 1 else f"{1 / speed:.2f}× slower"
        claim = next(ln for ln in section.splitlines()
                     if ln.startswith(f"DQN CartPole-v1 on {board} "))
        assert f"int8 is {faster}" in claim
        assert f"{f['flash_bytes'] / q['flash_bytes']:.2f}× smaller in flash" in claim
        assert "with a return loss of" in claim
    # a Pareto plot per board, bounded, embedded in the self-contained page
    pareto = sorted(f for f in out["figures"] if f.name.startswith("pareto_"))
    assert [f.name for f in pareto] == sorted(f"pareto_{b}.png" for b in {r["board"] for r in boards})
    for f in pareto:
        width, height = _png_size(f)
        assert 300 < width <= 1600 and height <= 1600
        assert f"]({f.name})" in md
    page = out["html"].read_text()
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) == len(out["figures"]) and all(s.startswith("data:image/png;base64,")
                                                       for s in sources)
    assert "http" not in page.replace('charset="utf-8"', "") and "<script" not in page
    # boards.json: the same cells and lines, for scripts
    data = json.loads(out["boards"].read_text())
    assert len(data["cells"]) == len({(r["board"], r["scheme"]) for r in boards}) + 1
    assert all(line in section for line in data["int8_vs_fp32"])
    # the not-deployable schemes are said once, not listed as failures
    assert "Not run on a board: dyn-int8 (dynamic-range" in section
    assert "## Skipped and failed" not in md          # nothing failed


def test_seed_bootstrap_covers_the_mean_and_is_deterministic():
    from quarl_edge.study.statistics import seed_bootstrap
    rng = np.random.default_rng(1)
    groups = [list(rng.normal(5.0, 1.0, 20)) for _ in range(3)]   # 3 tasks x 20 seeds
    st = seed_bootstrap(groups)
    assert st["effect"] == pytest.approx(np.mean(groups))
    assert st["ci"][0] < 5.0 < st["ci"][1] and st["ci"][1] - st["ci"][0] < 1.0
    assert st["n_seeds"] == 60 and st["seeds_per_task"] == [20, 20, 20]
    assert seed_bootstrap(groups) == st                      # a fixed RNG seed: reproducible
    assert seed_bootstrap(groups, seed=7)["ci"] != st["ci"]  # ... and it is the seed that fixes it
    # coverage: over many synthetic studies, the 95 % interval holds the true mean most times
    hits = 0
    for _ in range(100):
        data = [list(rng.normal(2.0, 3.0, 30))]
        lo, hi = seed_bootstrap(data, n_boot=500)["ci"]
        hits += lo <= 2.0 <= hi
    assert 85 <= hits <= 100


def test_seed_bootstrap_degenerate_cases():
    from quarl_edge.study.statistics import seed_bootstrap
    one = seed_bootstrap([[0.3]])
    assert one["effect"] == 0.3 and one["ci"] is None and one["note"] == "one training seed: no interval"
    some_one = seed_bootstrap([[0.1, 0.2], [0.3]])      # a task with one seed: no pooled interval
    assert some_one["ci"] is None and some_one["n_seeds"] == 3
    assert seed_bootstrap([[0.2, 0.2, 0.2]])["ci"] == [pytest.approx(0.2), pytest.approx(0.2)]
    assert seed_bootstrap([])["effect"] is None and seed_bootstrap([])["note"] == "no data"
    # a statistic undefined in most resamples (Spearman of 2 points often drawn equal)
    rho = seed_bootstrap([[(1, 1), (2, 2)]], lambda it: spearman(*zip(*it)))
    assert rho["effect"] == pytest.approx(1.0) and rho["ci"] is None


def test_interval_verdict_rule():
    from quarl_edge.study.statistics import interval_verdict
    assert interval_verdict([0.01, 0.04], 0.05, "below") == "agree"
    assert interval_verdict([0.06, 0.09], 0.05, "below") == "disagree"
    assert interval_verdict([0.04, 0.06], 0.05, "below") == "inconclusive"
    assert interval_verdict([0.1, 0.4], 0.0, "above") == "agree"
    assert interval_verdict([-0.4, -0.1], 0.0, "above") == "disagree"
    assert interval_verdict([-0.1, 0.4], 0.0, "above") == "inconclusive"
    assert interval_verdict(None, 0.05, "below") == "inconclusive"
    with pytest.raises(ValueError):
        interval_verdict([0, 1], 0.0, "sideways")


def test_board_cells_carry_the_interval_over_seeds_the_pareto_bars_draw():
    from quarl_edge.study.board_section import board_cells
    rows = read_results(BOARDS_EXAMPLE)
    one = [c for c in board_cells(Results(rows)) if c["fits"] and c["return"] is not None]
    assert one and all(c["seeds"] == 1 and c["return_ci"] is None for c in one)
    # the same study again as seed 1, every board return 10 higher: the 2-seed interval spans
    # both seeds' returns (a resample of 2 seeds is one of them 1/4 of the time each)
    again = [dict(r, seed=1, **({"mean_return": r["mean_return"] + 10.0}
                                if r["kind"] == "board" and r.get("mean_return") is not None
                                else {})) for r in rows]
    two = [c for c in board_cells(Results(rows + again)) if c["fits"] and c["return"] is not None]
    assert len(two) == len(one)
    key = lambda c: (c["task"], c["board"], c["scheme"])   # noqa: E731
    for c, c1 in zip(sorted(two, key=key), sorted(one, key=key)):
        assert key(c) == key(c1) and c["seeds"] == 2 and c["return_ci"] == pytest.approx([c1["return"], c1["return"] + 10])
