"""int8x4 policies (int8 activations, packed int4 weights) validated bit-exact against TF Lite
Micro on the emulated boards: mps2-an386 (the cortex-m-dsp variant: depths <= 128 on its int4
layout, qe_fully_connected_s4_packed; deeper ones on TFLite's packing, groups of 8 weights by
SMLAD, the reference over 256), microbit (the cortex-m0 variant's row pairs,
qe_fully_connected_s4_pairs) and atmega328p (the reference reading the packed bytes from
flash)."""
import numpy as np
import pytest

from helpers_models import convert, random_mlp
from quarl_edge.measure.validate import validate
from quarl_edge.quant.lowbit import int4_weights
from quarl_edge.targets.boards import get_board

# (name, input dim, widths, activations): each a path of the DSP variant
MODELS = [
    # depth 12: a group + a padded one; 7 rows: the last pairs with itself, its word cut short
    ("groups_and_tail", 12, [7, 64, 3], ["relu", "relu6", "none"]),
    ("odd_depth", 9, [5, 2], ["relu", "none"]),                       # rows start mid-byte
    ("mid", 200, [6], ["none"]),                                      # 129..256: TFLite's packing
    ("deep", 300, [3], ["none"]),                                     # over 256: the reference
]
SMALL = ("groups_and_tail", "odd_depth")        # the ones that fit the ATmega328P's 2 KiB


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("int8x4")
    out = {}
    for k, (name, n, widths, acts) in enumerate(MODELS):
        calib = np.random.default_rng(k).normal(size=(100, n)).astype(np.float32)
        fp32 = convert(random_mlp(k, n, widths, acts, 1.0), "float")
        path = d / f"{name}.tflite"
        path.write_bytes(int4_weights(fp32, calib))
        out[name] = path
    return out


@pytest.mark.parametrize("board_id", ["mps2-an386", "microbit", "atmega328p"])
def test_int8x4_bit_exact_on_boards(board_id, models, tmp_path):
    board = get_board(board_id)
    names = SMALL if board_id == "atmega328p" else [m[0] for m in MODELS]
    for name in names:
        res = validate(models[name], board, tmp_path / name, random_n=30, seed=3)
        assert res["bit_exact"] is True, (board_id, name, res)
        assert res["latency"]["unit"] == board.cost_unit
