"""Every kind of policy the generator supports, validated bit-exact against TF Lite Micro on the
host board and on every emulated board (issue 4's "done when")."""
from pathlib import Path

import numpy as np
import pytest

from helpers_models import convert, random_mlp
from quarl_edge.boards import all_boards
from quarl_edge.validate import validate

BOARDS = [b for b in all_boards().values()
          if b.kind == "host" or (b.kind == "emulated" and b.connect_method == "qemu")]

# (name, conversion mode, input dim, widths, activations): policy shapes seen in RL
MODELS = [
    ("tanh_head_int8", "int8", 8, [32, 32, 2], ["relu", "relu", "tanh"]),          # PPO/SAC actor
    ("tanh_head_float", "float", 8, [32, 32, 2], ["relu", "relu", "tanh"]),
    ("int16x8_mlp", "int16x8", 6, [24, 3], ["relu", "none"]),
    ("sigmoid_int8_io", "int8_io", 5, [16, 4], ["relu6", "sigmoid"]),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, mode, n_in, widths, acts in MODELS:
        calib = np.random.default_rng(0).normal(size=(200, n_in)).astype(np.float32)
        path = d / f"{name}.tflite"
        path.write_bytes(convert(random_mlp(3, n_in, widths, acts, weight_scale=1.5), mode, calib))
        out[name] = path
    return out


@pytest.mark.parametrize("board", BOARDS, ids=[b.id for b in BOARDS])
def test_every_model_kind_is_bit_exact_on_every_board(board, models, tmp_path):
    for name, path in models.items():
        res = validate(path, board, tmp_path / name, random_n=40, seed=1)
        assert res["bit_exact"] is True, (board.id, name, res)
        assert res["latency"]["unit"] == board.cost_unit
        assert res["memory"]["stack_bytes"] > 0, (board.id, name)
