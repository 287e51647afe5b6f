"""`quarl-edge emulate BOARD`: a real board emulated as it comes out of its box, reached the way
the real one is. Every other command talks to it by `--port`, as to the real board, and none of
them knows it is emulated.

- arduino-uno: the ATmega328P in simavr with only its boot loader, Optiboot, in the boot section
  (high fuse 0xDE: 512 B at word 0x3F00, the MCU starts there at reset), USART0 on a pty that
  avrdude flashes through (STK500v1, 115200 baud) and the firmware then answers on. Opening the
  pty resets the MCU with the RESET pin's flag, as the Uno's DTR does (simavr_bridge.c, boot
  mode). Optiboot is built here from the source Debian's arduino-core-avr ships: its prebuilt
  optiboot_atmega328.hex (532 B from Debian's avr-gcc) runs past the end of the flash.
- netduinoplus2, mps2-an386: QEMU with no program, halted, its GDB stub on localhost (what a
  probe's GDB server is to `--flasher gdb`: gdb-multiarch `load`s the ELF through it), serial
  port 0 on a Unix socket (qemu.py's Qemu, without -kernel)."""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from ..core.errors import BoardError, ToolchainError
from .build import object_cache_dir
from .flash import intel_hex, loadable_segments
from .launch import die_with_parent
from .qemu import Qemu
from .simavr import SIMAVR_INSTALL, Simavr, simavr_bridge

OPTIBOOT_SOURCES = (Path("/usr/share/arduino/hardware/arduino/avr/bootloaders/optiboot"),)
OPTIBOOT_INSTALL = "apt-get install --no-install-recommends arduino-core-avr gcc-avr avr-libc"
# Optiboot's Makefile (target atmega328: LED_START_FLASHES=3, 115200 baud, 16 MHz), plus what
# makes avr-gcc 5.4's code fit the 512 B boot section (-fno-move-loop-invariants: 500 B, the
# size of Arduino's own build; without it 532 B, Debian's prebuilt hex).
OPTIBOOT_FLAGS = ("-Os", "-fno-inline-small-functions", "-fno-split-wide-types", "-mshort-calls",
                  "-mrelax", "-fno-caller-saves", "-fno-tree-scev-cprop", "-fno-jump-tables",
                  "-fno-reorder-blocks", "-fno-move-loop-invariants", "-mmcu=atmega328p",
                  "-DF_CPU=16000000L", "-DLED_START_FLASHES=3", "-DBAUD_RATE=115200",
                  "-Wl,--section-start=.text=0x7e00", "-Wl,--section-start=.version=0x7ffe",
                  "-Wl,--relax", "-Wl,--gc-sections", "-nostartfiles", "-nostdlib")
UNO_BOOT = 0x7E00          # high fuse 0xDE: BOOTSZ = 11, 256 words at word 0x3F00
UNO_FLASH = 0x8000


def cache_dir() -> Path:
    """Built boot loaders and bridges: beside the firmware object cache."""
    return object_cache_dir().parent / "emulate"


def optiboot(cache: Path | None = None) -> Path:
    """Optiboot for the Uno as Intel HEX, built with avr-gcc from arduino-core-avr's source and
    cached; refused if it does not fit the 512 B boot section."""
    src_dir = next((d for d in OPTIBOOT_SOURCES if (d / "optiboot.c").is_file()), None)
    gcc = shutil.which("avr-gcc")
    if src_dir is None or gcc is None:
        raise ToolchainError("emulating the Arduino Uno needs Optiboot's source and avr-gcc; "
                             f"install them with: {OPTIBOOT_INSTALL}")
    cache = Path(cache or cache_dir())
    key = hashlib.sha256((src_dir / "optiboot.c").read_bytes() + (src_dir / "stk500.h").read_bytes()
                         + (src_dir / "pin_defs.h").read_bytes()
                         + " ".join((os.path.realpath(gcc),) + OPTIBOOT_FLAGS).encode())
    out = cache / f"optiboot_atmega328-{key.hexdigest()[:16]}.hex"
    if out.is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qe-optiboot-", dir=cache) as tmp:
        elf = Path(tmp) / "optiboot.elf"
        proc = subprocess.run([gcc, "-w", *OPTIBOOT_FLAGS, f"-I{src_dir}", "-o", str(elf),
                               str(src_dir / "optiboot.c")], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"building Optiboot from {src_dir} failed: "
                                 f"{proc.stderr.strip().splitlines()[-1:]}")
        segs = loadable_segments(elf)
        end = max(a + len(d) for a, d in segs)
        text_end = max(a + len(d) for a, d in segs if a < UNO_FLASH - 2)
        if min(a for a, _ in segs) < UNO_BOOT or end > UNO_FLASH or text_end > UNO_FLASH - 2:
            raise ToolchainError(f"Optiboot built from {src_dir} takes "
                                 f"{text_end - UNO_BOOT} B: more than the 510 B the Uno's boot "
                                 "section leaves beside its version word")
        tmp_hex = Path(tmp) / "optiboot.hex"
        tmp_hex.write_text(intel_hex(segs))
        os.replace(tmp_hex, out)
    return out


class UnoEmulation(Simavr):
    """An Arduino Uno fresh from the box: Optiboot waiting, the application flash erased (the
    bridge in boot mode; Simavr's start-up wait and exit reports)."""

    EXIT_CODES = {**Simavr.EXIT_CODES, 5: "its port vanished on request (QE_SIMAVR_VANISH_AFTER_PAGES)"}
    MCU, FREQUENCY, HIGH_FUSE = "atmega328p", 16_000_000, 0xDE

    def __init__(self, board):
        self.board = board
        cache = cache_dir()
        boot = optiboot(cache)
        bridge = simavr_bridge(cache, SIMAVR_INSTALL)
        self._dir = Path(tempfile.mkdtemp(prefix="qe-emulate-"))
        self._open_log(self._dir / "simavr.log")
        self.cmd = [str(bridge), "--boot", str(boot), self.MCU, str(self.FREQUENCY),
                    f"0x{self.HIGH_FUSE:02X}"]
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, close_fds=True,
                                     preexec_fn=die_with_parent if sys.platform == "linux" else None)
        try:
            self.url = self._wait_for_pty()
        except BaseException:
            self.stop()
            raise
        self.lines = [self.url]
        self.notes = [f"{board.id}: ATmega328P at 16 MHz in simavr, Optiboot ({boot.name}) waiting "
                      f"in the boot section; the serial port {self.url} resets it when opened"]

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GdbQemuEmulation(Qemu):
    """A Cortex-M board in QEMU with an empty flash, halted, serving GDB on localhost: a board
    with its debug probe's GDB server (`--flasher gdb` loads the firmware through it)."""

    def __init__(self, board):
        self.gdb_port = free_tcp_port()
        super().__init__(board, None, self.gdb_port)
        self.serial_url = self.url
        self.url = f"localhost:{self.gdb_port}"
        self.lines = [self.url, f"serial {self.serial_url}"]
        self.notes = [f"{board.id}: QEMU {board.connect.get('machine')} halted with an empty "
                      f"flash; GDB server on {self.url} (quarl-edge flash ... --flasher "
                      f"gdb={self.url} --port {self.serial_url}), serial port 0 on "
                      f"{self.serial_url}"]


def emulate(board):
    """Start the emulation of `board` (a running board with `url`, `lines` and `notes`)."""
    if board.id == "arduino-uno":
        return UnoEmulation(board)
    if board.method.name == "qemu":
        return GdbQemuEmulation(board)
    raise BoardError(f"board {board.id} cannot be emulated; these can: arduino-uno and the QEMU "
                     "boards (netduinoplus2, mps2-an386, ...: through their GDB server)")
