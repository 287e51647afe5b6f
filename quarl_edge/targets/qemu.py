"""An emulated board: QEMU (qemu-system-arm for Cortex-M, qemu-system-riscv32 for RISC-V: the
board file's [connect] `qemu`) runs the firmware ELF (the `qemu` connect method,
targets/connect.py), with its serial port on a Unix-domain socket and a monitor for our control."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.errors import BoardError, ToolchainError
from .launch import ChildProcess, check_elf, die_with_parent

QEMU_INSTALL = "apt-get install --no-install-recommends qemu-system-arm"
QEMU_DEFAULT = "qemu-system-arm"     # a board file's [connect] `qemu`, when it names none

# The ELF machine each emulator runs (e_machine, what to call it): any other file QEMU would run
# as a raw image, silently.
QEMU_ELF_MACHINES = {"qemu-system-arm": ("EM_ARM", "ARM"),
                     "qemu-system-riscv32": ("EM_RISCV", "RISC-V")}

HMP_PROMPT = b"(qemu) "

# How QEMU carries the serial port (measured by benchmarks/hil_speed.py; each byte of a request
# costs a trip through QEMU's main loop, which is most of a HIL step):
# - SERIAL_BUFFER: the emulated UARTs take one byte at a time (CMSDK: a 1-byte RX register;
#   PL011 and nRF51 fill their FIFO a byte per call), and QEMU reads the socket one byte per
#   main-loop iteration, only while the UART can take it: every byte waited for the guest to
#   read the one before, then for the main loop to wake again (a round of thread wake-ups per
#   byte). A mux chardev in front of the socket (`mux=on`) keeps a 32-byte buffer: the main
#   loop reads ahead into it, and the guest's read of the data register hands it the next byte
#   at once (char-mux.c, mux_chr_accept_input). The guest's UART and driver are unchanged.
# - NO_ESCAPE_CHAR: a mux interprets an escape character (default 0x01: "C-a x" quits QEMU,
#   "C-a c" switches to the monitor) and swallows it: binary frames would be corrupted or kill
#   the emulator. -echr takes any integer, and the mux compares it with each byte (0..255), so
#   256 means no escape character: every byte passes unchanged (tests/test_boards_emulated.py
#   echoes all 256 byte values and every escape sequence).
# - The serial socket is a Unix-domain socket, not loopback TCP: the UART writes each byte on
#   its own, and a TCP write runs the TCP stack (segment, ACK) in QEMU's vCPU thread.
# - QEMU is controlled through a second human monitor (HMP, our own socket), not QMP: a QMP
#   monitor runs in its own I/O thread, which every guest I/O notified, costing the vCPU thread
#   an eventfd write and that thread a wake-up: ~35 % of QEMU's CPU time per CartPole step.
# - ICOUNT_IDLE: `sleep=off`: while the guest sleeps (WFI, waiting for a byte) QEMU does not keep
#   virtual time in step with the host's clock (no warp timer to re-arm at every byte). The
#   instruction count between two points of guest code does not depend on it: only idle time
#   is virtual-time-free, and the firmware measures no idle time (BENCH counts are unchanged).
SERIAL_ID = "ser0"
SERIAL_BUFFER = "mux=on"
NO_ESCAPE_CHAR = 256
ICOUNT_IDLE = "sleep=off"


class Qemu(ChildProcess):
    """An emulated board: QEMU runs the firmware ELF with instruction counting (-icount
    shift=N, so SysTick or minstret counts instructions exactly and repeatably), its serial port 0 on
    a Unix-domain socket (unix://PATH, link/urlhandler/protocol_unix.py), a human monitor socket
    for our control (`cont`, `quit`) and another one (`reset_handle`: others may reset the board
    through it, e.g. `socat - UNIX-CONNECT:PATH` then `system_reset`, or the fault:// link's
    `reset=`). The
    serial socket takes one client at a time and a new one after it disconnects.

    QEMU starts paused (-S) and runs once our monitor has answered (`cont`).
    Bytes the firmware sends before the host connects are dropped by QEMU, which is harmless:
    the firmware only ever answers requests, and the HELLO handshake retries. The firmware ends
    the emulator through semihosting on a fault (exit code and message in `describe_exit()`)."""

    START_TIMEOUT_S = 10.0

    def __init__(self, board, elf: Path | None, gdb_port: int | None = None):
        """`elf` None: no program (an empty flash); `gdb_port`: QEMU's GDB stub on that
        localhost port and the board left halted for a debugger (emulate.py)."""
        exe = board.connect.get("qemu", QEMU_DEFAULT)
        qemu = shutil.which(exe)
        if qemu is None:
            raise ToolchainError(f"'{exe}' (the emulator for board {board.id}) is not installed; "
                                 f"install it with: {board.connect.get('install') or QEMU_INSTALL}")
        machine, shift = board.connect.get("machine"), board.connect.get("icount_shift")
        if not isinstance(machine, str) or not isinstance(shift, int):
            raise BoardError(f"board {board.id}: [connect] needs 'machine' (a QEMU machine name) "
                             "and 'icount_shift' (an integer)")
        self.board = board
        kernel = []
        if elf is not None:
            self.elf = Path(elf)
            check_elf(self.elf, *QEMU_ELF_MACHINES.get(Path(exe).name,
                                                     QEMU_ELF_MACHINES[QEMU_DEFAULT]))
            kernel = ["-kernel", str(self.elf)]
        self._dir = Path(tempfile.mkdtemp(prefix="qe-qemu-"))   # short path: AF_UNIX limit
        self._control_path = self._dir / "control.sock"   # our monitor; monitor.sock is others'
        self._serial_path = self._dir / "serial.sock"
        self._monitor_path = self._dir / "monitor.sock"
        self.reset_handle = f"qemu-monitor:{self._monitor_path}"
        self._control: socket.socket | None = None
        self._open_log(self.elf.with_suffix(".qemu.log") if elf is not None
                       else self._dir / "qemu.log")
        self.cmd = [qemu, "-machine", machine, *kernel, "-display", "none",
                    "-monitor", f"unix:{self._monitor_path},server=on,wait=off", "-nodefaults",
                    "-chardev", f"socket,id=control,path={self._control_path},server=on,wait=off",
                    "-mon", "chardev=control,mode=readline",
                    "-nic", "none", "-icount", f"shift={shift},{ICOUNT_IDLE}",
                    "-semihosting-config", "enable=on,target=native",
                    "-chardev", f"socket,id={SERIAL_ID},path={self._serial_path},server=on,"
                                f"wait=off,{SERIAL_BUFFER}",
                    "-echr", str(NO_ESCAPE_CHAR),
                    "-serial", f"chardev:{SERIAL_ID}", "-S",
                    *(["-gdb", f"tcp:127.0.0.1:{gdb_port}"] if gdb_port else []),
                    *board.connect.get("extra_args", [])]
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, close_fds=True,
                                     preexec_fn=die_with_parent if sys.platform == "linux" else None)
        try:
            self._control_connect()
            if gdb_port is None:      # else halted until the debugger runs it
                self._command("cont")
            self.url = f"unix://{self._serial_path}"
        except BaseException:
            self.stop()
            raise

    # ------------------------------------------------------------------- control monitor
    def _dead(self, doing: str) -> BoardError:
        try:                 # QEMU closes its sockets first, then exits: give it a moment
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        return BoardError(f"QEMU ({self.board.connect.get('machine')}) for board {self.board.id} "
                          f"{self.describe_exit()} while {doing}; command: {' '.join(self.cmd)}")

    def _control_connect(self) -> None:
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise self._dead("starting")
            if self._control_path.exists():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(str(self._control_path))
                    break
                except OSError:
                    sock.close()
            if time.monotonic() > deadline:
                raise BoardError(f"QEMU for board {self.board.id} did not open its monitor "
                                 f"socket within {self.START_TIMEOUT_S:.0f} s")
            time.sleep(0.005)
        sock.settimeout(self.START_TIMEOUT_S)
        self._control = sock
        self._until_prompt("starting")                   # the banner

    def _until_prompt(self, doing: str) -> str:
        """What the monitor prints up to its next prompt."""
        seen = b""
        while not seen.endswith(HMP_PROMPT):
            try:
                chunk = self._control.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise self._dead(doing)
            seen += chunk
        return seen[:-len(HMP_PROMPT)].decode("utf-8", "replace")

    def _command(self, line: str) -> str:
        self._control.sendall(line.encode() + b"\n")
        return self._until_prompt(f"answering '{line}'")

    # ------------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        if self.proc.poll() is None and self._control is not None:
            try:                                       # a clean quit first
                self._control.settimeout(1.0)
                self._control.sendall(b"quit\n")
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._terminate()
        if self._control is not None:
            self._control.close()
            self._control = None
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)
