"""The atmega328p board (Arduino Uno's MCU: 32 KiB flash, 2 KiB RAM, 16 MHz) on simavr, end to end
as a user runs it: the int8 CartPole policy builds warning-free with its weights in flash, fits,
runs bit-exact against TF Lite Micro, plays CartPole equal to tflite-runtime, and costs real CPU
cycles that repeat exactly across simulator launches; and the clear errors (does not fit, bridge
cannot be built or started, dead simulator)."""
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile
from helpers_models import cli_json

from quarl_edge.targets import simavr
from quarl_edge.targets.boards import get_board, load_board_file
from quarl_edge.targets.build import build
from quarl_edge.core.errors import BoardError, QuarlError, ToolchainError
from quarl_edge.link.session import BoardSession
from quarl_edge.targets.launch import start
from quarl_edge.targets.simavr import Simavr

ROOT = Path(__file__).resolve().parents[1]
BOARD = get_board("atmega328p")






@pytest.fixture(scope="module")
def int8_fw(run_copy, tmp_path_factory):
    return build(run_copy / "models" / "int8.tflite", BOARD, tmp_path_factory.mktemp("fw") / "int8")


def test_the_board_file():
    b = BOARD
    assert (b.kind, b.cpu, b.clock_hz, b.cost_unit) == ("emulated", "avr5", 16_000_000, "cycles")
    assert (b.flash_bytes, b.ram_bytes, b.max_payload) == (32768, 2048, 64)
    assert b.connect_method == "simavr" and b.connect["mcu"] == "atmega328p"
    assert "-std=gnu99" in b.cflags and "-mmcu=atmega328p" in b.cflags
    assert b.toolchain_installed(), b.install
    assert "libsimavr-dev" in b.connect["install"]


def _symbol_sections(elf: Path, prefixes) -> dict[str, str]:
    with elf.open("rb") as f:
        e = ELFFile(f)
        secs = list(e.iter_sections())
        out = {}
        for sym in e.get_section_by_name(".symtab").iter_symbols():
            if sym.name.startswith(prefixes) and isinstance(sym["st_shndx"], int):
                out[sym.name] = secs[sym["st_shndx"]].name
    return out


def test_int8_builds_warning_free_with_weights_in_flash_and_fits(int8_fw):
    assert (int8_fw.out_dir / "build.log").read_text() == ""        # linker warnings too
    cmd = (int8_fw.out_dir / "build.cmd").read_text().split()
    assert cmd.index("-std=gnu99") > cmd.index("-std=c99")           # the board's -std wins
    m = int8_fw.memory
    assert m.weights_bytes > 4000 and m.flash_bytes > m.weights_bytes
    assert m.flash_bytes <= 32768
    # weights, biases and tables stay in flash (.text), so RAM holds far less than the weights
    assert m.ram_bytes < 1024 < m.weights_bytes and m.ram_bytes > m.arena_bytes
    # (the avr kernel variant's FULLY_CONNECTED streams are w*_avr, their biases op*_params_bias)
    consts = _symbol_sections(int8_fw.elf, ("w", "b", "op"))
    weights = {k: v for k, v in consts.items() if k[1:2].isdigit() or k.endswith("_params_bias")}
    assert len(weights) >= 6 and set(weights.values()) == {".text"}, weights


def test_memory_measured_on_the_board_fits_2_kib(int8_fw, tmp_path):
    with start(BOARD, int8_fw.elf) as sim:
        from quarl_edge.link.runner import BoardLink
        with BoardLink(sim.url, alive=sim.alive) as link:
            info = link.hello()
            assert (info.board_id, info.cost_unit, info.clock_hz) == ("atmega328p", "cycles", 16_000_000)
            link.infer([np.zeros((1, 4), np.float32)])
            mem = link.mem()
    # the board's own linker-symbol figures agree with the ELF's sections
    assert mem.flash_bytes == int8_fw.memory.flash_bytes
    assert mem.ram_bytes == int8_fw.memory.ram_bytes
    assert mem.ram_bytes + mem.stack_size == 2048
    assert 50 < mem.stack_used < mem.stack_size
    assert mem.ram_bytes + mem.stack_used <= 2048


def test_validate_int8_bit_exact_in_cycles(run_copy):
    res = cli_json("validate", run_copy / "models" / "int8.tflite", "--board", "atmega328p",
                   "--random", "50")
    assert res["bit_exact"] is True and res["max_abs_diff"] == 0.0 and res["n"] == 50
    assert res["latency"]["unit"] == "cycles" and res["latency"]["median"] > 10_000
    mem = res["memory"]
    assert mem["flash_bytes"] <= 32768 and mem["ram_bytes"] + mem["stack_bytes"] <= 2048


def _costs(model, out_dir, xs):
    with BoardSession(model, BOARD, out_dir) as s:
        costs = [s.link.infer([x])[1] for x in xs]
        bench = s.link.bench(3)
    return costs, bench


def test_cycle_counts_repeat_exactly_across_launches(run_copy, tmp_path):
    xs = [np.array([[0.01 * i, -0.2, 0.05 * i, 0.3]], np.float32) for i in range(3)]
    model = run_copy / "models" / "int8.tflite"
    first, bench = _costs(model, tmp_path / "a", xs)
    second, _ = _costs(model, tmp_path / "b", xs)
    assert first == second
    assert bench.n == 3 and bench.min == bench.max == first[-1]
    assert all(c % 65536 for c in first)     # Timer1's low 16 bits are read, not only its wraps


def test_hil_int8_equals_tflite_runtime(run_copy):
    res = cli_json("hil", run_copy, "--scheme", "int8", "--board", "atmega328p", "--episodes", "2")
    assert res["board"] == "atmega328p" and res["episodes"] == 2
    assert res["mean_return"] == res["tflite_mean_return"]
    assert res["latency"]["unit"] == "cycles"
    assert res["memory"]["stack_bytes"] > 0
    assert res["memory"]["flash_bytes"] > res["memory"]["weights_bytes"] > 0


def test_fp32_fits_the_328p_with_weights_in_flash_and_is_refused_by_a_smaller_avr(run_copy, tmp_path):
    # fp32 weights (18 KB) in flash: fits 32 KiB flash / 2 KiB RAM, and runs bit-exact (soft float)
    res = cli_json("validate", run_copy / "models" / "fp32.tflite", "--board", "atmega328p",
                   "--random", "10")
    assert res["bit_exact"] is True and res["latency"]["unit"] == "cycles"
    assert res["memory"]["flash_bytes"] > 18000
    # an ATmega168-sized part (16 KiB flash, 1 KiB RAM) refuses it at build, with the numbers
    text = BOARD.path.read_text().replace("flash_bytes = 32768", "flash_bytes = 16384")
    small = tmp_path / "atmega328p.toml"
    small.write_text(text)
    with pytest.raises(QuarlError, match=r"needs \d{5} B of flash; the board has 16384 B"):
        build(run_copy / "models" / "fp32.tflite", load_board_file(small), tmp_path / "fw")
    board = dataclasses.replace(BOARD, ram_bytes=512)
    with pytest.raises(QuarlError, match=r"needs \d{3} B of RAM; the board has 512 B"):
        build(run_copy / "models" / "fp32.tflite", board, tmp_path / "fw2")


def test_weights_larger_than_the_flash_are_does_not_fit_not_a_compiler_error(tmp_path):
    """A float model with 48 KiB of weights (a dense 96 x 128 layer; the MinAtar CNN's fp32
    weights are 528 KiB): avr-gcc refuses any array over 32 KiB ("size of array is too large"),
    which was reported as a failed build; the build now says, before compiling, that it does not
    fit, with the numbers (a study makes it a does-not-fit row)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers_models import convert, random_mlp
    path = tmp_path / "big.tflite"
    path.write_bytes(convert(random_mlp(0, 96, [128, 4], ["relu", "none"]), "float"))
    with pytest.raises(QuarlError, match=r"needs 5\d{4} B of flash; the board has 32768 B: the "
                                         r"model's weights alone do not fit"):
        build(path, BOARD, tmp_path / "fw")


def test_int16x8_and_int8_io_models_are_bit_exact(tmp_path):
    """int16x8 exercises the 64-bit requantization (whose constants once assumed a 32-bit int:
    wrong on AVR, where int has 16 bits), int8 I/O the LOGISTIC lookup table in flash."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers_models import convert, random_mlp
    for name, mode, n_in, widths, acts in [("int16x8_mlp", "int16x8", 6, [24, 3], ["relu", "none"]),
                                           ("sigmoid_int8_io", "int8_io", 5, [16, 4], ["relu6", "sigmoid"])]:
        calib = np.random.default_rng(0).normal(size=(200, n_in)).astype(np.float32)
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(convert(random_mlp(3, n_in, widths, acts, weight_scale=1.5), mode, calib))
        from quarl_edge.measure.validate import validate
        res = validate(path, BOARD, tmp_path / name, random_n=60, seed=1)
        assert res["bit_exact"] is True, (name, res)


def test_qe_flash_needs_gnu99_on_avr(tmp_path):
    src = tmp_path / "t.c"
    src.write_text('#include "qe_flash.h"\nint main(void) { return 0; }\n')
    proc = subprocess.run(["avr-gcc", "-mmcu=atmega328p", "-std=c99", f"-I{ROOT / 'firmware/core'}",
                           "-c", str(src), "-o", str(tmp_path / "t.o")], capture_output=True, text=True)
    assert proc.returncode != 0 and "-std=gnu99" in proc.stderr


def test_the_bridge_builds_warning_free(tmp_path):
    inc = next(d for d in simavr.SIMAVR_INCLUDE_DIRS if (d / "sim_avr.h").is_file())
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{inc}",
                    str(simavr.SIMAVR_BRIDGE_SOURCE), "-o", str(tmp_path / "bridge"),
                    *simavr.SIMAVR_LIBS], check=True)


def test_the_bridge_is_one_thread_and_survives_the_port_closed_and_reopened(int8_fw, tmp_path):
    """The bridge moves the UART's bytes in the simulation's own thread (libsimavrparts'
    uart_pty fed the UART from a second thread and, on a loaded machine, now and then stopped
    taking bytes for good): one thread in /proc. It holds the pty's slave side open itself, so
    a host that closes the port and opens it again finds the board answering."""
    from quarl_edge.link.runner import BoardLink
    running = start(BOARD, int8_fw.elf)
    try:
        assert len(list(Path(f"/proc/{running.proc.pid}/task").iterdir())) == 1
        boots = set()
        for _ in range(3):
            with BoardLink(running.url, alive=running.alive) as link:
                boots.add(link.hello(20.0).boot_id)
                (y,), cycles = link.infer([np.full((1, 4), 0.25, np.float32)])
                assert y.shape[-1] == 2 and cycles > 0
        assert len(boots) == 1          # the same board all along: it never restarted
    finally:
        running.stop()


def test_missing_simavr_headers_say_how_to_install_them(monkeypatch, int8_fw, tmp_path):
    monkeypatch.setattr(simavr, "SIMAVR_INCLUDE_DIRS", (tmp_path / "no-such-include",))
    elf = tmp_path / "firmware.elf"
    shutil.copy(int8_fw.elf, elf)                       # a fresh directory: no cached bridge
    with pytest.raises(ToolchainError, match="apt-get install --no-install-recommends simavr "
                                             "gcc-avr avr-libc libsimavr-dev libsimavrparts1"):
        Simavr(BOARD, elf)


def test_a_bridge_that_cannot_start_is_reported_with_its_exit(int8_fw, tmp_path):
    board = dataclasses.replace(BOARD, connect={**BOARD.connect, "mcu": "atmega9999"})
    with pytest.raises(BoardError) as e:
        start(board, int8_fw.elf)
    msg = str(e.value)
    assert "exited with code 2" in msg and "atmega9999" in msg and "simavr_bridge" in msg


def test_a_non_avr_elf_is_refused(tmp_path):
    with pytest.raises(BoardError, match="not an AVR firmware ELF"):
        start(BOARD, Path(sys.executable).resolve())


def test_a_dead_simulator_is_reported_with_its_exit(run_copy, tmp_path):
    with pytest.raises(BoardError) as e:
        with BoardSession(run_copy / "models" / "int8.tflite", BOARD, tmp_path) as s:
            s.link.infer([np.zeros((1, 4), np.float32)])
            s.running.proc.kill()
            s.running.proc.wait()
            s.link.infer([np.zeros((1, 4), np.float32)])
    assert "killed by signal 9" in str(e.value)
