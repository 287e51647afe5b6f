"""int8x4 policies (int8 activations, packed int4 weights) validated bit-exact against TF Lite
Micro on the emulated boards: mps2-an386 (the cortex-m-dsp variant: depths <= 128 on its int4
layout, qe_fully_connected_s4_packed / the s4 mm stream; deeper ones on the same layout padded to
a multiple of 8, qe_fully_connected_s4_deep, in blocks of 128 inputs summed in int32: "mid",
"deep" and a MinAtar-shaped DQN's 1,024 -> 128), microbit (the cortex-m0 variant's row pairs,
qe_fully_connected_s4_pairs) and atmega328p (the avr variant's int4 stream,
qe_fully_connected_s4_avr: nibbles + 8, two rows a byte, LPM/SWAP/MULSU into 16-bit chunk
sums); on the ATmega328P also the CartPole int8x4 policy and a random int8x4 MLP with padded row
groups, and a short HIL run whose actions are TF Lite Micro's."""
import shutil
from pathlib import Path

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
    ("mid", 200, [6], ["none"]),                  # deep layout: blocks of 128 and 72 inputs
    ("deep", 300, [3], ["none"]),                 # 128, 128, 44 (padded to 48) inputs
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
        if board_id == "atmega328p":
            assert "qe_fully_connected_s4_avr(" in (tmp_path / name / "gen" / "model.c").read_text()


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cartpole_int8x4(tmp_path_factory):
    run = ROOT / "examples" / "cartpole_dqn"
    cal = np.load(run / "calibration.npy").astype(np.float32)
    path = tmp_path_factory.mktemp("cp4") / "int8x4.tflite"
    path.write_bytes(int4_weights((run / "models" / "fp32.tflite").read_bytes(), cal))
    return path


def test_cartpole_int8x4_on_the_s4_mm_stream_is_bit_exact_on_mps2_an386(cartpole_int8x4, tmp_path):
    """Every layer on the cortex-m-dsp s4 mm stream (one batch, depths 4 and 64: the odd and the
    even MAC loop; the first layer's left shift 0, the others' right shifts; the 2-row head a
    padded group), TF Lite Micro's outputs on 60 random inputs."""
    res = validate(cartpole_int8x4, get_board("mps2-an386"), tmp_path / "fw", random_n=60)
    model_c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert model_c.count("qe_fully_connected_s4_mm(") == 3 and ".mode = 2u," in model_c
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 60


def test_minatar_shaped_int8x4_dqn_is_bit_exact_on_mps2_an386(tmp_path):
    """MinAtar's DQN shape (10x10x4, conv 16 3x3 VALID ReLU kept int8, FC 1,024 -> 128 ReLU and
    128 -> 6 with packed int4 weights; random weights, calibrated on sparse 0/1 frames as
    tests/test_conv_rows.py's minatar_cnn): the 1,024-deep FC runs the cortex-m-dsp variant's
    qe_fully_connected_s4_deep, eight blocks of 128 inputs (issue 39; it ran the reference before),
    TF Lite Micro's outputs on 20 random frames."""
    from helpers_models import minatar_keras
    net, frames = minatar_keras()
    model = tmp_path / "minatar_int8x4.tflite"
    model.write_bytes(int4_weights(convert(net, "float"), frames))
    res = validate(model, get_board("mps2-an386"), tmp_path / "fw", random_n=20)
    model_c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert "qe_fully_connected_s4_deep(" in model_c and ".padded_depth = 1024u" in model_c
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 20


def test_cartpole_int8x4_with_the_avr_variant_is_bit_exact_on_atmega328p(cartpole_int8x4, tmp_path):
    """Every layer on the avr int4 stream (the first with a left shift: the left-shift output
    stage), TF Lite Micro's outputs on 60 random inputs."""
    board = get_board("atmega328p")
    res = validate(cartpole_int8x4, board, tmp_path / "fw", random_n=60)
    assert "optimized/avr/fully_connected_s4.c" in (tmp_path / "fw" / "build.cmd").read_text()
    model_c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert model_c.count("qe_fully_connected_s4_avr(") == 3 and "qe_fully_connected_s4(" not in model_c
    assert ".output_shift = 0," in model_c and model_c.count(".fast = 1u") == 3
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 60


def test_a_random_int8x4_mlp_with_the_avr_variant_is_bit_exact_on_atmega328p(tmp_path):
    """Padded row groups (37, 19, 3 rows), depth 7, RELU: TF Lite Micro's outputs."""
    rng = np.random.default_rng(1)
    model = tmp_path / "mlp.tflite"
    model.write_bytes(int4_weights(convert(random_mlp(1, 7, [37, 19, 3], ["relu", "relu", "none"],
                                                      2.0), "float"),
                                   rng.standard_normal((64, 7)).astype(np.float32)))
    res = validate(model, get_board("atmega328p"), tmp_path / "fw", random_n=40)
    assert (tmp_path / "fw" / "gen" / "model.c").read_text().count("qe_fully_connected_s4_avr(") == 3
    assert res["bit_exact"] and res["mismatches"] == 0


def test_cartpole_int8x4_hil_on_atmega328p_acts_as_tflm(cartpole_int8x4, tmp_path):
    """Two CartPole episodes with the board choosing every action: its returns are the reference
    interpreters' and every action equals theirs."""
    from quarl_edge import api
    run = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "cartpole_dqn", run)
    shutil.copy(cartpole_int8x4, run / "models" / "int8x4.tflite")
    r = api.hil(run, "atmega328p", scheme="int8x4", episodes=2)
    assert r.matches_reference and r.actions_equal_reference
    assert r.mean_return == r.micro_mean_return == r.tflite_mean_return
