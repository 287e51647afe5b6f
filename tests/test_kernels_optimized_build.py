"""Optimized kernel variants, the board files and the build: `[build] kernels` is validated,
the build compiles the variant's files in place of the reference's (and keeps the int8 layout
when the variant's does not fit the flash), and end to end the shipped CartPole int8 policy and
random int8 MLPs built with the variants (cortex-m-dsp on mps2-an386, cortex-m0 on the micro:bit)
are bit-exact with TF Lite Micro (quarl_edge.measure.validate) under QEMU. (The kernels
themselves: test_kernels_optimized.py.)"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers_fc_cases import AVR_VARIANT, DSP_BOARDS, FW, M0_VARIANT, ROOT, VARIANT, VARIANT_FC
from quarl_edge.converters.ops.optimized import VARIANT_LOWERINGS
from quarl_edge.core.errors import BoardError, QuarlError
from quarl_edge.targets.boards import all_boards, get_board, load_board_file
from quarl_edge.targets.build import COMMON_CFLAGS, firmware_sources, kernel_sources


# ------------------------------------------------------------------------------ board files, build
def _board_file(tmp_path: Path, kernels) -> Path:
    src = (ROOT / "boards" / "mps2-an386.toml").read_text()
    lines = [ln for ln in src.splitlines() if not ln.startswith("kernels")]
    at = lines.index("[build]") + 1
    if kernels is not None:
        lines.insert(at, f"kernels = {kernels!r}".replace("'", '"'))
    path = tmp_path / "mps2-an386.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_board_kernels_key(tmp_path):
    assert load_board_file(_board_file(tmp_path, None)).kernels == "reference"
    assert load_board_file(_board_file(tmp_path, VARIANT)).kernels == VARIANT
    with pytest.raises(BoardError, match="'kernels' is 'cmsis'; expected one of reference, avr, cortex-m-dsp, cortex-m0, rv32"):
        load_board_file(_board_file(tmp_path, "cmsis"))


def test_only_cortex_m_boards_with_dsp_opt_in():
    """The variants are opt-in: avr only on the ATmega328P (emulated, where it is validated, and
    the Uno, the same chip, whose firmware runs on simavr behind Optiboot: `emulate`);
    cortex-m-dsp only on cores with the DSP extension, cortex-m0 only on the nRF51 boards
    (microbit, emulated, where it is validated, and microbit-v1, the same chip, whose firmware
    also runs on QEMU's microbit), rv32 only on hifive1 (QEMU sifive_e, where it is validated;
    the ESP32-C3's rv32imc keeps the reference until it is measured there)."""
    boards = all_boards()
    for b in boards.values():
        if b.kernels == AVR_VARIANT:
            assert b.id in ("atmega328p", "arduino-uno") and b.cc == "avr-gcc", b.id
        elif b.kernels == M0_VARIANT:
            assert b.id in ("microbit", "microbit-v1") and "-mcpu=cortex-m0" in b.cflags, b.id
        elif b.kernels == "rv32":
            assert b.id == "hifive1" and "-march=rv32imac" in b.cflags, b.id
        elif b.kernels != "reference":
            assert b.kernels == VARIANT and b.cc == "arm-none-eabi-gcc", b.id
            assert any(f"-mcpu={c}" in b.cflags for c in ("cortex-m4", "cortex-m7", "cortex-m33")), b.id
    assert {b for b in DSP_BOARDS if boards[b].kernels == VARIANT} == set(DSP_BOARDS)
    assert boards["atmega328p"].kernels == AVR_VARIANT and boards["host"].kernels == "reference"
    assert boards["hifive1"].kernels == "rv32"


def test_the_build_swaps_only_the_variants_files():
    ref, opt = kernel_sources("reference"), kernel_sources(VARIANT)
    assert len(ref) == len(opt) and VARIANT_FC in opt and VARIANT_FC not in ref
    assert [a for a, b in zip(ref, opt) if a != b] == [
        FW / "core" / "kernels" / f for f in ("conv.c", "depthwise_conv.c", "fully_connected.c",
                                                "fully_connected_s4.c", "max_pool.c", "quantize.c")]
    board = get_board("mps2-an386")
    assert VARIANT_FC in firmware_sources(dataclasses.replace(board, kernels=VARIANT))
    assert VARIANT_FC not in firmware_sources(dataclasses.replace(board, kernels="reference"))
    with pytest.raises(QuarlError, match="no optimized kernel variant 'nope'"):
        kernel_sources("nope")


# ------------------------------------------------------------------------------ end to end (QEMU)
def _validate(model: Path, tmp: Path, n: int = 60) -> dict:
    from quarl_edge.measure.validate import validate
    board = dataclasses.replace(get_board("mps2-an386"), kernels=VARIANT)
    res = validate(model, board, tmp / "fw", random_n=n)
    assert VARIANT_FC.name in (tmp / "fw" / "build.cmd").read_text()
    assert f"optimized/{VARIANT}/fully_connected.c" in (tmp / "fw" / "build.cmd").read_text()
    return res


def test_cartpole_int8_with_the_variant_is_bit_exact_on_mps2_an386(tmp_path):
    res = _validate(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite", tmp_path, 100)
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 100
    # every layer on the mm stream (one batch, depths 4 and 64, the 2-row head a padded group)
    c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert c.count("qe_fully_connected_s8_mm(") == 3


def test_cartpole_int8_with_the_m0_variant_is_bit_exact_on_microbit(tmp_path):
    from quarl_edge.measure.validate import validate
    board = get_board("microbit")
    assert board.kernels == M0_VARIANT
    res = validate(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite", board,
                   tmp_path / "fw", random_n=60)
    assert f"optimized/{M0_VARIANT}/fully_connected.c" in (tmp_path / "fw" / "build.cmd").read_text()
    assert "qe_fully_connected_s8_pairs(" in (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 60


def test_a_random_int8_mlp_with_the_m0_variant_is_bit_exact_on_microbit(tmp_path):
    """Padded row groups (37 rows), a padded quad (depth 7), RELU: TF Lite Micro's outputs."""
    from helpers_models import convert, random_mlp
    from quarl_edge.measure.validate import validate
    rng = np.random.default_rng(1)
    model = tmp_path / "mlp.tflite"
    model.write_bytes(convert(random_mlp(1, 7, [37, 19, 3], ["relu", "relu", "none"], 2.0), "int8",
                              rng.standard_normal((64, 7)).astype(np.float32)))
    res = validate(model, get_board("microbit"), tmp_path / "fw", random_n=40)
    assert "qe_fully_connected_s8_pairs(" in (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert res["bit_exact"] and res["mismatches"] == 0


def test_cartpole_int8_acc_head_with_the_variant_is_bit_exact_on_mps2_an386(tmp_path):
    from quarl_edge.quant import remedies
    path = tmp_path / "int8-acc.tflite"
    path.write_bytes(remedies.tag_accumulator_readout((ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite").read_bytes()))
    res = _validate(path, tmp_path)
    assert res["bit_exact"] and res["mismatches"] == 0


@pytest.mark.parametrize("seed,input_dim,widths", [(1, 7, [37, 19, 3]), (2, 5, [64, 64, 2]),
                                                   (3, 13, [1, 9]), (41, 8, [48, 48, 4])])
def test_random_int8_mlps_with_the_variant_are_bit_exact_on_mps2_an386(tmp_path, seed, input_dim,
                                                                       widths):
    from helpers_models import convert, random_mlp
    acts = ["relu"] * (len(widths) - 1) + ["none"]
    model = tmp_path / "mlp.tflite"
    rng = np.random.default_rng(seed)
    model.write_bytes(convert(random_mlp(seed, input_dim, widths, acts, 2.0), "int8",
                              rng.standard_normal((64, input_dim)).astype(np.float32)))
    res = _validate(model, tmp_path)
    assert res["bit_exact"] and res["mismatches"] == 0
    if input_dim % 4 == 0:      # issue 41's held-out MLP shape: every layer on the mm stream
        c = (tmp_path / "fw" / "gen" / "model.c").read_text()
        assert c.count("qe_fully_connected_s8_mm(") == len(widths)


@pytest.mark.parametrize("per_channel", [False, True])
def test_hand_built_fc_models_with_the_variant_are_bit_exact_on_mps2_an386(tmp_path, per_channel):
    """int8 in and out, batches of 3, odd depth: per channel, and per tensor with a weights zero
    point (the filter offset the generator folds into the packed weights and bias')."""
    from helpers_models import fc_model
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (11, 23)).astype(np.int8)
    ws = list(rng.uniform(0.002, 0.02, 11)) if per_channel else 0.01
    model = tmp_path / "fc.tflite"
    model.write_bytes(fc_model(w, (0.05, 7), ws, (0.3, -4), bias=rng.integers(-3000, 3000, 11),
                               activation="RELU", input_shape=[1, 3, 23],
                               weight_zp=0 if per_channel else 3))
    res = _validate(model, tmp_path)
    assert res["bit_exact"] and res["mismatches"] == 0
    c = (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert ".batches = 3u" in c
    if per_channel:
        assert "qe_fully_connected_s8_pc(" in c
    else:
        assert "qe_fully_connected_s8_packed(" in c and "zero point 3: packed" in c


def test_the_build_falls_back_to_the_int8_layout_when_packed_weights_do_not_fit(tmp_path):
    """The variant's layout (cortex-m0: chunked row pairs, ~4x the int8 weights) costs flash; on a
    board where that does not fit, the build keeps the reference layout (the variant's files run
    it too)."""
    from quarl_edge.targets.build import build
    model = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"
    board = get_board("microbit")
    packed = build(model, board, tmp_path / "packed")
    assert packed.memory.layout_extra_bytes > 4000
    small = dataclasses.replace(board, flash_bytes=packed.memory.flash_bytes - 1)
    fw = build(model, small, tmp_path / "small")
    c = (tmp_path / "small" / "gen" / "model.c").read_text()
    assert "qe_fully_connected_s8_pairs(" not in c and "qe_fully_connected_s8(" in c
    assert fw.memory.layout_extra_bytes == 0 and fw.memory.flash_bytes < small.flash_bytes


def test_the_rv32_variant_is_the_m0_variants_c_and_builds_for_risc_v(tmp_path):
    """rv32 (cores without SIMD multiply-accumulate) is cortex-m0's files through #include (its
    fully_connected.c adds a RISC-V asm walk of the same layout before it), and the generator
    gives it cortex-m0's lowerings; its C compiles for rv32imac without a warning
    (the host tests run that C: test_kernels_optimized.py's pairs cases)."""
    assert VARIANT_LOWERINGS["rv32"] == VARIANT_LOWERINGS[M0_VARIANT]
    rdir = FW / "core" / "kernels" / "optimized" / "rv32"
    files = sorted(p.name for p in rdir.glob("*.c"))
    assert files == sorted(p.name for p in (rdir.parent / M0_VARIANT).glob("*.c"))
    for name in files:
        assert f'#include "../{M0_VARIANT}/{name}"' in (rdir / name).read_text()
    if shutil.which("riscv64-unknown-elf-gcc") is None:
        pytest.skip("riscv64-unknown-elf-gcc is not installed")
    for name in files:
        res = subprocess.run(["riscv64-unknown-elf-gcc", "--specs=picolibc.specs",
                              "-march=rv32imac_zicsr", "-mabi=ilp32", "-O2", *COMMON_CFLAGS,
                              f"-I{FW / 'core'}", "-c", str(rdir / name), "-o",
                              str(tmp_path / (name + ".o"))], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
