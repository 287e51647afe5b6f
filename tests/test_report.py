"""The report: verdicts on QuaRL's claims are computed from the rows (agree, disagree, partly,
insufficient data), duplicates resolve to the last row, figures are real PNGs, the HTML is
self-contained. Synthetic results here; the committed classic and board studies' in
test_report_real.py, the smoke study's in test_study.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

from quarl_edge.core.errors import QuarlError
from quarl_edge.study.claims import _four_bits, claims
from quarl_edge.study.report import write_report
from quarl_edge.study.results import Results
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


def test_four_bit_claims_appear_with_4_bit_cells_and_decide_by_the_interval():
    """Claim 4 per method (int8x4 post-training, qat-int8x4 in the RL loop): absent without
    4-bit cells; with them, the loss's interval over seeds decides as for 6-8 bits, the same
    runs' int8 loss is beside it, and QAT is paired with int8x4 of the same seed."""
    base = _grid(lambda r: 0.01, qat_delta=0.0)
    assert len(claims(Results(base), 0.05)) == 3
    ptq_loss = {0: 0.20, 1: 0.30, 2: 0.25}            # of the gain of 200, per seed
    rows = list(base)
    for r in base:
        if r["kind"] == "cell" and r["scheme"] == "int8":
            fp32 = r["fp32_return"]
            rows.append({**r, "scheme": "int8x4", "mean_return": fp32 * (1 - ptq_loss[r["seed"]])})
            rows.append({**r, "scheme": "qat-int8x4", "mean_return": fp32 * (1 - 0.01)})
            rows.append({**r, "scheme": "qat-distill-int8x4", "mean_return": fp32 * (1 - 0.10)})
    found = {c["claim"]: c for c in claims(Results(rows), 0.05)}
    # the distillation method's claim, and its pairing with int8x4, counted on its own
    dist = found["4-bit weights lose no reward (quantization-aware, by distillation: "
                 "qat-distill-int8x4)"]
    assert dist["effect"] == pytest.approx(0.10) and dist["verdict"] == "disagree"
    assert "qat-distill-int8x4 − int8x4 (paired by training seed): mean +15.0 %" \
        in dist["evidence"][3]
    ptq = found["4-bit weights lose no reward (post-training: int8x4)"]
    qat = found["4-bit weights lose no reward (quantization-aware, in the RL loop: qat-int8x4)"]
    assert ptq["n"] == qat["n"] == 6 and ptq["n_seeds"] == 6
    assert ptq["effect"] == pytest.approx(0.25) and ptq["verdict"] == "disagree"
    assert ptq["ci"][0] > 0.05
    assert qat["effect"] == pytest.approx(0.01) and qat["verdict"] == "agree"
    assert "0 of 6 int8x4 policies are within 5%" in ptq["evidence"][1]
    assert "The same 6 runs at int8: mean loss +1.0 %" in ptq["evidence"][2]
    assert "qat-int8x4 − int8x4 (paired by training seed): mean +24.0 %" in qat["evidence"][3]
    assert qat["evidence"][3].endswith("QAT >= PTQ at 4 bits -> agree (claim 2's rule).")
    # a spread across the tolerance: inconclusive, never decided by a count
    spread = [dict(r, mean_return=200.0 * (1 - (0.0 if r["seed"] == 0 else 0.12)))
              if r.get("scheme") == "int8x4" else r for r in rows]
    ptq = _four_bits(Results(spread), 0.05, "int8x4")
    assert ptq["ci"][0] < 0.05 < ptq["ci"][1] and ptq["verdict"] == "inconclusive"


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
