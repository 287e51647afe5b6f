"""The flash tools quarl-edge knows: what each program is called, how to install it, which
image it takes and which keys its `[flash.<tool>]` table in a board file has; whether each of a
board's tools is installed. Pure data and lookups: board files are validated against TOOLS
(targets/boards.py), and flashing itself lives in targets/flash.py."""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class FlashTool:
    name: str
    program: str | None          # the executable; None: the image is copied to a USB drive
    install: str                 # how to install the program
    image: str                   # what the tool takes: "elf", "hex", "uf2" or "esp"
    required: dict               # key -> type in [flash.<name>]
    optional: dict = field(default_factory=dict)
    needs_port: bool = False     # flashes through the board's serial port (a bootloader)


TOOLS: dict[str, FlashTool] = {t.name: t for t in (
    FlashTool("openocd", "openocd", "apt-get install --no-install-recommends openocd", "elf",
              {"config": list}, {"commands": list}),
    FlashTool("pyocd", "pyocd", "pip install pyocd", "elf", {"target": str}),
    FlashTool("daplink", None, "", "hex", {"volume": str}),
    FlashTool("avrdude", "avrdude", "apt-get install --no-install-recommends avrdude", "hex",
              {"partno": str, "programmer": str}, {"baud": int}, needs_port=True),
    FlashTool("uf2", None, "", "uf2", {"volume": str, "family_id": int}, {"base": int}),
    FlashTool("picotool", "picotool",
              "apt-get install --no-install-recommends picotool (Debian 13+, Ubuntu 24.04+)",
              "elf", {}),
    # esptool (PyPI, not a dependency: like pyocd, a program the user installs) writes the ESP
    # image we make (flash.esp_image) through the chip's ROM download mode.
    FlashTool("esptool", "esptool.py", "pip install esptool", "esp", {"chip": str, "chip_id": int},
              {"offset": int, "baud": int}, needs_port=True),
    FlashTool("teensy", "teensy_loader_cli",
              "apt-get install --no-install-recommends teensy-loader-cli", "hex", {"mcu": str}),
    # any GDB server: a Black Magic Probe's port, st-util, pyocd gdbserver, J-Link's, QEMU's
    # stub; `server` (HOST:PORT or a device), else --flasher gdb=SERVER; `commands` after
    # connecting (a BMP: "monitor swdp_scan", "attach 1"), `reset` after the load (default:
    # SP and PC from the vector table at the image's lowest address)
    FlashTool("gdb", "gdb-multiarch", "apt-get install --no-install-recommends gdb-multiarch",
              "elf", {}, {"server": str, "commands": list, "reset": list}),
)}
COPY_TOOLS = tuple(n for n, t in TOOLS.items() if t.program is None)
DEFAULT_TIMEOUT_S = 180.0     # teensy_loader_cli -w waits for the button press; avrdude retries


# ------------------------------------------------------------------------------ programs
def find_program(name: str) -> str | None:
    """`name` on PATH, or next to this Python (a tool pip-installed into an unactivated venv)."""
    found = shutil.which(name)
    if found:
        return found
    local = Path(sys.executable).parent / name
    return str(local) if local.is_file() and os.access(local, os.X_OK) else None


def tool_status(board) -> list[dict]:
    """For each of the board's flash tools, in order: its name, status ('ok', 'missing' or
    'copy' for drive-copy tools), the program's path or the drive's volume label, and how to
    install a missing program."""
    out = []
    for name in board.flashers:
        t = TOOLS[name]
        if t.program is None:
            out.append({"tool": name, "status": "copy", "volume": board.flash_config[name]["volume"]})
            continue
        path = find_program(t.program)
        out.append({"tool": name, "program": t.program, "status": "ok" if path else "missing",
                    "path": path, "install": t.install})
    return out


def describe_tools(board) -> str:
    """One line for `quarl-edge boards`: 'openocd ok; pyocd missing (pip install pyocd)'."""
    parts = []
    for s in tool_status(board):
        if s["status"] == "copy":
            parts.append(f"copy to {s['volume']} drive" + (" (UF2)" if s["tool"] == "uf2" else ""))
        elif s["status"] == "ok":
            parts.append(f"{s['tool']} ok")
        else:
            parts.append(f"{s['tool']} missing ({s['install']})")
    return "; ".join(parts) or "-"

