"""Flashing real boards (quarl_edge/targets/flash.py): the argument list each vendor tool gets, the images
we write (Intel HEX, UF2) checked against binutils, tool choice and missing-tool messages, drive
copies (DAPLink, UF2) on a simulated drive, finding the serial port by USB VID:PID, and the real
tools' failure paths when they are installed (avrdude, openocd, teensy_loader_cli, picotool)."""
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import tty
from pathlib import Path

import pytest

from quarl_edge.targets import flash as F
from quarl_edge.targets import flash_tools as FT
from quarl_edge.targets.boards import load_board_file
from quarl_edge.errors import BoardError, ToolchainError

ROOT = Path(__file__).resolve().parents[1]

REAL = """
id = "{id}"
name = "A real board"
kind = "real"
cpu = "cortex-m4"
clock_hz = 16000000
flash_bytes = {flash_bytes}
ram_bytes = 131072
cost_unit = "{unit}"
usb = ["1234:5678"]
[build]
family = "{family}"
cc = "{cc}"
cflags = []
max_payload = 256
[connect]
method = "serial"
baud = 115200
reset_on_open_ms = {reset}
[flash]
{flash}
"""

OPENOCD_PYOCD = """tools = ["openocd", "pyocd"]
[flash.openocd]
config = ["board/st_nucleo_f4.cfg"]
[flash.pyocd]
target = "stm32f446re"
"""


def real_board(tmp_path, flash=OPENOCD_PYOCD, name="mine", family="host", cc="gcc", unit="cycles",
               reset=0, flash_bytes=524288):
    d = tmp_path / "boards"
    d.mkdir(exist_ok=True)
    p = d / f"{name}.toml"
    p.write_text(REAL.format(id=name, flash=flash, family=family, cc=cc, unit=unit, reset=reset,
                             flash_bytes=flash_bytes))
    return load_board_file(p)


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
def parse_uf2(data: bytes):
    assert len(data) % 512 == 0 and data
    blocks = []
    for i in range(0, len(data), 512):
        b = data[i:i + 512]
        m0, m1, flags, addr, size, no, total, fam = struct.unpack("<8I", b[:32])
        assert (m0, m1, struct.unpack("<I", b[508:])[0]) == (0x0A324655, 0x9E5D5157, 0x0AB16F30)
        blocks.append((flags, addr, size, no, total, fam, b[32:32 + size]))
    return blocks


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


# ----------------------------------------------------------------- a small ARM firmware ELF
TINY_C = r"""
__attribute__((section(".vectors"), used)) const unsigned vectors[2] = {0x20004000u, 0x08000009u};
const unsigned char big[70000] = {1, 2, 3, [69999] = 9};
int counter = 0x12345678;
int zeroed;
void _start(void) { for (;;) { zeroed += big[counter & 7] + counter; } }
"""
TINY_LD = """
MEMORY { FLASH (rx) : ORIGIN = 0x08000000, LENGTH = 512K
         RAM (rwx)  : ORIGIN = 0x20000000, LENGTH = 16K }
SECTIONS {
  .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) } > FLASH
  .data : { *(.data*) } > RAM AT > FLASH
  .bss  : { *(.bss*) } > RAM
}
"""


@pytest.fixture(scope="module")
def tiny_elf(tmp_path_factory):
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc is not installed (apt-get install gcc-arm-none-eabi)")
    d = tmp_path_factory.mktemp("tiny")
    (d / "t.c").write_text(TINY_C)
    (d / "t.ld").write_text(TINY_LD)
    subprocess.run([cc, "-mcpu=cortex-m4", "-mthumb", "-O1", "-nostdlib", "-T", "t.ld", "t.c",
                    "-o", "firmware.elf"], cwd=d, check=True, capture_output=True)
    return d / "firmware.elf"


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


def tool_on_path(tmp_path: Path, monkeypatch, name: str, body: str) -> Path:
    """A stand-in vendor program `name` (Python running `body`) in tmp_path/bin, first on PATH
    for this test."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    p = bindir / name
    p.write_text(f"#!{sys.executable}\nimport sys, json, pathlib\n{body}\n")
    p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return p


def record_argv(log: Path) -> str:
    """A tool_on_path() body that saves the tool's argv to `log` as JSON."""
    return f"pathlib.Path({str(log)!r}).write_text(json.dumps(sys.argv))"


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


# --------------------------------------------------------------------------- drive copies
def daplink_drive(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "DETAILS.TXT").write_text("# DAPLink Firmware - see https://mbed.com/daplink\n")
    return path


def remount(drive: Path, fail: str | None, after_s=0.2):
    """Play DAPLink: when a .hex lands, unmount, then come back (with FAIL.TXT if `fail`).
    A real DAPLink waits for the copy as long as it takes; so does this one, up to 120 s (the
    flasher converts the ELF first, which took over 4 s on a loaded machine: a shorter wait
    unmounted the drive before the copy, and the test failed for the emulator's sake)."""
    def run():
        deadline = time.monotonic() + 120
        while not list(drive.glob("*.hex")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after_s)
        shutil.rmtree(drive)
        time.sleep(after_s)
        daplink_drive(drive)
        if fail:
            (drive / "FAIL.TXT").write_text(fail + "\n")
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


MICROBIT = 'tools = ["daplink"]\n[flash.daplink]\nvolume = "MICROBIT"'


def test_daplink_copy_waits_for_the_remount(tiny_elf, tmp_path, monkeypatch):
    drive = daplink_drive(tmp_path / "media" / "MICROBIT")
    monkeypatch.setattr(F, "_mount_roots", lambda: [tmp_path / "media"])
    t = remount(drive, None)
    res = F.flash(real_board(tmp_path, MICROBIT), tiny_elf)
    t.join()
    assert res.tool == "daplink" and res.drive == drive and res.notes == []
    assert res.image.name == "firmware.hex"


def test_daplink_fail_txt_is_the_error(tiny_elf, tmp_path):
    drive = daplink_drive(tmp_path / "MICROBIT")
    t = remount(drive, "The interface firmware FAILED to reset/halt the target MCU")
    with pytest.raises(BoardError, match="DAPLink could not program the board from firmware.hex: "
                                         "The interface firmware FAILED to reset/halt"):
        F.flash(real_board(tmp_path, MICROBIT), tiny_elf, drive=drive)
    t.join()


def test_drives_are_checked_and_found_by_label(tiny_elf, tmp_path, monkeypatch):
    b = real_board(tmp_path, MICROBIT)
    monkeypatch.setattr(F, "_mount_roots", lambda: [tmp_path / "media"])
    with pytest.raises(BoardError, match="no MICROBIT drive .DAPLink, with DETAILS.TXT. is mounted; "
                                         "looked in .*media/MICROBIT"):
        F.flash(b, tiny_elf)
    (tmp_path / "usbstick").mkdir()
    with pytest.raises(BoardError, match="usbstick is not a DAPLink drive .it has no DETAILS.TXT."):
        F.flash(b, tiny_elf, drive=tmp_path / "usbstick")


def test_uf2_copy_lands_on_the_boot_loader_drive(tiny_elf, tmp_path, monkeypatch):
    drive = tmp_path / "media" / "RPI-RP2"
    drive.mkdir(parents=True)
    (drive / "INFO_UF2.TXT").write_text("UF2 Bootloader v3.0\nModel: Raspberry Pi RP2\n")
    monkeypatch.setattr(F, "_mount_roots", lambda: [tmp_path / "media"])
    b = real_board(tmp_path, 'tools = ["uf2"]\n[flash.uf2]\nvolume = "RPI-RP2"\n'
                             'family_id = 0xE48BFF56\nbase = 0x08000000')
    res = F.flash(b, tiny_elf)
    assert (drive / "firmware.uf2").read_bytes() == res.image.read_bytes()
    assert {blk[5] for blk in parse_uf2(res.image.read_bytes())} == {0xE48BFF56}


# ------------------------------------------------------------------ serial port by VID:PID
class FakePort:
    def __init__(self, device, vid=None, pid=None, serial_number=None, description="n/a"):
        self.device, self.vid, self.pid = device, vid, pid
        self.serial_number, self.description = serial_number, description


def fake_ports(monkeypatch, ports):
    from serial.tools import list_ports
    monkeypatch.setattr(list_ports, "comports", lambda: list(ports))


def test_the_serial_port_is_found_by_usb_id(tmp_path, monkeypatch):
    from quarl_edge.targets.usb import find_port
    b = real_board(tmp_path)
    fake_ports(monkeypatch, [FakePort("/dev/ttyS0"), FakePort("/dev/ttyACM3", 0x1234, 0x5678)])
    assert find_port(b) == "/dev/ttyACM3"
    fake_ports(monkeypatch, [FakePort("/dev/ttyUSB0", 0x0403, 0x6001)])
    with pytest.raises(BoardError) as e:
        find_port(b)
    assert str(e.value) == ("no serial port with USB id 1234:5678 (board mine) is attached "
                            "(USB serial ports: /dev/ttyUSB0 (0403:6001)); plug the board in, or pass --port")
    fake_ports(monkeypatch, [FakePort("/dev/ttyACM0", 0x1234, 0x5678, "A1"),
                             FakePort("/dev/ttyACM1", 0x1234, 0x5678, "B2")])
    with pytest.raises(BoardError, match=r"several serial ports have board mine's USB id "
                                         r"\(1234:5678\): /dev/ttyACM0 \(1234:5678, serial A1.*"
                                         r"/dev/ttyACM1 .*; pass --port"):
        find_port(b)


def test_avrdude_flashes_through_the_port_found_by_usb_id(tiny_elf, tmp_path, monkeypatch):
    log = tmp_path / "argv.json"
    tool_on_path(tmp_path, monkeypatch, "avrdude", record_argv(log))
    fake_ports(monkeypatch, [FakePort("/dev/ttyACM7", 0x1234, 0x5678)])
    b = real_board(tmp_path, 'tools = ["avrdude"]\n[flash.avrdude]\npartno = "m328p"\n'
                             'programmer = "arduino"\nbaud = 115200')
    res = F.flash(b, tiny_elf)
    import json
    assert json.loads(log.read_text())[1:] == ["-p", "m328p", "-c", "arduino", "-P", "/dev/ttyACM7",
                                               "-b", "115200", "-D", "-U", "flash:w:firmware.hex:i"]
    assert res.port == "/dev/ttyACM7" and res.image == tiny_elf.with_suffix(".hex")


# ------------------------------------------------- the whole path: build, flash, find, talk
def test_a_real_board_is_built_flashed_found_and_answers(tmp_path, monkeypatch, capsys):
    """`quarl-edge flash` on a 'real' board that is the host build: the UF2 lands on a drive,
    a 'board' (the harness behind a pty) appears with the board's USB id, we wait out its reset
    and handshake. Everything but the USB hardware is the real code path."""
    from quarl_edge.targets import boards
    from quarl_edge import cli
    from quarl_edge.targets import launch
    b = real_board(tmp_path, 'tools = ["uf2"]\n[flash.uf2]\nvolume = "QE-TEST"\n'
                             'family_id = 0x12345678', unit="ns", reset=300, flash_bytes=0)
    drive = tmp_path / "drive"
    drive.mkdir()
    (drive / "INFO_UF2.TXT").write_text("UF2 Bootloader\n")
    model = tmp_path / "int8.tflite"
    shutil.copy(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite", model)
    monkeypatch.setattr(boards, "boards_dir", lambda: b.path.parent)
    running = []
    real_copy = F.copy_to_drive

    def copy_and_boot(tool, image, d, *args):
        notes = real_copy(tool, image, d, *args)
        running.append(launch.HostPty(image.with_suffix(".elf")))   # the board boots
        return notes
    monkeypatch.setattr(F, "copy_to_drive", copy_and_boot)
    from serial.tools import list_ports
    monkeypatch.setattr(list_ports, "comports", lambda: [FakePort(r.url, 0x1234, 0x5678)
                                                         for r in running])
    try:
        t0 = time.monotonic()
        assert cli.main(["flash", str(model), "--board", "mine", "--drive", str(drive)]) == 0
        took = time.monotonic() - t0
    finally:
        for r in running:
            r.stop()
    out = capsys.readouterr().out
    assert "flashed firmware.uf2 with uf2 (the " in out and str(drive) in out
    assert f"board 'mine' runs int8 on {running[0].url} (found by its USB id) (ns cost unit)" in out
    assert took > 0.3                      # reset_on_open_ms was waited out
    assert (drive / "firmware.uf2").is_file()


# ------------------------------------------------------------- the real tools, when present
def usb_vendor_attached(vid: str) -> bool:
    """A device of this USB vendor is attached: then a real tool might really flash it."""
    return any(p.read_text().strip() == vid for p in Path("/sys/bus/usb/devices").glob("*/idVendor"))


def needs(tool: str, vid: str):
    program = F.TOOLS[tool].program
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed ({F.TOOLS[tool].install})")
    if usb_vendor_attached(vid):
        pytest.skip(f"a USB device of vendor {vid} is attached: not running {program} against it")


AVR = 'tools = ["avrdude"]\n[flash.avrdude]\npartno = "m328p"\nprogrammer = "arduino"\nbaud = 115200'


def test_real_avrdude_on_a_missing_port(tiny_elf, tmp_path):
    needs("avrdude", "2341")
    with pytest.raises(BoardError) as e:
        F.flash(real_board(tmp_path, AVR), tiny_elf, port="/dev/ttyQE-no-such-port")
    msg = str(e.value)
    assert "avrdude failed flashing board mine (exit code 1)" in msg
    assert "cannot open port /dev/ttyQE-no-such-port" in msg


def test_real_avrdude_against_a_silent_port_times_out(tiny_elf, tmp_path):
    needs("avrdude", "2341")
    master, slave = os.openpty()          # a serial port nobody answers on
    tty.setraw(slave)
    try:
        b = real_board(tmp_path, AVR.replace('tools = ["avrdude"]',
                                             'tools = ["avrdude"]\ntimeout_s = 8'))
        t0 = time.monotonic()
        with pytest.raises(BoardError) as e:
            F.flash(b, tiny_elf, port=os.ttyname(slave))
        assert time.monotonic() - t0 < 20
    finally:
        os.close(master)
        os.close(slave)
    msg = str(e.value)
    assert "avrdude did not finish flashing board mine within 8 s; its last output:" in msg
    assert "not in sync" in msg or "not responding" in msg


def test_real_openocd_without_an_adapter(tiny_elf, tmp_path):
    needs("openocd", "0483")
    with pytest.raises(BoardError) as e:
        F.flash(real_board(tmp_path), tiny_elf, flasher="openocd", timeout=60)
    msg = str(e.value)
    assert "openocd failed flashing board mine (exit code 1)" in msg
    assert "open failed" in msg or "OpenOCD init failed" in msg
    assert "command: " in msg and "-f board/st_nucleo_f4.cfg" in msg


def test_real_teensy_loader_refuses_an_image_outside_its_flash(tiny_elf, tmp_path):
    needs("teensy", "16c0")
    b = real_board(tmp_path, 'tools = ["teensy"]\n[flash.teensy]\nmcu = "TEENSY41"')
    hexf = F.write_image(b, "teensy", tiny_elf)          # linked at 0x08000000: not a Teensy's
    args = [a for a in F.teensy_args(b.flash_config["teensy"], hexf) if a != "-w"]
    with pytest.raises(BoardError, match=r"(?s)exit code 1.*error reading intel hex file"):
        F.run_tool(b, "teensy", args, timeout=30)


def test_real_teensy_loader_without_a_device(tmp_path):
    needs("teensy", "16c0")
    b = real_board(tmp_path, 'tools = ["teensy"]\n[flash.teensy]\nmcu = "TEENSY41"')
    # an image in the Teensy 4.1's flash (0x60000000): the loader checks addresses first
    hexf = tmp_path / "firmware.hex"
    hexf.write_text(F.intel_hex([(0x6000_0000, bytes(range(256)) * 8)]))
    args = [a for a in F.teensy_args(b.flash_config["teensy"], hexf) if a != "-w"]  # no waiting
    with pytest.raises(BoardError) as e:
        F.run_tool(b, "teensy", args, timeout=30)
    assert "teensy failed flashing board mine (exit code 1)" in str(e.value)
    assert "Unable to open device" in str(e.value)


def test_real_picotool_reads_our_uf2(tiny_elf, tmp_path):
    if shutil.which("picotool") is None:
        pytest.skip(f"picotool is not installed ({F.TOOLS['picotool'].install})")
    b = real_board(tmp_path, 'tools = ["uf2"]\n[flash.uf2]\nvolume = "RPI-RP2"\n'
                             'family_id = 0xE48BFF56')
    image = F.write_image(b, "uf2", tiny_elf)
    p = subprocess.run(["picotool", "info", "-a", str(image)], capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_board_without_usb_id_needs_port_before_it_is_flashed(tmp_path, monkeypatch):
    from quarl_edge.targets import launch
    b = real_board(tmp_path, 'tools = ["teensy"]\n[flash.teensy]\nmcu = "TEENSY41"')
    b = type(b)(**{**b.__dict__, "usb": ()})
    calls = []
    monkeypatch.setattr(launch, "flash", lambda *a, **k: calls.append(a))
    with pytest.raises(BoardError, match="no USB id in its board file .*; pass --port"):
        launch.start(b, tmp_path / "firmware.elf")
    assert calls == []


def test_pyocd_unknown_target_failure_names_the_pack_to_install(tmp_path, monkeypatch):
    """pyocd without the target's CMSIS pack says 'not recognized': our error adds the command."""
    import subprocess as sp
    from quarl_edge.targets.boards import get_board
    from quarl_edge.errors import BoardError
    from quarl_edge.targets.flash import run_tool

    def fake_run(args, **kw):   # pyocd's own words for a target it does not have
        return sp.CompletedProcess(args, 1, b"0000375 C Target type 'stm32f446retx' not recognized. "
                                            b"Use 'pyocd list --targets' to see currently available "
                                            b"target types. [__main__]\n")
    monkeypatch.setattr(sp, "run", fake_run)
    with pytest.raises(BoardError, match="pyocd pack install stm32f446retx"):
        run_tool(get_board("nucleo-f446re"), "pyocd", ["pyocd", "flash", "x.elf"], 10)
