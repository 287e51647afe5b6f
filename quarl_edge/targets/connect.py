"""How the host reaches a board: one class per `[connect] method` of a board file, in one table
(METHODS), as esptool keeps one class per chip.

Each class owns what differs per method: how the board is started or reached (`start`, with the
running-board classes of launch.py, qemu.py and simavr.py), what must be installed for it
(`missing_tools`, with the command that installs it), what the firmware build adds for it
(`defines`), how its port is opened (`link_options`, `open_wait_s`), and whether we build its
firmware (`builds_firmware`) and flash it (`flashes`). The rest of quarl-edge asks
`board.method` (targets/boards.py) instead of comparing method names.

Adding a method: a subclass here and its line in METHODS; a board file's `[connect] method`
then names it (boards.py refuses any other name, listing these). `board` arguments are
targets/boards.py's Board."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from ..core.errors import QuarlError
from .launch import FlashedBoard, HostPty, RunningBoard
from .qemu import QEMU_DEFAULT, Qemu
from .simavr import Simavr


class ConnectMethod:
    """A way of reaching a board; the defaults are a firmware we build, started here."""
    name = ""
    builds_firmware = True     # False: the board runs the .tflite itself (the linux agent)
    flashes = False            # True: a real board, flashed and then reached on its serial port

    def start(self, board, elf: Path, port: str | None = None, flasher: str | None = None,
              drive: str | None = None) -> RunningBoard:
        """Start (or flash) the firmware `elf` on `board`; the running board says its port."""
        raise NotImplementedError

    def missing_tools(self, board) -> list[tuple[str, str]]:
        """(what is missing, how to install it) to reach the board, besides its compiler."""
        return []

    def defines(self, board) -> list[str]:
        """Compiler -D flags the board's port needs from its [connect] table."""
        return []

    def link_options(self, board) -> dict:
        """Keyword arguments for link/runner.py's BoardLink opening the board's port."""
        return {}

    def open_wait_s(self, board) -> float:
        """How long the board is busy after the host opens its port."""
        return 0.0


class PtyMethod(ConnectMethod):
    """The host build, run here as a child process behind a pseudo-terminal."""
    name = "pty"

    def start(self, board, elf, port=None, flasher=None, drive=None):
        return HostPty(elf)


class QemuMethod(ConnectMethod):
    """An emulated board: QEMU (qemu-system-arm, qemu-system-riscv32), counting instructions
    (qemu.py). With a port (`quarl-edge flash --port`), one that `quarl-edge emulate` runs:
    flashed through its GDB server (`--flasher gdb=HOST:PORT`) and reached on that serial port,
    as a real board."""
    name = "qemu"
    flashes = True

    def start(self, board, elf, port=None, flasher=None, drive=None):
        if port is not None:
            return FlashedBoard(board, elf, port, flasher, drive)
        return Qemu(board, elf)

    def missing_tools(self, board):
        exe = board.connect.get("qemu", QEMU_DEFAULT)
        if shutil.which(exe) is None:
            return [(exe, board.connect.get("install", ""))]
        return []

    def defines(self, board):
        """The port turns its counter into instructions: it needs QEMU's -icount shift and, on
        Cortex-M, the SysTick clock of the emulated machine (boards/<id>.toml [connect];
        RISC-V's minstret needs no clock)."""
        defines = []
        keys = [("icount_shift", "QE_ICOUNT_SHIFT")]
        if "riscv" not in board.shared:
            keys.append(("systick_hz", "QE_SYSTICK_HZ"))
        for key, macro in keys:
            val = board.connect.get(key)
            low = 0 if key == "icount_shift" else 1
            if not isinstance(val, int) or isinstance(val, bool) or val < low:
                what = "a non-negative" if low == 0 else "a positive"
                raise QuarlError(f"board {board.id}: [connect] needs {what} integer '{key}'")
            defines.append(f"-D{macro}={val}{'u' if key == 'systick_hz' else ''}")
        return defines


class SimavrMethod(ConnectMethod):
    """An emulated AVR board: simavr, cycle-accurate, behind a bridge program (simavr.py)."""
    name = "simavr"

    def start(self, board, elf, port=None, flasher=None, drive=None):
        return Simavr(board, elf)

    def missing_tools(self, board):
        if not Path("/usr/include/simavr/sim_avr.h").is_file():
            return [("libsimavr-dev", board.connect.get("install", ""))]
        return []


class SerialMethod(ConnectMethod):
    """A real board over USB: flashed with its tool, then reached on its serial port (`baud`;
    opening the port may reset it: `reset_on_open_ms`)."""
    name = "serial"
    flashes = True

    def start(self, board, elf, port=None, flasher=None, drive=None):
        return FlashedBoard(board, elf, port, flasher, drive)

    def link_options(self, board):
        return {"baudrate": board.baud}

    def open_wait_s(self, board):
        return board.reset_on_open_ms / 1000


class AgentMethod(ConnectMethod):
    """A linux board's agent (link/agent.py), which runs the .tflite itself: nothing to build.
    Started here behind a pty; on a real board deployed over SSH (launch.py, ssh_deploy)."""
    name = "agent"
    builds_firmware = False

    def start(self, board, elf, port=None, flasher=None, drive=None):
        temp_dir = Path(tempfile.mkdtemp(prefix="quarl-edge-agent-"))   # `elf` is the .tflite
        return HostPty(elf, [sys.executable, "-m", "quarl_edge.link.agent", str(elf), "--stdio",
                             "--board-id", board.id], temp_dir / "agent.stderr.log", temp_dir)


# The connect methods by name, in the order an unknown name's error lists them.
METHODS: dict[str, ConnectMethod] = {m.name: m for m in (PtyMethod(), QemuMethod(), SimavrMethod(),
                                                         SerialMethod(), AgentMethod())}
