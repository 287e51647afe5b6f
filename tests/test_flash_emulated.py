"""Issue 38: the real flash tools against faithful emulations of a boot loader and a debug probe.

`quarl-edge emulate arduino-uno` runs the ATmega328P in simavr with Optiboot (built from Debian's
arduino-core-avr source) in its boot section; real avrdude writes and verifies the firmware
through it, Optiboot hands over, and `hil` plays on the same pty. `quarl-edge emulate
netduinoplus2` runs QEMU halted with its GDB stub; real gdb-multiarch loads and verifies the ELF
(`--flasher gdb=HOST:PORT`), and `hil` plays over the serial socket. Nothing in flash, hil or
the board files knows the port is emulated. Then the faults: each one line, exit 2, the
emulator stopped, no temporary folder left."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers_hostile import assert_refused, run_hostile

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "examples" / "cartpole_dqn"
OPTIBOOT_SRC = Path("/usr/share/arduino/hardware/arduino/avr/bootloaders/optiboot/optiboot.c")

pytestmark = pytest.mark.skipif(
    not (shutil.which("avrdude") and shutil.which("gdb-multiarch") and OPTIBOOT_SRC.is_file()
         and shutil.which("avr-gcc") and shutil.which("qemu-system-arm")
         and Path("/usr/include/simavr/sim_avr.h").is_file()),
    reason="needs avrdude, gdb-multiarch, arduino-core-avr, gcc-avr, libsimavr-dev, "
           "qemu-system-arm (scripts/setup.sh installs them)")


class Emulation:
    """`quarl-edge emulate BOARD` as a user runs it: its first stdout line is the port. Its
    TMPDIR is a folder of its own, which must be empty once it stopped."""

    def __init__(self, board: str, env: dict | None = None):
        self.tmp = tempfile.mkdtemp(prefix="qe-t-")     # short: QEMU's AF_UNIX socket paths
        self.proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.cli", "emulate", board],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=ROOT, env={**os.environ, **(env or {}), "TMPDIR": self.tmp})
        self.lines = [self.proc.stdout.readline().strip()]
        assert self.lines[0], self.proc.stderr.read()
        if not self.lines[0].startswith("/dev/"):
            self.lines.append(self.proc.stdout.readline().strip())
        self.port = self.lines[0]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        if os.path.isdir(self.tmp):         # the first stop() checks
            left = os.listdir(self.tmp)
            shutil.rmtree(self.tmp, ignore_errors=True)
            assert left == [], f"the emulation left {left} in its temporary folder"
        return code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def cli(capsys, *args: str) -> subprocess.CompletedProcess:
    """The command line in this process (TensorFlow is imported once for the file)."""
    from quarl_edge.cli import main
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def check_hil(capsys, port: str, board: str, out: Path) -> dict:
    p = cli(capsys, "hil", str(RUN), "--board", board, "--port", port, "--episodes", "3",
            "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout)
    assert res["matches_reference"] is True            # episode by episode, TF Lite Micro's
    assert len(res["returns"]) == 3 and res["mean_return"] == res["micro_mean_return"]
    return res


@pytest.mark.long
def test_avrdude_flashes_through_optiboot_and_hil_plays_on_the_uno(tmp_path, capsys):
    with Emulation("arduino-uno") as em:
        assert em.port.startswith("/dev/pts/")
        p = cli(capsys, "flash", str(RUN), "--board", "arduino-uno", "--port", em.port,
                "--out", str(tmp_path / "build"))
        assert p.returncode == 0, p.stderr[-3000:]
        assert "flashed firmware.hex with avrdude" in p.stdout
        assert f"board 'arduino-uno' runs int8 on {em.port}" in p.stdout   # HELLO, model hash
        log = (tmp_path / "build" / "firmware.avrdude.log").read_text()
        assert "-c arduino" in log and "-b 115200" in log
        assert "device signature = 0x1e950f" in log
        assert re.search(r"\d+ bytes of flash verified", log), log
        res = check_hil(capsys, em.port, "arduino-uno", tmp_path / "hil")
        assert res["latency"]["unit"] == "cycles" and res["latency"]["median"] > 10_000
        assert em.stop() == 0


@pytest.mark.long
def test_gdb_loads_through_qemus_gdb_stub_and_hil_plays(tmp_path, capsys):
    with Emulation("netduinoplus2") as em:
        gdb_server, serial = em.lines[0], em.lines[1].removeprefix("serial ")
        assert gdb_server.startswith("localhost:") and serial.startswith("unix://")
        p = cli(capsys, "flash", str(RUN), "--board", "netduinoplus2", "--flasher", f"gdb={gdb_server}",
                "--port", serial, "--out", str(tmp_path / "build"))
        assert p.returncode == 0, p.stderr[-3000:]
        assert "flashed firmware.elf with gdb" in p.stdout
        log = (tmp_path / "build" / "firmware.gdb.log").read_text()
        assert f"target extended-remote {gdb_server}" in log
        assert "Loading section .text" in log and "MIS-MATCHED" not in log
        assert re.search(r"Section \.text, range 0x8000000 -- 0x[0-9a-f]+: matched", log), log
        check_hil(capsys, serial, "netduinoplus2", tmp_path / "hil")
        assert em.stop() == 0


# ----------------------------------------------------------------------------------- faults
def flash_refused(case: str, port: str, words: str, tmp_path: Path, *extra: str):
    board = ["--board", extra[0] if extra else "arduino-uno"]
    if extra[:1] == ("--board-file",):
        board = list(extra[:2])
        extra = ()
    o = run_hostile(case, ["flash", str(RUN), *board, "--port", port,
                           "--out", str(tmp_path / "build"), *extra[1:]], ROOT, timeout=90)
    assert_refused(o, words, limit_s=90)
    return o


def test_a_boot_loader_that_never_answers_is_one_line_naming_the_causes(tmp_path):
    # the Uno's board file with a 10 s flash time-out (avrdude's own 10 attempts take ~60 s)
    uno = (ROOT / "boards" / "arduino-uno.toml").read_text()
    mine = tmp_path / "boards" / "arduino-uno.toml"
    mine.parent.mkdir()
    mine.write_text(uno.replace('tools = ["avrdude"]', 'tools = ["avrdude"]\ntimeout_s = 10'))
    master, slave = os.openpty()            # a port with nothing behind it
    try:
        o = flash_refused("flash-no-sync", os.ttyname(slave), "got no answer from the boot "
                          "loader", tmp_path, "--board-file", str(mine))
    finally:
        os.close(master)
        os.close(slave)
    assert "wrong port" in o.line and "not reset" in o.line and "wrong baud rate (115200)" in o.line


def test_a_page_the_flash_corrupts_fails_verification(tmp_path):
    with Emulation("arduino-uno", {"QE_SIMAVR_CORRUPT_PAGE": "3"}) as em:
        o = flash_refused("flash-verify-mismatch", em.port, "does not verify", tmp_path)
        assert "first at byte 0x0183" in o.line     # page 3 (128 B pages), byte 3
        assert em.proc.poll() is None               # the board is still there
    assert em.stop() == 0


def test_the_port_vanishing_mid_flash_is_one_line(tmp_path):
    with Emulation("arduino-uno", {"QE_SIMAVR_VANISH_AFTER_PAGES": "10"}) as em:
        flash_refused("flash-port-vanishes", em.port, f"the port {em.port} vanished while "
                      "avrdude was flashing", tmp_path)
        assert em.proc.wait(timeout=20) == 2    # its bridge is gone: the emulation says so
        err = em.proc.stderr.read().strip().splitlines()
        assert err[-1].startswith("quarl-edge: error: the emulation of arduino-uno stopped: "
                                  "exited with code 5"), err
        assert not any(ln.startswith("quarl-edge: error:") for ln in err[:-1]), err


def test_a_gdb_server_that_refuses_the_connection(tmp_path):
    from quarl_edge.targets.emulate import free_tcp_port
    server = f"localhost:{free_tcp_port()}"        # nothing listens there
    flash_refused("flash-gdb-refused", "unix:///nonexistent/serial.sock",
                  f"the GDB server at {server} refused the connection", tmp_path,
                  "mps2-an386", "--flasher", f"gdb={server}")


def test_an_image_too_big_for_the_flash_is_refused_before_the_tool_runs(tmp_path):
    from quarl_edge.core.errors import BoardError
    from quarl_edge.targets import flash as F
    from quarl_edge.targets.boards import get_board
    elf = tmp_path / "big.elf"
    subprocess.run(["avr-gcc", "-mmcu=atmega328p", "-x", "c", "-", "-o", str(elf)], check=True,
                   input="const __flash char big[20000] = {1};\n"
                         "int main(void) { return big[0] + big[19999]; }\n", text=True)
    uno = get_board("arduino-uno")
    small = dataclasses.replace(uno, flash_bytes=16384)
    with pytest.raises(BoardError) as e:      # no such port: had avrdude run, it would say so
        F.flash(small, elf, port="/dev/ttyQE-never-opened")
    msg = str(e.value)
    assert "is 20," in msg and "holds 16,384 B" in msg and "nothing was flashed" in msg
    assert not (tmp_path / "big.avrdude.log").exists()



