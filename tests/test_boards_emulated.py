"""Every emulated board (boards/*.toml with [connect] method = "qemu"), end to end as a user runs it:
build warning-free, start QEMU (qemu-system-arm, qemu-system-riscv32), talk the protocol over its serial port (a socket),
bit-exact against TF Lite Micro, HIL equal to tflite-runtime, costs in instructions that repeat
exactly across emulator launches; and the clear errors (dead emulator, bad ELF, does not fit)."""
import dataclasses
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers_models import cli_json

from quarl_edge.targets import qemu
from quarl_edge.targets.boards import all_boards, load_board_file
from quarl_edge.targets.build import build
from quarl_edge.core.errors import BoardError, QuarlError, ToolchainError
from quarl_edge.link.session import BoardSession
from quarl_edge.targets.launch import start
from quarl_edge.targets.qemu import Qemu
from quarl_edge.link.runner import BoardLink

ROOT = Path(__file__).resolve().parents[1]
QEMU_BOARDS = sorted(b.id for b in all_boards().values() if b.connect_method == "qemu")
BOARDS = all_boards()






def test_there_are_emulated_boards():
    assert {"mps2-an386", "mps2-an500", "mps2-an505", "lm3s6965evb", "hifive1"} <= set(QEMU_BOARDS)
    for bid in QEMU_BOARDS:
        b = BOARDS[bid]
        assert b.kind == "emulated" and b.cost_unit == "instructions"
        assert b.toolchain_installed(), b.install


@pytest.mark.parametrize("board", QEMU_BOARDS)
@pytest.mark.parametrize("scheme", ["int8", "fp32"])
def test_build_is_warning_free_and_fits(run_copy, tmp_path, board, scheme):
    fw = build(run_copy / "models" / f"{scheme}.tflite", BOARDS[board], tmp_path / "fw")
    assert (tmp_path / "fw" / "build.log").read_text() == ""     # linker warnings too
    m = fw.memory
    assert m.flash_bytes > m.weights_bytes > 0
    assert m.ram_bytes > m.arena_bytes > 0
    assert m.flash_bytes <= BOARDS[board].flash_bytes and m.ram_bytes <= BOARDS[board].ram_bytes


@pytest.mark.parametrize("board", QEMU_BOARDS)
@pytest.mark.parametrize("scheme", ["int8", "fp32"])
def test_validate_bit_exact_on_the_emulator(run_copy, board, scheme):
    res = cli_json("validate", run_copy / "models" / f"{scheme}.tflite", "--board", board,
                   "--random", "100")
    assert res["bit_exact"] is True and res["max_abs_diff"] == 0.0 and res["n"] == 100
    assert res["latency"]["unit"] == "instructions" and res["latency"]["median"] > 1000
    mem = res["memory"]
    assert mem["flash_bytes"] > 0 and mem["ram_bytes"] > mem["arena_bytes"] > 0
    assert 0 < mem["stack_bytes"] < 8192


@pytest.mark.parametrize("board", QEMU_BOARDS)
def test_hil_int8_on_the_emulator_equals_tflite_runtime(run_copy, board):
    res = cli_json("hil", run_copy, "--scheme", "int8", "--board", board, "--episodes", "2")
    assert res["board"] == board and res["episodes"] == 2
    assert res["mean_return"] == res["tflite_mean_return"]
    assert res["latency"]["unit"] == "instructions" and res["latency"]["median"] > 1000
    assert res["memory"]["stack_bytes"] > 0
    assert res["memory"]["flash_bytes"] > res["memory"]["weights_bytes"] > 0


def _costs(model, board, out_dir, xs):
    with BoardSession(model, board, out_dir) as s:
        costs = [s.link.infer([x])[1] for x in xs]
        bench = s.link.bench(5)
    return costs, bench


@pytest.mark.parametrize("board", QEMU_BOARDS)
def test_instruction_counts_repeat_exactly_across_launches(run_copy, tmp_path, board):
    xs = [np.array([[0.01 * i, -0.2, 0.05 * i, 0.3]], np.float32) for i in range(4)]
    model = run_copy / "models" / "int8.tflite"
    first, bench = _costs(model, BOARDS[board], tmp_path / "a", xs)
    second, _ = _costs(model, BOARDS[board], tmp_path / "b", xs)
    assert first == second
    # BENCH replays the last input: the same count every time, equal to its INFER
    assert bench.n == 5 and bench.min == bench.max == first[-1]


def test_a_dead_emulator_is_reported_with_its_exit(run_copy, tmp_path):
    board = BOARDS["mps2-an386"]
    with pytest.raises(BoardError) as e:
        with BoardSession(run_copy / "models" / "int8.tflite", board, tmp_path) as s:
            s.link.infer([np.zeros((1, 4), np.float32)])
            s.running.proc.kill()
            s.running.proc.wait()
            s.link.infer([np.zeros((1, 4), np.float32)])
    # the link finds out by a failed read ("stopped answering") or a failed write ("connection
    # reset"), whichever comes first; either way the error names what killed the board
    assert "killed by signal 9" in str(e.value), str(e.value)


def test_a_garbage_elf_is_a_clear_error(tmp_path):
    elf = tmp_path / "firmware.elf"
    elf.write_bytes(b"\x7fELF this is not firmware" * 20)
    with pytest.raises(BoardError, match="firmware.elf is not a(n ARM)? firmware ELF"):
        start(BOARDS["mps2-an386"], elf)
    host_elf = Path(sys.executable).resolve()   # a valid ELF, for the wrong machine
    with pytest.raises(BoardError, match="not an ARM firmware ELF"):
        start(BOARDS["mps2-an386"], host_elf)


def test_an_emulator_that_exits_at_start_is_reported_with_its_output(run_copy, tmp_path):
    fw = build(run_copy / "models" / "int8.tflite", BOARDS["mps2-an386"], tmp_path / "fw")
    board = _board_variant(tmp_path, "mps2-an386", machine='"no-such-machine"')
    with pytest.raises(BoardError) as e:
        start(board, fw.elf)
    msg = str(e.value)
    assert "exited with code 1" in msg and "no-such-machine" in msg and "qemu-system-arm" in msg


def test_a_missing_emulator_says_how_to_install_it(monkeypatch, tmp_path):
    real_which = shutil.which
    monkeypatch.setattr(qemu.shutil, "which",
                        lambda name: None if name.startswith("qemu") else real_which(name))
    with pytest.raises(ToolchainError, match="apt-get install --no-install-recommends qemu-system-arm"):
        Qemu(BOARDS["lm3s6965evb"], tmp_path / "firmware.elf")


def _board_variant(tmp_path, board_id, **changes):
    """A copy of a shipped board file in tmp_path, with some top-level keys changed."""
    text = BOARDS[board_id].path.read_text()
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        lines.append(f"{key} = {changes[key]}" if key in changes else line)
    path = tmp_path / f"{board_id}.toml"
    path.write_text("\n".join(lines) + "\n")
    return load_board_file(path)


def test_firmware_too_big_for_the_board_is_refused(run_copy, tmp_path):
    board = _board_variant(tmp_path, "lm3s6965evb", flash_bytes=16384)
    with pytest.raises(QuarlError, match=r"needs \d+ B of flash; the board has 16384 B"):
        build(run_copy / "models" / "fp32.tflite", board, tmp_path / "fw")


def test_linker_overflow_is_a_does_not_fit_error(run_copy, tmp_path):
    board = BOARDS["lm3s6965evb"]
    board = dataclasses.replace(board, ldflags=board.ldflags + ("-Wl,--defsym=__stack_size=0x20000",))
    with pytest.raises(QuarlError, match="does not fit the board's memory.*RAM"):
        build(run_copy / "models" / "int8.tflite", board, tmp_path / "fw")


def test_the_serial_port_is_a_unix_socket_that_echoes(run_copy, tmp_path):
    fw = build(run_copy / "models" / "int8.tflite", BOARDS["mps2-an505"], tmp_path)
    with start(BOARDS["mps2-an505"], fw.elf) as q:
        assert q.url.startswith("unix:///") and Path(q.url[len("unix://"):]).is_socket()
        with BoardLink(q.url, alive=q.alive) as link:
            info = link.hello()
            assert info.board_id == "mps2-an505" and info.cost_unit == "instructions"
            payload = bytes(range(256)) * 8
            assert link.echo(payload) == payload
    assert not q.alive()


# QEMU's serial chardev is a mux (targets/qemu.py, SERIAL_BUFFER), which would read its escape
# character (0x01 by default) out of the stream: "C-a x" quits the emulator, "C-a c" switches
# to the monitor, "C-a C-a" sends one 0x01. With no escape character (NO_ESCAPE_CHAR) every byte
# passes as it is.
MUX_ESCAPES = b"".join(b"\x01" + bytes([c]) for c in b"hxsbct?\x01\x02") + b"\x01\x01x\x01"


@pytest.mark.parametrize("board", QEMU_BOARDS)
def test_every_byte_passes_the_serial_chardev_unchanged(run_copy, tmp_path, board):
    fw = build(run_copy / "models" / "int8.tflite", BOARDS[board], tmp_path)
    with start(BOARDS[board], fw.elf) as q, BoardLink(q.url, alive=q.alive) as link:
        info = link.hello()
        room = min(info.max_payload, 128)
        data = bytes(range(256)) + MUX_ESCAPES
        for off in range(0, len(data), room):
            assert link.echo(data[off:off + room]) == data[off:off + room]
        assert link.echo(MUX_ESCAPES[-room:]) == MUX_ESCAPES[-room:]
        assert q.alive()
