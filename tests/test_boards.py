"""The board registry: every shipped board file loads; bad files give clear, named errors."""
import pytest

from quarl_edge.targets.boards import all_boards, get_board, load_board_file
from quarl_edge.core.errors import BoardError

GOOD = """
id = "{id}"
name = "A board"
kind = "emulated"
cpu = "cortex-m4"
clock_hz = 25000000
flash_bytes = 4194304
ram_bytes = 4194304
cost_unit = "instructions"
[build]
family = "host"
cc = "gcc"
cflags = []
max_payload = 512
[connect]
method = "pty"
"""


def test_shipped_boards_load_and_host_is_there():
    boards = all_boards()
    assert "host" in boards
    host = boards["host"]
    assert host.kind == "host" and host.cost_unit == "ns" and host.connect_method == "pty"
    assert host.toolchain_installed()


def write(tmp_path, name, text):
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return p


def test_a_valid_file_round_trips(tmp_path):
    b = load_board_file(write(tmp_path, "mine", GOOD.format(id="mine")))
    assert (b.id, b.clock_hz, b.max_payload, b.cflags) == ("mine", 25_000_000, 512, ())


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('kind = "emulated"', 'kind = "toaster"'), "'kind' is 'toaster'"),
    (lambda t: t.replace('cost_unit = "instructions"', 'cost_unit = "seconds"'), "cost_unit"),
    (lambda t: t.replace("clock_hz = 25000000", 'clock_hz = "fast"'), "'clock_hz' must be int"),
    (lambda t: t.replace("clock_hz = 25000000\n", ""), "missing key 'clock_hz'"),
    (lambda t: t.replace('method = "pty"', 'method = "carrier-pigeon"'), "method"),
    (lambda t: t.replace("max_payload = 512", "max_payload = 4"), "max_payload"),
    (lambda t: t + "\n[[[", "not valid TOML"),
    (lambda t: t.replace('id = "mine"', 'id = "other"'), "must match the file name"),
])
def test_invalid_files_are_refused_with_the_reason(tmp_path, edit, message):
    path = write(tmp_path, "mine", edit(GOOD.format(id="mine")))
    with pytest.raises(BoardError) as e:
        load_board_file(path)
    assert message in str(e.value) and "mine.toml" in str(e.value)


def test_an_unknown_connect_method_is_refused_in_one_line_naming_the_known_ones(tmp_path):
    from quarl_edge.targets.connect import METHODS
    path = write(tmp_path, "mine", GOOD.format(id="mine").replace('method = "pty"',
                                                                  'method = "carrier-pigeon"'))
    with pytest.raises(BoardError) as e:
        load_board_file(path)
    assert str(e.value) == (f"{path} [connect]: 'method' is 'carrier-pigeon'; expected one of "
                            "pty, qemu, simavr, serial, agent")
    assert list(METHODS) == ["pty", "qemu", "simavr", "serial", "agent"]


def test_each_board_asks_its_connect_method_class():
    """The table's classes answer what differs per method: only QEMU adds build defines, only
    a serial board is flashed and opened at its baud rate, only the agent builds no firmware."""
    import dataclasses
    boards = all_boards()
    for b in boards.values():
        assert b.method.name == b.connect_method, b.id
        assert (b.connect_method == "serial") == (b.kind == "real"), b.id
        # QEMU boards are flashed too when given a port (`quarl-edge emulate`'s GDB server)
        assert b.method.flashes == (b.connect_method in ("serial", "qemu")), b.id
        assert b.method.builds_firmware == (b.kind != "linux"), b.id
        assert (b.method.defines(b) != []) == (b.connect_method == "qemu"), b.id
        assert b.method.link_options(b) == ({"baudrate": b.baud} if b.kind == "real" else {}), b.id
    assert boards["mps2-an386"].method.defines(boards["mps2-an386"]) == \
        ["-DQE_ICOUNT_SHIFT=7", "-DQE_SYSTICK_HZ=25000000u"]
    assert boards["arduino-uno"].method.open_wait_s(boards["arduino-uno"]) == 2.5
    odd = dataclasses.replace(boards["host"], connect={"method": "carrier-pigeon"})
    with pytest.raises(BoardError, match="method 'carrier-pigeon' is not one of pty, qemu, "
                                         "simavr, serial, agent"):
        odd.method


def test_unknown_board_lists_the_known_ones(tmp_path):
    write(tmp_path, "alpha", GOOD.format(id="alpha"))
    with pytest.raises(BoardError, match="unknown board 'beta'; known boards: alpha"):
        get_board("beta", tmp_path)


def test_usb_ids_recognise_boards(tmp_path):
    from quarl_edge.targets.ports import list_ports
    from quarl_edge.targets.usb import match_boards
    write(tmp_path, "nucleo", GOOD.format(id="nucleo").replace("[build]", 'usb = ["0483:374B", "0483:374e"]\n[build]'))
    boards = {"nucleo": load_board_file(tmp_path / "nucleo.toml")}
    assert boards["nucleo"].usb == ((0x0483, 0x374B), (0x0483, 0x374E))
    assert match_boards(0x0483, 0x374E, boards) == ["nucleo"]
    assert match_boards(0x0483, 0x0001, boards) == [] and match_boards(None, None, boards) == []
    for p in list_ports(boards):          # the real pyserial enumeration of this machine
        assert p.device.startswith("/dev/")


def test_bad_usb_id_is_refused(tmp_path):
    path = write(tmp_path, "mine", GOOD.format(id="mine").replace("[build]", 'usb = ["stlink"]\n[build]'))
    with pytest.raises(BoardError, match="usb entries are 'VID:PID'"):
        load_board_file(path)


def test_boards_lists_every_board_with_its_tools(tmp_path):
    import json
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "boards", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    listed = json.loads(p.stdout)
    assert set(listed) == set(all_boards())
    assert listed["host"]["installed"] is True and listed["host"]["missing"] == []
    assert {b["kind"] for b in listed.values()} >= {"host", "emulated", "linux"}


def test_a_missing_emulator_is_named_with_its_install_command(tmp_path):
    text = GOOD.format(id="mine").replace('method = "pty"', 'method = "qemu"\ninstall = "apt-get install qemu-x"')
    b = load_board_file(write(tmp_path, "mine", text))
    import shutil as sh
    missing = dict(b.missing_tools())
    assert ("qemu-system-arm" in missing) == (sh.which("qemu-system-arm") is None)
    nocc = load_board_file(write(tmp_path, "mine", text.replace('cc = "gcc"', 'cc = "no-such-cc"')))
    assert "no-such-cc" in dict(nocc.missing_tools())


def test_a_missing_c_library_is_named_beside_an_installed_compiler(tmp_path):
    """A cross compiler's C library is its own package (picolibc-riscv64-unknown-elf,
    libnewlib-arm-none-eabi): `--specs=` files the compiler cannot find are missing tools."""
    text = GOOD.format(id="mine").replace(
        "cflags = []", 'cflags = ["--specs=no-such-libc.specs"]\ninstall = "apt-get install libc-x"')
    b = load_board_file(write(tmp_path, "mine", text))
    assert b.missing_build_tools() == [("no-such-libc.specs (gcc's C library)", "apt-get install libc-x")]
    hifive1 = get_board("hifive1")
    assert hifive1.spec_files() == ["picolibc.specs"]
    import shutil as sh
    if sh.which(hifive1.cc):     # scripts/setup.sh installs picolibc with the compiler
        assert hifive1.missing_build_tools() == []


def test_shipped_real_boards_say_how_they_are_flashed_and_reached():
    from quarl_edge.targets.flash import TOOLS
    for b in all_boards().values():
        if b.kind != "real":
            assert b.flashers == () or b.connect_method in ("serial", "qemu")
            continue
        assert b.flashers and all(t in TOOLS for t in b.flashers), b.id
        assert b.connect_method == "serial" and b.baud > 0 and b.reset_on_open_ms >= 0, b.id
        if not b.usb:     # e.g. a USB-UART adapter of the user's choice: --port is needed
            from quarl_edge.targets.usb import find_port
            with pytest.raises(BoardError, match="no USB ids .* pass --port"):
                find_port(b)
        assert [s["tool"] for s in b.flasher_status()] == list(b.flashers)


def test_a_real_board_without_any_installed_flasher_is_not_installed(tmp_path):
    text = GOOD.format(id="mine").replace('kind = "emulated"', 'kind = "real"').replace(
        'method = "pty"', 'method = "serial"\nbaud = 57600') + (
        '\n[flash]\ntools = ["pyocd"]\n[flash.pyocd]\ntarget = "x"\n')
    b = load_board_file(write(tmp_path, "mine", text))
    import shutil as sh
    assert b.baud == 57600 and b.reset_on_open_ms == 0
    if sh.which("pyocd") is None:
        assert ("pyocd", "pip install pyocd") in b.missing_tools()
    daplink = load_board_file(write(tmp_path, "mine", text.replace(
        'tools = ["pyocd"]', 'tools = ["daplink", "pyocd"]\n[flash.daplink]\nvolume = "MB"')))
    assert daplink.missing_tools() == daplink.missing_build_tools() == []
