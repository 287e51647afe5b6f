"""A float32 LSTM policy (4 observations, 32 units, one time step, a Dense head of 2 actions)
validated against TF Lite Micro on the host board and on QEMU mps2-an386 (issue 12).

validate sends one input per INFER; the board keeps the LSTM state between them, and validate's
reference (one TF Lite Micro interpreter, rows run in order) keeps it too, so row k on both
sides sees the state left by rows 0..k-1. The board starts from zero state (its first invoke
runs qe_model_reset_state()), as a freshly created interpreter does."""

import numpy as np
import pytest

from quarl_edge.measure.validate import validate
from quarl_edge.targets.boards import get_board
from test_lstm_golden import keras_lstm


@pytest.fixture(scope="module")
def lstm_policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("lstm") / "lstm_policy_float.tflite"
    path.write_bytes(keras_lstm(1, 4, 32, head=2, seed=11))
    return path


@pytest.mark.parametrize("board_id", ["host", "mps2-an386"])
def test_lstm_policy_on_board(board_id, lstm_policy, tmp_path):
    board = get_board(board_id)
    res = validate(lstm_policy, board, tmp_path / board_id, random_n=30, seed=3)
    if board.kind == "host":
        assert res["bit_exact"] is True, res
    else:
        # sigmoid/tanh call newlib's expf/tanhf, TFLM's reference ran on glibc: an ulp apart at
        # most per call, carried along in the recurrent state
        assert res["max_rel_diff"] <= 1e-5, res
    assert res["n"] == 30 and res["memory"]["arena_bytes"] > 0
