"""Build outputs beside firmware.elf: firmware.bin (from the lowest load address, gaps 0xFF) and
firmware.hex (flash.py's Intel HEX writer), equal to binutils' objcopy output for an
mps2-an386 build; the memory report in % of the board's flash and RAM."""
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from quarl_edge.core.errors import QuarlError
from quarl_edge.targets import build as B
from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import MemoryReport, binary_image, write_images
from test_boards_real_build import parse_ihex   # our reader of Intel HEX, not the writer

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"
OLD_MEMORY_KEYS = {"flash_bytes", "ram_bytes", "arena_bytes", "weights_bytes", "stack_bytes"}


def test_a_bin_fills_the_gaps_with_0xff():
    assert binary_image([(0x100, b"ab")]) == (0x100, b"ab")
    assert binary_image([(0x100, b"ab"), (0x104, b"c"), (0x105, b"de")]) == \
        (0x100, b"ab\xff\xffcde")


def test_a_bin_refuses_segments_far_apart():
    with pytest.raises(QuarlError, match=r"0x00000000\.\.0x00000002 and 0x20000000\.\.0x20000001 "
                                         r"lie 512\.0 MiB apart.*firmware\.hex"):
        binary_image([(0, b"ab"), (0x20000000, b"c")])
    assert binary_image([(0, b"a"), (2, b"b")], max_gap=1) == (0, b"a\xffb")
    with pytest.raises(QuarlError):
        binary_image([(0, b"a"), (3, b"b")], max_gap=1)


def test_flash_and_ram_far_apart_give_a_hex_and_say_why_there_is_no_bin(tmp_path, monkeypatch):
    elf = tmp_path / "firmware.elf"
    elf.write_bytes(b"")
    (tmp_path / "firmware.bin").write_bytes(b"stale")          # from an earlier build
    monkeypatch.setattr(B, "loadable_segments", lambda e: [(0x0, b"\x01\x02"), (0x20000000, b"\x03")])
    bin_path, address, hex_path, notes = write_images(get_board("mps2-an386"), elf)
    assert bin_path is None and address is None and not (tmp_path / "firmware.bin").exists()
    assert hex_path == tmp_path / "firmware.hex"
    assert parse_ihex(hex_path.read_text()) == {0: 1, 1: 2, 0x20000000: 3}
    assert len(notes) == 1 and notes[0].startswith("no firmware.bin: ") and "512.0 MiB" in notes[0]


def test_a_host_build_is_a_program_and_gets_no_image(tmp_path):
    bin_path, address, hex_path, notes = write_images(get_board("host"), tmp_path / "firmware.elf")
    assert (bin_path, address, hex_path) == (None, None, None) and "host program" in notes[0]


def test_memory_report_percentages():
    m = MemoryReport(1000, 300, 100, 500, board_flash_bytes=4000, board_ram_bytes=0)
    assert (m.flash_percent, m.ram_percent) == (25.0, None)
    d = dataclasses.asdict(m)
    assert d["board_flash_bytes"] == 4000 and d["flash_percent"] == 25.0
    assert MemoryReport(**d) == m                                   # memory.json round-trips
    assert MemoryReport(1, 2, 0, 0).flash_percent is None           # no board size given


@pytest.fixture(scope="module")
def mps2(tmp_path_factory):
    board = get_board("mps2-an386")
    objcopy = "arm-none-eabi-objcopy"
    if shutil.which(board.cc) is None or shutil.which(objcopy) is None:
        pytest.skip(f"{board.cc} / {objcopy} not installed: {board.install}")
    d = tmp_path_factory.mktemp("mps2")
    shutil.copy(MODEL, d / "int8.tflite")
    return B.build(d / "int8.tflite", board, d / "build"), objcopy


def loadable_sections(elf: Path) -> list[str]:
    with elf.open("rb") as f:
        return [s.name for s in ELFFile(f).iter_sections() if s["sh_flags"] & SH_FLAGS.SHF_ALLOC
                and s["sh_type"] != "SHT_NOBITS" and s["sh_size"] > 0]


def test_mps2_build_writes_a_bin_equal_to_objcopys(mps2, tmp_path):
    fw, objcopy = mps2
    assert fw.bin == fw.out_dir / "firmware.bin" and fw.bin_address == 0 and fw.image_notes == ()
    ref = tmp_path / "objcopy.bin"
    # the sections with contents only: objcopy -O binary also places the empty .data at its RAM
    # address, 0x20000000, which pads the file to 512 MiB
    sections = [a for s in loadable_sections(fw.elf) for a in ("-j", s)]
    subprocess.run([objcopy, "-O", "binary", "--gap-fill", "0xff", *sections, str(fw.elf), str(ref)],
                   check=True)
    assert fw.bin.read_bytes() == ref.read_bytes()


def test_mps2_build_writes_a_hex_equal_to_objcopys(mps2, tmp_path):
    fw, objcopy = mps2
    assert fw.hex == fw.out_dir / "firmware.hex"
    ref = tmp_path / "objcopy.hex"
    subprocess.run([objcopy, "-O", "ihex", str(fw.elf), str(ref)], check=True)
    ours = parse_ihex(fw.hex.read_text())
    assert ours == parse_ihex(ref.read_text())
    assert bytes(ours[a] for a in sorted(ours)) == fw.bin.read_bytes()   # no gaps here


def test_mps2_memory_report_in_percent_of_the_board(mps2):
    fw, _ = mps2
    m, b = fw.memory, fw.board
    assert (m.board_flash_bytes, m.board_ram_bytes) == (b.flash_bytes, b.ram_bytes) != (0, 0)
    assert m.flash_percent == round(100 * m.flash_bytes / b.flash_bytes, 2) > 0
    assert m.ram_percent == round(100 * m.ram_bytes / b.ram_bytes, 2) > 0
    saved = json.loads((fw.out_dir / "memory.json").read_text())
    assert OLD_MEMORY_KEYS <= set(saved) and saved == dataclasses.asdict(m)


def test_a_build_that_does_not_fit_leaves_no_image_of_an_earlier_build(tmp_path):
    from quarl_edge.targets.boards import load_board_file
    from test_boards import GOOD
    (tmp_path / "tiny.toml").write_text(GOOD.format(id="tiny").replace("flash_bytes = 4194304",
                                                                      "flash_bytes = 100"))
    out = tmp_path / "build"
    out.mkdir()
    for name in ("firmware.bin", "firmware.hex"):
        (out / name).write_text("an earlier build's image")
    shutil.copy(MODEL, tmp_path / "int8.tflite")
    with pytest.raises(QuarlError, match="needs .* B of flash; the board has 100 B"):
        B.build(tmp_path / "int8.tflite", load_board_file(tmp_path / "tiny.toml"), out)
    assert not (out / "firmware.bin").exists() and not (out / "firmware.hex").exists()
