"""Flashing real boards (quarl_edge/targets/flash.py): the argument list each vendor tool gets, the images
we write (Intel HEX, UF2) checked against binutils, the board files' [flash] and [connect], tool
choice and missing-tool messages, and how a tool is run. (Split for issue 25: drive copies, the
serial port by USB VID:PID, the whole path and the real tools' failure paths are in
test_flash_drives.py; what both use in helpers_flash.py.)"""
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from helpers_flash import REAL, parse_uf2, real_board, record_argv, tiny_elf_once, tool_on_path
from quarl_edge.targets import flash as F
from quarl_edge.targets import flash_tools as FT
from quarl_edge.targets.boards import load_board_file
from quarl_edge.core.errors import BoardError, ToolchainError


# ------------------------------------------------------------------- argument lists (pure)
def test_each_tool_gets_an_argument_list():
    elf, hexf = Path("/b/fw.elf"), Path("/b/fw.hex")
    assert F.openocd_args({"config": ["interface/stlink.cfg", "target/stm32f4x.cfg"]}, elf) == [
        "openocd", "-f", "interface/stlink.cfg", "-f", "target/stm32f4x.cfg",
        "-c", "program {/b/fw.elf} verify reset exit"]
    assert F.openocd_args({"config": ["board/x.cfg"], "commands": ["adapter speed 1000"]},
                          Path("/my dir/fw.elf"))[3:] == [
        "-c", "adapter speed 1000", "-c", "program {/my dir/fw.elf} verify reset exit"]
    with pytest.raises(BoardError, match="braces"):
        F.openocd_args({"config": ["b.cfg"]}, Path("/a{b}/fw.elf"))
    assert F.pyocd_args({"target": "stm32f446re"}, elf) == ["pyocd", "flash", "-t", "stm32f446re",
                                                            "/b/fw.elf"]
    assert F.avrdude_args({"partno": "m328p", "programmer": "arduino", "baud": 115200},
                          Path("fw.hex"), "/dev/ttyACM0") == [
        "avrdude", "-p", "m328p", "-c", "arduino", "-P", "/dev/ttyACM0", "-b", "115200", "-D",
        "-U", "flash:w:fw.hex:i"]
    assert "-b" not in F.avrdude_args({"partno": "m328p", "programmer": "arduino"}, hexf, "COM3")
    with pytest.raises(BoardError, match="':'"):
        F.avrdude_args({"partno": "m328p", "programmer": "arduino"}, Path("/a:b/fw.hex"), "p")
    assert F.picotool_args({}, elf) == ["picotool", "load", "-x", "/b/fw.elf"]
    assert F.teensy_args({"mcu": "TEENSY41"}, hexf) == ["teensy_loader_cli", "--mcu=TEENSY41", "-w",
                                                        "-v", "/b/fw.hex"]
    assert F.esptool_args({"chip": "esp32c3", "chip_id": 5}, Path("/b/fw.esp.bin"),
                          "/dev/ttyACM0") == [
        "esptool.py", "--chip", "esp32c3", "--port", "/dev/ttyACM0", "--baud", "460800",
        "--after", "hard_reset", "write_flash", "--flash_mode", "keep", "--flash_size", "keep",
        "0x0", "/b/fw.esp.bin"]


def test_an_esp_image_reads_back_with_its_checksum_and_hash():
    from test_boards_real_build import parse_esp_image   # our reader, not the writer
    segs = [(0x3FCB0000, b"\x01\x02\x03"), (0x40380000, bytes(range(40)))]
    raw = F.esp_image(segs, 0x40380000, 5)
    head, back = parse_esp_image(raw)
    assert head == {"magic": 0xE9, "mode": 2, "speed_size": 0x20, "entry": 0x40380000,
                    "wp": 0xEE, "chip_id": 5}
    assert back == [(0x3FCB0000, b"\x01\x02\x03\x00"), (0x40380000, bytes(range(40)))]
    broken = bytearray(raw)
    broken[33] ^= 1                       # a flipped bit in the first segment's data
    with pytest.raises(AssertionError, match="checksum"):
        parse_esp_image(bytes(broken))
    with pytest.raises(BoardError, match="at most 16 segments"):
        F.esp_image([(4 * i, b"abcd") for i in range(17)], 0, 5)


# ---------------------------------------------------------------------------- Intel HEX
def parse_ihex(text: str) -> dict[int, int]:
    """An independent reader: address -> byte, checking every record's checksum."""
    mem, upper, ended = {}, 0, False
    for line in text.splitlines():
        assert line.startswith(":") and not ended
        raw = bytes.fromhex(line[1:])
        assert sum(raw) & 0xFF == 0, f"bad checksum: {line}"
        n, addr, rtype, data = raw[0], int.from_bytes(raw[1:3], "big"), raw[3], raw[4:-1]
        assert len(data) == n
        if rtype == 0:
            assert addr + n <= 0x10000        # a record never wraps its 64 KiB window
            for i, b in enumerate(data):
                assert (upper + addr + i) not in mem
                mem[upper + addr + i] = b
        elif rtype == 4:
            upper = int.from_bytes(data, "big") << 16
        elif rtype == 1:
            ended = True
        elif rtype in (3, 5):               # start address (objcopy writes the ELF's entry)
            pass
        else:
            raise AssertionError(f"unexpected record type {rtype}")
    assert ended
    return mem


def flat(segments):
    return {a + i: b for a, d in segments for i, b in enumerate(d)}


SEGMENTS = [(0x0800_0000, bytes(range(256)) * 300),          # crosses 0x0801_0000
            (0x0801_2C05, b"\x12\x34\x56"),                     # odd address, short
            (0x0802_0000 - 5, b"ABCDEFGHIJ")]                    # straddles a 64 KiB window


def test_intel_hex_parses_back_to_the_segments():
    text = F.intel_hex(SEGMENTS)
    assert parse_ihex(text) == flat(SEGMENTS)
    assert text.splitlines()[-1] == ":00000001FF"
    assert ":020000040801F1" in text.splitlines()   # extended linear address 0x0801


def test_intel_hex_reads_back_with_binutils_objcopy(tmp_path):
    objcopy = shutil.which("objcopy") or shutil.which("arm-none-eabi-objcopy")
    if objcopy is None:
        pytest.skip("no objcopy (binutils) to read the HEX back")
    segs = [(0x1000, b"\x01\x02\x03\x04" * 5000), (0x1000 + 20000 + 12, b"tail")]
    (tmp_path / "a.hex").write_text(F.intel_hex(segs))
    subprocess.run([objcopy, "-I", "ihex", "-O", "binary", "a.hex", "a.bin"], cwd=tmp_path,
                   check=True)
    expected = segs[0][1] + b"\0" * 12 + b"tail"     # objcopy fills the gap with zeros
    assert (tmp_path / "a.bin").read_bytes() == expected


# --------------------------------------------------------------------------------- UF2
def test_uf2_blocks_cover_the_segments_with_the_family_id():
    segs = [(0x1000_0000, bytes(range(256)) * 3 + b"xyz"), (0x1000_0400 + 17, b"late")]
    blocks = parse_uf2(F.uf2(segs, 0xE48BFF56, base=0x1000_0000, size=2 << 20))
    assert [b[3] for b in blocks] == list(range(len(blocks)))      # block numbers in order
    assert {b[4] for b in blocks} == {len(blocks)} == {5}
    for flags, addr, size, _, _, fam, _ in blocks:
        assert flags == 0x2000 and fam == 0xE48BFF56 and size == 256 and addr % 256 == 0
    image = {a + i: v for _, a, _, _, _, _, d in blocks for i, v in enumerate(d)}
    assert all(image[a] == v for a, v in flat(segs).items())
    assert [b[1] for b in blocks] == [0x1000_0000, 0x1000_0100, 0x1000_0200, 0x1000_0300,
                                      0x1000_0400]


def test_uf2_refuses_bytes_outside_the_flash():
    with pytest.raises(BoardError, match="outside the flash"):
        F.uf2([(0x2000_0000, b"ram")], 0xE48BFF56, base=0x1000_0000, size=2 << 20)
    with pytest.raises(BoardError, match="outside the flash"):
        F.uf2([(0x1000_0000 + (2 << 20) - 2, b"over")], 1, base=0x1000_0000, size=2 << 20)


@pytest.fixture(scope="module")
def tiny_elf(tmp_path_factory, worker_id):
    return tiny_elf_once(tmp_path_factory, worker_id)


def test_hex_from_the_elf_equals_objcopys(tiny_elf, tmp_path):
    segs = F.loadable_segments(tiny_elf)
    # .data is stored in flash (its load address), right after the code and constants
    assert all(0x0800_0000 <= a < 0x0808_0000 for a, _ in segs)
    assert struct.pack("<I", 0x12345678) in segs[-1][1]
    ref = tmp_path / "ref.hex"
    subprocess.run(["arm-none-eabi-objcopy", "-O", "ihex", str(tiny_elf), str(ref)], check=True)
    assert parse_ihex(F.intel_hex(segs)) == parse_ihex(ref.read_text())


def test_write_image_picks_each_tools_format(tiny_elf, tmp_path):
    elf = tmp_path / "firmware.elf"
    shutil.copy(tiny_elf, elf)
    flash = ('tools = ["daplink", "uf2", "openocd"]\n[flash.daplink]\nvolume = "MICROBIT"\n'
             '[flash.uf2]\nvolume = "RPI-RP2"\nfamily_id = 0x57755a57\nbase = 0x08000000\n'
             '[flash.openocd]\nconfig = ["board/x.cfg"]\n')
    b = real_board(tmp_path, flash)
    assert F.write_image(b, "openocd", elf) == elf
    hexf = F.write_image(b, "daplink", elf)
    assert hexf.name == "firmware.hex" and parse_ihex(hexf.read_text()) == flat(F.loadable_segments(elf))
    blocks = parse_uf2(F.write_image(b, "uf2", elf).read_bytes())
    assert {b[5] for b in blocks} == {0x57755A57}
    small = real_board(tmp_path, flash, name="small", flash_bytes=4096)
    with pytest.raises(BoardError, match="outside the flash"):
        F.write_image(small, "uf2", elf)
    (tmp_path / "junk.elf").write_text("not an elf")
    with pytest.raises(BoardError, match="not a firmware ELF"):
        F.write_image(b, "openocd", tmp_path / "junk.elf")


# ----------------------------------------------------------- board files: [flash], [connect]
@pytest.mark.parametrize("flash, message", [
    ('tools = ["jlink"]', "unknown flash tool 'jlink'; known tools: openocd, pyocd, daplink"),
    ('tools = []', "non-empty list"),
    ('tools = ["pyocd"]', "flash tool 'pyocd' needs a [flash.pyocd] table with 'target'"),
    ('tools = ["pyocd"]\n[flash.pyocd]\ntarget = 5', "'target' must be str"),
    ('tools = ["avrdude"]\n[flash.avrdude]\npartno = "m328p"', "missing key 'programmer'"),
    ('tools = ["pyocd"]\n[flash.pyocd]\ntarget = "x"\ntargte = "y"', "unknown key(s) targte"),
    ('tools = ["pyocd"]\n[flash.pyocd]\ntarget = "x"\n[flash.openocd]\nconfig = ["a.cfg"]',
     "[flash.openocd] is given but 'openocd' is not in 'tools'"),
    ('tools = ["openocd"]\n[flash.openocd]\nconfig = []', "at least one OpenOCD .cfg"),
    ('tools = ["pyocd", "pyocd"]\n[flash.pyocd]\ntarget = "x"', "twice"),
    ('tools = ["picotool"]\ntimeout_s = -1', "timeout_s"),
])
def test_bad_flash_sections_are_refused(tmp_path, flash, message):
    with pytest.raises(BoardError) as e:
        real_board(tmp_path, flash)
    assert message in str(e.value) and "mine.toml" in str(e.value)


def test_a_real_board_needs_a_flash_section_and_valid_connect(tmp_path):
    with pytest.raises(BoardError, match=r"mine.toml \[flash\]: missing key 'tools'"):
        real_board(tmp_path, "")
    text = REAL.format(id="mine", flash="", family="host", cc="gcc", unit="ns", reset=0,
                       flash_bytes=0).replace("[flash]\n", "")
    (tmp_path / "mine.toml").write_text(text)
    with pytest.raises(BoardError, match=r"a real board needs a \[flash\] table"):
        load_board_file(tmp_path / "mine.toml")
    with pytest.raises(BoardError, match="'reset_on_open_ms' must be >= 0"):
        real_board(tmp_path, reset=-5)
    b = real_board(tmp_path, reset=2500)
    assert (b.baud, b.reset_on_open_ms, b.flashers) == (115200, 2500, ("openocd", "pyocd"))
    assert b.flash_config["openocd"]["config"] == ["board/st_nucleo_f4.cfg"]
    b = real_board(tmp_path, 'tools = ["openocd"]\n[flash.openocd]\nconfig = "board/one.cfg"')
    assert b.flash_config["openocd"]["config"] == ["board/one.cfg"]


# --------------------------------------------------------------- tool choice and presence
def present(*names):
    return lambda prog: f"/usr/bin/{prog}" if prog in names else None


def test_the_first_installed_tool_is_used(tmp_path, monkeypatch):
    b = real_board(tmp_path)
    monkeypatch.setattr(FT, "find_program", present("openocd", "pyocd"))
    assert F.pick_tool(b) == "openocd" and F.pick_tool(b, "pyocd") == "pyocd"
    monkeypatch.setattr(FT, "find_program", present("pyocd"))
    assert F.pick_tool(b) == "pyocd"
    assert FT.describe_tools(b) == ("openocd missing (apt-get install --no-install-recommends "
                                   "openocd); pyocd ok")
    assert b.missing_tools() == b.missing_build_tools()       # one flasher is enough
    with pytest.raises(ToolchainError) as e:
        F.pick_tool(b, "openocd")
    assert str(e.value) == ("'openocd' (flash tool 'openocd' for board mine) is not installed; "
                            "install it with: apt-get install --no-install-recommends openocd")
    with pytest.raises(BoardError, match="flashed with openocd, pyocd; not 'avrdude'"):
        F.pick_tool(b, "avrdude")


def test_no_installed_tool_names_every_install_command(tmp_path, monkeypatch):
    b = real_board(tmp_path)
    monkeypatch.setattr(FT, "find_program", present())
    with pytest.raises(ToolchainError) as e:
        F.flash(b, tmp_path / "firmware.elf")
    assert "apt-get install --no-install-recommends openocd" in str(e.value)
    assert "pip install pyocd" in str(e.value)
    both = "apt-get install --no-install-recommends openocd or pip install pyocd"
    assert ("openocd or pyocd", both) in b.missing_tools()
    status = b.flasher_status()
    assert [s["status"] for s in status] == ["missing", "missing"]


def test_drive_copies_need_no_program(tmp_path, monkeypatch):
    monkeypatch.setattr(FT, "find_program", present())
    b = real_board(tmp_path, 'tools = ["daplink", "pyocd"]\n[flash.daplink]\nvolume = "MICROBIT"\n'
                             '[flash.pyocd]\ntarget = "nrf51"')
    assert F.pick_tool(b) == "daplink" and b.missing_tools() == b.missing_build_tools()
    assert FT.describe_tools(b).startswith("copy to MICROBIT drive; pyocd missing (pip install pyocd)")


def test_flash_runs_the_tool_without_a_shell(tiny_elf, tmp_path, monkeypatch):
    log = tmp_path / "argv.json"
    openocd = tool_on_path(tmp_path, monkeypatch, "openocd", record_argv(log))
    build = tmp_path / "a dir; rm -rf $HOME"          # shell metacharacters stay literal
    build.mkdir()
    elf = build / "firmware.elf"
    shutil.copy(tiny_elf, elf)
    res = F.flash(real_board(tmp_path), elf)
    import json
    assert json.loads(log.read_text())[1:] == ["-f", "board/st_nucleo_f4.cfg", "-c",
                                               f"program {{{elf}}} verify reset exit"]
    assert res.tool == "openocd" and res.command[0] == str(openocd)


def test_a_failing_tool_is_a_board_error_with_its_last_lines(tiny_elf, tmp_path, monkeypatch):
    pyocd = tool_on_path(tmp_path, monkeypatch, "pyocd",
                         "print('\\n'.join(f'line {i}' for i in range(40)));"
                         "print('0000 C No connected debug probes', file=sys.stderr);"
                         "sys.exit(1)")
    with pytest.raises(BoardError) as e:
        F.flash(real_board(tmp_path), tiny_elf, flasher="pyocd")
    msg = str(e.value)
    assert "pyocd failed flashing board mine (exit code 1)" in msg
    assert "No connected debug probes" in msg and "line 39" in msg and "line 5\n" not in msg
    assert f"command: {pyocd} flash -t stm32f446re {tiny_elf}" in msg


def test_avrdude_out_of_step_before_writing_is_retried_and_nothing_else(tmp_path):
    """flash() runs avrdude once more when it lost step with the boot loader before its first
    page (stale answers to its early GET_SYNCs, seen on a loaded host's emulated Uno): the
    classification of its log, on avrdude 7's own words from such a run."""
    from quarl_edge.targets.flash import _lost_sync
    lost = ('avrdude OS error: ioctl("TIOCMGET"): Inappropriate ioctl for device\n'
            "avrdude error: protocol expects OK byte 0x10 but got 0x14\n"
            "avrdude error: protocol expects sync byte 0x14 but got 0x10\n"
            "avrdude error: initialization failed, rc=-1\n"
            "avrdude done.  Thank you.\n")
    cases = {"lost": (lost, True),
             "no-answer": ("avrdude: stk500_recv(): programmer is not responding\n"
                           "avrdude error: initialization failed, rc=-1\n", False),
             "after-writing": ("avrdude: writing flash (9876 bytes):\n" + lost, False),
             "verify": ("avrdude: verification error, first mismatch at byte 0x0100\n", False)}
    for name, (text, want) in cases.items():
        log = tmp_path / f"{name}.log"
        log.write_text(text)
        assert _lost_sync(log) is want, name
    assert _lost_sync(tmp_path / "missing.log") is False
