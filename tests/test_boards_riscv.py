"""The RISC-V board hifive1 (QEMU sifive_e, firmware/ports/riscv + fe310) beyond what every
emulated board gets in test_boards_emulated.py and test_models_on_boards.py: issue 41's `hil`
command with returns equal to TF Lite Micro's, ELFs of the wrong machine refused, an idle board
that does not spin the emulator, and the start-up's own exits (a trap, a return from main)
ending QEMU through semihosting."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers_models import cli

from quarl_edge.core.errors import BoardError
from quarl_edge.link.session import BoardSession
from quarl_edge.core.resources import firmware_dir
from quarl_edge.targets.boards import get_board
from quarl_edge.targets.launch import start

BOARD = get_board("hifive1")
needs_riscv = pytest.mark.skipif(
    shutil.which(BOARD.cc) is None or shutil.which("qemu-system-riscv32") is None,
    reason=f"{BOARD.cc} or qemu-system-riscv32 is not installed ({BOARD.install}; "
           f"{BOARD.connect['install']})")


@needs_riscv
def test_hil_int8_on_hifive1_plays_tflm_returns_episode_by_episode(run_copy):
    out = cli("hil", run_copy, "--scheme", "int8", "--board", "hifive1", "--episodes", "3").stdout
    assert "the board's returns equal TF Lite Micro's, episode by episode" in out, out
    assert "latency median" in out and "instructions" in out, out
    elf = run_copy / "build" / "hifive1" / "int8" / "firmware.elf"
    with pytest.raises(BoardError, match="not an ARM firmware ELF"):
        start(get_board("mps2-an386"), elf)
    with pytest.raises(BoardError, match="not a RISC-V firmware ELF"):
        start(BOARD, Path(sys.executable).resolve())


@needs_riscv
def test_an_idle_board_sleeps_instead_of_spinning_qemu(run_copy, tmp_path):
    """While it waits for a byte the firmware sleeps in WFI on the UART's PLIC interrupt: after
    an exchange (which leaves the interrupt claimed or not), QEMU takes next to no CPU time."""
    with BoardSession(run_copy / "models" / "int8.tflite", BOARD, tmp_path) as s:
        s.link.infer([np.zeros((1, 4), np.float32)])
        stat = f"/proc/{s.running.proc.pid}/stat"

        def cpu_s():
            fields = open(stat).read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        before = cpu_s()
        time.sleep(2.0)
        idle = cpu_s() - before
        assert idle < 0.5, f"QEMU used {idle:.2f} s of CPU in 2 s while the board waited"
        assert s.link.infer([np.zeros((1, 4), np.float32)])[1] > 1000   # and still answers


# A firmware of the shared start-up alone: main() traps on an illegal instruction, or returns.
MAIN = """
#include <stdint.h>
void qe_family_early_init(void) {}
int main(void) {
#ifdef TRAP
    __asm volatile(".word 0");   /* an illegal instruction */
#endif
    return 0;
}
"""


@needs_riscv
@pytest.mark.parametrize("case, code, message", [("TRAP", 3, "processor trap"),
                                                 ("RETURN", 4, "main() returned")])
def test_a_trap_or_a_return_from_main_ends_qemu_with_a_message(tmp_path, case, code, message):
    ports = firmware_dir() / "ports"
    (tmp_path / "main.c").write_text(MAIN)
    elf = tmp_path / "fw.elf"
    subprocess.run([BOARD.cc, "-march=rv32imac", "-mabi=ilp32", "-mcmodel=medany", "-O2",
                    "--specs=picolibc.specs", "-nostartfiles", f"-D{case}",
                    f"-I{ports / 'riscv'}", str(ports / "riscv" / "startup.c"),
                    str(tmp_path / "main.c"), f"-T{ports / 'fe310' / 'fe310.ld'}",
                    f"-L{ports / 'riscv'}", "-o", str(elf)], check=True)
    run = subprocess.run(["qemu-system-riscv32", "-machine", "sifive_e", "-bios", "none",
                          "-kernel", str(elf), "-display", "none", "-nodefaults",
                          "-semihosting-config", "enable=on,target=native"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == code, (run.returncode, run.stdout, run.stderr)
    assert message in run.stdout + run.stderr
