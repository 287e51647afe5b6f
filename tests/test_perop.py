"""bench --per-op: each op's cost on the board with the whole inference's counter, adding up to
the whole inference within the timer's measured overhead, for an MLP, a CNN and an LSTM policy
on the host, mps2-an386, microbit and atmega328p."""
import json
import subprocess
import sys

import numpy as np
import pytest

from helpers_models import convert, copy_example_tree, random_cnn

BOARDS = "host,mps2-an386,microbit,atmega328p"


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    """The example run (an MLP, fp32 and int8), a small int8 CNN and a float LSTM policy."""
    from test_lstm_golden import keras_lstm
    d = tmp_path_factory.mktemp("perop")
    calib = np.random.default_rng(0).normal(size=(100, 5, 5, 2)).astype(np.float32)
    cnn = d / "cnn_int8.tflite"
    cnn.write_bytes(convert(random_cnn(4, (5, 5, 2), "max", filters=4, hidden=16), "int8", calib))
    lstm = d / "lstm_int8.tflite"
    lstm.write_bytes(keras_lstm(1, 4, 8, head=2, seed=6, mode="int8"))
    return {"mlp": copy_example_tree(d / "run"), "cnn": cnn, "lstm": lstm}


def _perop(target, boards=BOARDS, n=3):
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "bench", str(target), "--boards",
                        boards, "-n", str(n), "--per-op", "--json"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _check_cells(rows, schemes, types):
    totals = {(r["board"], r["scheme"]): r for r in rows if r["kind"] == "total"}
    assert set(totals) == {(b, s) for b in BOARDS.split(",") for s in schemes}, totals
    for (board, scheme), t in totals.items():
        assert "error" not in t, t
        ops = [r for r in rows if r["kind"] == "op" and (r["board"], r["scheme"]) == (board, scheme)]
        assert [r["slot"] for r in ops] == list(range(len(ops))) and ops[-1]["type"] == "(return)"
        assert types <= {r["type"] for r in ops}, (board, {r["type"] for r in ops})
        assert sum(r["cost"] for r in ops) == t["sum"] and t["ops"] == len(ops) - 1
        assert sum(r["share"] for r in ops) == pytest.approx(1.0)
        # the ops add up to the whole inference (the normal build's, less its one timer
        # overhead) within the timer's own measured overhead per window
        assert t["gap"] == t["sum"] - (t["whole"] - t["overhead"])
        assert t["overhead"] > 0
        if board != "host":     # exact counts: no wall-clock spread in the tolerance
            assert abs(t["gap"]) <= t["tolerance"] and t["within"] is True, t
            assert t["noise"] == 0 and t["tolerance"] == (t["ops"] + 1) * t["overhead"]
        else:                   # wall time on a shared machine: minima over runs, loosely
            assert abs(t["gap"]) <= max(t["tolerance"], t["whole"] / 2), t
        for r in ops:
            if r["macs"]:
                assert r["cost_per_mac"] == pytest.approx(r["cost"] / r["macs"])
    return totals


def test_per_op_mlp_adds_up_on_every_board(policies):
    rows = _perop(policies["mlp"])
    totals = _check_cells(rows, ("fp32", "int8"), {"FULLY_CONNECTED"})
    fc = [r for r in rows if r["board"] == "mps2-an386" and r["scheme"] == "int8"
          and r.get("type") == "FULLY_CONNECTED"]
    assert [r["macs"] for r in fc] == [4 * 64, 64 * 64, 64 * 2]   # in x out per layer
    assert max(fc, key=lambda r: r["cost"])["macs"] == 4096       # the 64x64 layer dominates
    assert {r.get("type") for r in rows if r["scheme"] == "int8"} >= {"QUANTIZE", "DEQUANTIZE"}
    avr = totals[("atmega328p", "int8")]
    assert avr["unit"] == "cycles" and avr["whole"] > 0
    lines = (policies["mlp"] / "results" / "perop.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == rows


def test_per_op_cnn_adds_up_on_every_board(policies):
    rows = _perop(policies["cnn"])
    _check_cells(rows, ("cnn_int8",), {"CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D",
                                       "FULLY_CONNECTED"})
    conv = next(r for r in rows if r.get("type") == "CONV_2D")
    assert conv["macs"] == 3 * 3 * 3 * 4 * 3 * 2    # out 3x3x4, kernel 3x3 over 2 channels


def test_per_op_lstm_adds_up_on_every_board(policies):
    rows = _perop(policies["lstm"])
    _check_cells(rows, ("lstm_int8",), {"UNIDIRECTIONAL_SEQUENCE_LSTM", "FULLY_CONNECTED"})
    lstm = next(r for r in rows if r.get("type") == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert lstm["macs"] == 4 * 8 * (4 + 8)          # 4 gates x units x (inputs + units), 1 step


def test_the_normal_build_has_no_per_op_code(tmp_path):
    """Without --per-op, model.c has no marks (the golden hashes, tests/test_cgen_golden.py,
    pin it byte for byte) and the harness answers PEROP as an unknown command."""
    from quarl_edge.converters import cgen
    from helpers_models import EXAMPLE_RUN
    cgen.generate(EXAMPLE_RUN / "models" / "int8.tflite", tmp_path / "n", name="int8")
    cgen.generate(EXAMPLE_RUN / "models" / "int8.tflite", tmp_path / "p", name="int8", per_op=True)
    normal, per = (tmp_path / "n" / "model.c").read_text(), (tmp_path / "p" / "model.c").read_text()
    assert "QE_OP" not in normal and per.count("QE_OP_END(") == 5
    assert not (tmp_path / "n" / "perop.json").exists()
    import difflib        # the per-op model.c only adds lines: the marks and the slots' arrays
    ops = difflib.SequenceMatcher(None, normal.splitlines(), per.splitlines()).get_opcodes()
    assert {tag for tag, *_ in ops} == {"equal", "insert"}


def test_perop_requests_the_board_refuses(tmp_path):
    """A per-op build on the host: PEROP beyond the slots or with 0 runs is BAD_PAYLOAD (the
    board keeps answering), and INFER's cost there is the sum of the windows."""
    import struct
    from helpers_models import EXAMPLE_RUN
    from quarl_edge.core.errors import ProtocolError
    from quarl_edge.link import protocol as P
    from quarl_edge.link.session import BoardSession
    from quarl_edge.targets.boards import get_board
    from quarl_edge.targets.build import PER_OP_FLAG
    with BoardSession(EXAMPLE_RUN / "models" / "int8.tflite", get_board("host"), tmp_path / "b",
                      extra_flags=(PER_OP_FLAG,)) as s:
        _, cost = s.link.infer([np.zeros((1, 4), np.float32)])
        for first, runs in ((99, 1), (0, 0)):
            with pytest.raises(ProtocolError, match="BAD_PAYLOAD"):
                s.link.command("PEROP", struct.pack(P.PEROP_REQ, first, runs))
        overhead, tail, costs = s.link.perop(5)
        assert len(costs) == 5 and overhead > 0 and cost > 0
        assert s.link.perop(1)[2] != [] and s.link.bench(3).n == 3   # still answering


def test_per_op_with_episodes_or_a_control_rate_is_refused(tmp_path):
    from helpers_hostile import assert_refused, run_hostile
    run = copy_example_tree(tmp_path / "run")
    for extra in (["--episodes", "2"], ["--control-hz", "500"]):
        o = run_hostile("per-op-" + extra[0][2:], ["bench", str(run), "--boards", "host",
                                                   "--per-op", *extra], tmp_path)
        assert_refused(o, "--per-op times each op in its own build")
    assert not (run / "results").exists() and not (run / "build").exists()
