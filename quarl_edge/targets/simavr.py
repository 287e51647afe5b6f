"""An emulated AVR board: simavr runs the firmware ELF cycle-accurately inside a small bridge
program on libsimavr (the `simavr` connect method, targets/connect.py), which serves USART0 on a
pseudo-terminal. The bridge is compiled here on first use (simavr_bridge)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..core.errors import BoardError, ToolchainError
from ..core.files import own, write_atomic
from ..core.resources import simavr_bridge_source
from .launch import ChildProcess, check_elf, die_with_parent

SIMAVR_BRIDGE_SOURCE = simavr_bridge_source()   # package data in a wheel
SIMAVR_INCLUDE_DIRS = (Path("/usr/include/simavr"), Path("/usr/local/include/simavr"))
SIMAVR_INSTALL = ("apt-get install --no-install-recommends simavr gcc-avr avr-libc libsimavr-dev "
                  "libsimavrparts1")


# libsimavr, and libutil for openpty(); the bridge serves its pty itself (no libsimavrparts)
SIMAVR_LIBS = ("-lsimavr", "-lutil")


def simavr_bridge(cache_dir: Path, install: str = SIMAVR_INSTALL) -> Path:
    """The simavr bridge (quarl_edge/targets/simavr_bridge.c) compiled with the host's gcc against
    libsimavr, cached in cache_dir and rebuilt when its source or the compile command changes.
    Missing headers or libraries are a ToolchainError with the install hint."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ToolchainError("the simavr bridge needs the host C compiler 'gcc'; install it with: "
                             "apt-get install --no-install-recommends gcc libc6-dev")
    # simavr's part headers include its core headers without the "simavr/" prefix
    includes = [d for d in SIMAVR_INCLUDE_DIRS if (d / "sim_avr.h").is_file()]
    if not includes:
        raise ToolchainError(f"the simavr bridge cannot be built: simavr's headers (sim_avr.h in "
                             f"{' or '.join(map(str, SIMAVR_INCLUDE_DIRS))}) are missing; "
                             f"install them with: {install}")
    src = SIMAVR_BRIDGE_SOURCE
    exe = Path(cache_dir) / "simavr_bridge"
    flags = ["-std=c99", "-Wall", "-Wextra", "-O2", f"-I{includes[0]}"]
    libs = list(SIMAVR_LIBS)
    stamp = hashlib.sha256(src.read_bytes() + " ".join([gcc, *flags, *libs]).encode()).hexdigest()
    stamp_path = exe.with_name(exe.name + ".sha256")
    if exe.is_file() and stamp_path.is_file() and stamp_path.read_text().strip() == stamp:
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    tmp = own(exe, "tmp")
    proc = subprocess.run([gcc, *flags, str(src), "-o", str(tmp), *libs],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        err = proc.stderr.strip()
        if "cannot find -lsimavr" in err:
            raise ToolchainError(f"the simavr bridge cannot be built: simavr's libraries are "
                                 f"missing; install them with: {install}\n{err[-1000:]}")
        raise ToolchainError(f"building the simavr bridge ({src}) failed:\n{err[-3000:]}")
    os.replace(tmp, exe)
    write_atomic(stamp_path, stamp + "\n")
    return exe


class Simavr(ChildProcess):
    """An emulated AVR board: simavr (cycle-accurate, so costs are real CPU cycles) runs the
    firmware ELF inside a small bridge program on libsimavr (quarl_edge/targets/simavr_bridge.c, compiled
    on first use and cached in the firmware's build directory) that connects USART0 to a
    pseudo-terminal, in the simulation's one thread, and prints its path; pyserial opens that
    pty like any serial port. (The `simavr` command-line tool cannot be fed input, so it is not
    used.)

    Bytes the firmware sends before the host opens the pty are lost, which is harmless: the
    firmware only ever answers requests, and the HELLO handshake retries. A bridge that exits
    (firmware could not be loaded, stopped or crashed; killed) is reported with its exit code and
    the last lines of its output (`describe_exit()`)."""

    START_TIMEOUT_S = 10.0
    PTY_MARK = b"qe-simavr-pty "
    EXIT_CODES = {2: "could not load the firmware", 3: "the firmware stopped", 4: "the firmware crashed"}

    def __init__(self, board, elf: Path):
        mcu = board.connect.get("mcu")
        freq = board.connect.get("frequency", board.clock_hz)
        if not isinstance(mcu, str) or not mcu or not isinstance(freq, int) or isinstance(freq, bool) \
                or freq <= 0:
            raise BoardError(f"board {board.id}: [connect] needs 'mcu' (simavr's name for the MCU) "
                             "and a positive integer 'frequency' (Hz)")
        self.board = board
        self.elf = Path(elf)
        check_elf(self.elf, "EM_AVR", "AVR")
        install = board.connect.get("install") or SIMAVR_INSTALL
        bridge = simavr_bridge(self.elf.parent, install)
        self._open_log(self.elf.with_suffix(".simavr.log"))
        self.cmd = [str(bridge), str(self.elf), mcu, str(freq)]
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, close_fds=True,
                                     preexec_fn=die_with_parent if sys.platform == "linux" else None)
        try:
            self.url = self._wait_for_pty()
        except BaseException:
            self.stop()
            raise

    def _wait_for_pty(self) -> str:
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while True:
            data = self._log_path.read_bytes()
            at = data.find(self.PTY_MARK)
            if at >= 0 and b"\n" in data[at:]:
                return data[at + len(self.PTY_MARK):].split(b"\n", 1)[0].decode().strip()
            if self.proc.poll() is not None:
                raise BoardError(f"simavr ({self.board.connect.get('mcu')}) for board {self.board.id} "
                                 f"{self.describe_exit()} while starting; command: {' '.join(self.cmd)}")
            if time.monotonic() > deadline:
                raise BoardError(f"simavr for board {self.board.id} did not open its serial pty within "
                                 f"{self.START_TIMEOUT_S:.0f} s; command: {' '.join(self.cmd)}")
            time.sleep(0.005)
