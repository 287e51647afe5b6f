"""Shared by the flashing tests (tests/test_flash*.py, test_boards_real_build.py): board files of
a real board, a reader of UF2 images, a small ARM firmware ELF built once per test run, and
stand-in vendor programs on PATH."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_once import once_per_run
from quarl_edge.targets.boards import load_board_file

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


def parse_uf2(data: bytes):
    assert len(data) % 512 == 0 and data
    blocks = []
    for i in range(0, len(data), 512):
        b = data[i:i + 512]
        m0, m1, flags, addr, size, no, total, fam = struct.unpack("<8I", b[:32])
        assert (m0, m1, struct.unpack("<I", b[508:])[0]) == (0x0A324655, 0x9E5D5157, 0x0AB16F30)
        blocks.append((flags, addr, size, no, total, fam, b[32:32 + size]))
    return blocks


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


def tiny_elf_once(tmp_path_factory, worker_id) -> Path:
    """TINY_C linked with TINY_LD for a Cortex-M4, built once per test run (helpers_once)."""
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc is not installed (apt-get install gcc-arm-none-eabi)")

    def make(d: Path):
        (d / "t.c").write_text(TINY_C)
        (d / "t.ld").write_text(TINY_LD)
        subprocess.run([cc, "-mcpu=cortex-m4", "-mthumb", "-O1", "-nostdlib", "-T", "t.ld", "t.c",
                        "-o", "firmware.elf"], cwd=d, check=True, capture_output=True)
    return once_per_run(tmp_path_factory, worker_id, "tiny", make) / "firmware.elf"


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
