"""Flashing real boards (quarl_edge/targets/flash.py), the parts that need a drive, a port or a
tool: drive copies (DAPLink, UF2) on a simulated drive, finding the serial port by USB VID:PID,
the whole path (build, flash, find, talk), and the real tools' failure paths when they are
installed (avrdude, openocd, teensy_loader_cli, picotool). (The images and the argument lists:
test_flash.py.)"""
import os
import shutil
import subprocess
import threading
import time
import tty
from pathlib import Path

import pytest

from helpers_flash import parse_uf2, real_board, record_argv, tiny_elf_once, tool_on_path
from quarl_edge.targets import flash as F
from quarl_edge.core.errors import BoardError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_elf(tmp_path_factory, worker_id):
    return tiny_elf_once(tmp_path_factory, worker_id)


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
    msg = str(e.value)      # one line naming the likely causes (issue 38)
    assert "avrdude got no answer from the boot loader on" in msg and "\n" not in msg
    assert "wrong port" in msg and "not reset" in msg and "wrong baud rate (115200)" in msg


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
    from quarl_edge.core.errors import BoardError
    from quarl_edge.targets.flash import run_tool

    import sys
    # pyocd's own words for a target it does not have, from a stand-in program
    words = ("0000375 C Target type 'stm32f446retx' not recognized. Use 'pyocd list --targets' "
             "to see currently available target types. [__main__]")
    with pytest.raises(BoardError, match="pyocd pack install stm32f446retx"):
        run_tool(get_board("nucleo-f446re"), "pyocd",
                 [sys.executable, "-c", f"print({words!r}); raise SystemExit(1)"], 10)
