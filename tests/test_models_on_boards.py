"""Every kind of policy the generator supports, validated bit-exact against TF Lite Micro on the
host board and on every emulated board (issue 4's "done when")."""

import numpy as np
import pytest

from helpers_models import convert, random_cnn, random_mlp
from quarl_edge.targets.boards import all_boards
from quarl_edge.measure.validate import validate

BOARDS = [b for b in all_boards().values()
          if b.kind == "host" or (b.kind == "emulated" and b.connect_method == "qemu")]

# (name, conversion mode, keras model builder, input shape): policy shapes seen in RL
MODELS = [
    ("tanh_head_int8", "int8", lambda: random_mlp(3, 8, [32, 32, 2], ["relu", "relu", "tanh"], 1.5),
     (8,)),                                                                  # PPO/SAC actor
    ("tanh_head_float", "float", lambda: random_mlp(3, 8, [32, 32, 2], ["relu", "relu", "tanh"], 1.5),
     (8,)),
    ("int16x8_mlp", "int16x8", lambda: random_mlp(3, 6, [24, 3], ["relu", "none"], 1.5), (6,)),
    ("sigmoid_int8_io", "int8_io", lambda: random_mlp(3, 5, [16, 4], ["relu6", "sigmoid"], 1.5), (5,)),
    # small CNN policies: conv 3x3/2 -> depthwise -> pool -> dense -> softmax
    ("cnn_softmax_int8_io", "int8_io", lambda: random_cnn(4, (8, 8, 2), "max"), (8, 8, 2)),
    ("cnn_gap_float", "float", lambda: random_cnn(5, (5, 5, 2), "gap"), (5, 5, 2)),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, mode, build, shape in MODELS:
        calib = np.random.default_rng(0).normal(size=(200, *shape)).astype(np.float32)
        path = d / f"{name}.tflite"
        path.write_bytes(convert(build(), mode, calib))
        out[name] = path
    return out


@pytest.mark.parametrize("board", BOARDS, ids=[b.id for b in BOARDS])
def test_every_model_kind_is_bit_exact_on_every_board(board, models, tmp_path):
    for name, path in models.items():
        res = validate(path, board, tmp_path / name, random_n=40, seed=1)
        if "float" in name and board.kind != "host":
            # softmax/tanh call the board's libm (newlib), TFLM's reference ran on glibc: an
            # ulp apart at most; integer outputs and the host build stay bit-exact
            assert res["max_rel_diff"] <= 1e-6, (board.id, name, res)
        else:
            assert res["bit_exact"] is True, (board.id, name, res)
        assert res["latency"]["unit"] == board.cost_unit
        assert res["memory"]["stack_bytes"] > 0, (board.id, name)


def test_integer_policies_on_the_avr(models, tmp_path):
    """atmega328p (2 KiB RAM, 64-byte frames): the integer kinds, a CNN small enough for it, and
    a float tanh head (avr-libc's tanhf: within an ulp or so of glibc's)."""
    from quarl_edge.targets.boards import get_board
    board = get_board("atmega328p")
    small_cnn = tmp_path / "cnn_small_int8_io.tflite"
    calib = np.random.default_rng(0).normal(size=(200, 5, 5, 2)).astype(np.float32)
    small_cnn.write_bytes(convert(random_cnn(4, (5, 5, 2), "max", filters=4), "int8_io", calib))
    for path in (models["tanh_head_int8"], models["int16x8_mlp"], models["sigmoid_int8_io"], small_cnn):
        res = validate(path, board, tmp_path / path.stem, random_n=12, seed=2)
        assert res["bit_exact"] is True, (path.stem, res)
        assert res["latency"]["unit"] == "cycles" and res["memory"]["stack_bytes"] > 0
    res = validate(models["tanh_head_float"], board, tmp_path / "float", random_n=12, seed=2)
    assert res["max_rel_diff"] <= 1e-6, res
