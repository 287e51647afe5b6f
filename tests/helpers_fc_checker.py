"""Build and run the optimized-kernel checkers: tests/c/fc_kernels_check.c on the host (gcc, also
under ASan/UBSan) and as bare-metal firmware under the board's QEMU (qemu-system-arm, or
qemu-system-riscv32 for hifive1), and compare their outputs
(optimized == reference == the Python twin). Shared by tests/test_kernels_optimized*.py and
tests/test_conv_kernels_optimized.py."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers_fc_cases import CHECK, FW, VARIANT_FC, Case, twin_outputs
from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import COMMON_CFLAGS, board_defines, expand_flag, family_dirs


def host_checker(tmp: Path, sanitize: bool = False, variant_fc: Path = VARIANT_FC,
                 defines: tuple = (), check: Path = CHECK) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp / (("fc_check_san" if sanitize else "fc_check") + ("" if check == CHECK else "_" + check.stem)
                 + (f"_{variant_fc.parent.name}" if defines else "")
                 + ("_small" if "-DQE_CHECK_SMALL_RAM" in defines else ""))
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"] if sanitize else []
    cmd = ["gcc", *COMMON_CFLAGS, "-O2", *san, *defines, f"-I{FW / 'core'}", str(check),
           str(variant_fc), str(FW / "core" / "requant.c"), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return exe


def board_checker(board_id: str, tmp: Path, variant_fc: Path = VARIANT_FC,
                  defines: tuple = (), check: Path = CHECK) -> Path:
    """The checker as bare-metal firmware for an emulated board: its start-up code, linker
    script and flags (boards/<id>.toml), the variant and the reference in one ELF."""
    board = get_board(board_id)
    qemu = board.connect.get("qemu", "qemu-system-arm")
    if shutil.which(board.cc) is None or shutil.which(qemu) is None:
        pytest.skip(f"{board.cc} or {qemu} is not installed")
    elf = tmp / f"{'fc_check' if check == CHECK else check.stem}_{board_id}.elf"
    srcs = [check, variant_fc, FW / "core" / "requant.c",
            *(c for d in family_dirs(board) for c in sorted(d.glob("*.c")))]
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           *board_defines(board), *defines, f"-I{FW / 'core'}",
           *(f"-I{d}" for d in family_dirs(board)),
           *map(str, srcs), "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return elf


# A sanitizer report exits with its own code, not the checker's 1 ("outputs differ"), so that
# it cannot pass for a mismatch and its report reaches the assertion message.
SANITIZER_EXIT = 97
SAN_ENV = {"ASAN_OPTIONS": f"exitcode={SANITIZER_EXIT}",
           "UBSAN_OPTIONS": f"exitcode={SANITIZER_EXIT}:print_stacktrace=1"}


def run_host(exe: Path, cases: list[Case]) -> tuple[int, bytes]:
    res = subprocess.run([str(exe)], input=b"".join(c.encode() for c in cases), capture_output=True,
                         timeout=120, env={**os.environ, **SAN_ENV})
    assert res.returncode in (0, 1), (res.returncode, res.stderr.decode(errors="replace")[-3000:])
    assert len(res.stdout) == 2 * sum(c.out_bytes for c in cases), (
        f"{len(res.stdout)} output bytes for {len(cases)} case(s), exit {res.returncode}; stderr: "
        + res.stderr.decode(errors="replace")[-3000:])
    return res.returncode, res.stdout


def run_board(board_id: str, elf: Path, cases: list, files=("fc_cases.bin", "fc_out.bin")
              ) -> tuple[int, bytes]:
    """Run a checker ELF under QEMU: the cases in files[0], its output from files[1]."""
    board = get_board(board_id)
    with tempfile.TemporaryDirectory(prefix="qe-fc-") as d:
        (Path(d) / files[0]).write_bytes(b"".join(c.encode() for c in cases))
        cmd = [board.connect.get("qemu", "qemu-system-arm"), "-machine", board.connect["machine"],
               *board.connect.get("extra_args", ()), "-kernel", str(elf),
               "-display", "none", "-monitor", "none", "-serial", "null", "-nodefaults",
               "-nic", "none", "-semihosting-config", "enable=on,target=native"]
        res = subprocess.run(cmd, cwd=d, capture_output=True, timeout=120)
        assert res.returncode in (0, 1), (res.returncode, res.stdout, res.stderr)
        return res.returncode, (Path(d) / files[1]).read_bytes()


def split(cases: list[Case], out: bytes) -> list[tuple[bytes, bytes]]:
    pairs, pos = [], 0
    for c in cases:
        n = c.out_bytes
        pairs.append((out[pos:pos + n], out[pos + n:pos + 2 * n]))
        pos += 2 * n
    assert pos == len(out), f"{len(out)} output bytes, expected {pos}"
    return pairs


def assert_same(cases, status, out, host_ref: list[bytes] | None = None, twin: bool = False):
    """optimized == reference for every case (and == the host's reference, for a board; and,
    with twin, == the Python twins' outputs)."""
    for k, (c, (ref, opt)) in enumerate(zip(cases, split(cases, out))):
        assert ref == opt, (f"case {k}: kind {c.kind} batches {c.batches} depth {c.depth} rows {c.rows} "
                            f"offsets {c.input_offset}/{c.filter_offset}: optimized != reference")
        if host_ref is not None:
            assert ref == host_ref[k], f"case {k}: the board's reference differs from the host's"
        if twin:
            assert ref == twin_outputs(c), (f"case {k}: kind {c.kind} multiplier {c.multiplier} "
                                            f"shift {c.shift} offset {c.output_offset}: the kernels "
                                            f"differ from the Python twin")
    assert status == 0


def m0_cases(cases: list[Case]) -> list[Case]:
    """The cases that fit the checker's small buffers (16 KiB of RAM on the micro:bit)."""
    return [c for c in cases if c.batches * c.depth <= 1024 and c.rows * c.depth <= 2048
            and c.rows <= 64 and ((c.rows + 3) // 4 * 4) * ((c.depth + 3) // 4 * 4) // 2 <= 1024]


def run_simavr(check: Path, variant: Path, header: str, n_cases: int, tmp: Path,
               name: str) -> list[bytes]:
    """Build an AVR checker (tests/c/fc_avr_check.c, fc_s4_avr_check.c) with its cases in flash
    (`header`, written as fc_avr_cases.h) for the atmega328p (its board flags), run it under
    simavr, and return the variant's outputs per case; every case must match the board's
    reference (status 0)."""
    board = get_board("atmega328p")
    if shutil.which(board.cc) is None or shutil.which("simavr") is None:
        pytest.skip("avr-gcc or simavr is not installed")
    d = tmp / name
    d.mkdir()
    (d / "fc_avr_cases.h").write_text(header)
    elf = d / f"{check.stem}.elf"
    cmd = [board.cc, *COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags),
           f"-I{FW / 'core'}", f"-I{d}", str(check), str(variant), str(FW / "core" / "requant.c"),
           "-o", str(elf), *(expand_flag(board, f) for f in board.ldflags)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run(["simavr", "-m", "atmega328p", "-f", "16000000", str(elf)],
                         capture_output=True, timeout=300)
    # simavr prints what the firmware sends on USART0 to stderr, a line at a time (in colour)
    text = re.sub(r"\x1b\[[0-9;]*m", "", (res.stdout + res.stderr).decode(errors="replace"))
    lines = [ln.strip().rstrip(".") for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and (ln[0] in "CE" or all(ch in "0123456789abcdef" for ch in ln))]
    assert lines and lines[-1] == "END 0", (lines[-5:], res.stderr[-2000:])
    outs, cur = [], None
    for ln in lines[:-1]:
        if ln.startswith("C "):
            _, k, bad = ln.split()
            assert bad == "0", f"case {k}: the avr variant differs from the reference on the board"
            cur = bytearray()
            outs.append(cur)
        else:
            cur += bytes.fromhex(ln)
    assert len(outs) == n_cases
    return [bytes(o) for o in outs]
