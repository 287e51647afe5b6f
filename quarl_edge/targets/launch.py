"""Start ("flash") a built firmware on its board and say where its serial port is.

One small class per way of reaching a board (the `[connect] method` in boards/<id>.toml).
Each is a context manager with a `url` that pyserial's serial_for_url() opens."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tty
from pathlib import Path

from .boards import Board
from .. import converters
from ..errors import BoardError, QuarlError, ToolchainError
from ..resources import simavr_bridge_source


class RunningBoard:
    url: str
    # How a fault:// link (quarl_edge/link/fault.py, `reset=`) can reset this board, if it can:
    # "signal:PID" or "qemu-monitor:PATH".
    reset_handle: str | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        pass

    def describe_exit(self) -> str:
        return ""


class ChildProcess(RunningBoard):
    """A board that is a child process of ours (the host build, an emulator) writing its
    diagnostics to a log file: alive / how it died / terminate-then-kill, in one place."""

    EXIT_CODES: dict[int, str] = {}
    proc: subprocess.Popen
    _log_path: Path

    def _open_log(self, path: Path) -> None:
        self._log_path = Path(path)
        self._log = open(self._log_path, "wb")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe_exit(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        if not self._log.closed:
            self._log.flush()
        out = self._log_path.read_text(errors="replace").strip()[-500:]
        if code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
            if code in self.EXIT_CODES:
                how += f" ({self.EXIT_CODES[code]})"
        return how + (f": {out}" if out else "")

    def _terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self) -> None:
        self._terminate()
        self._log.close()


class HostPty(ChildProcess):
    """The host build runs as a child process whose stdin/stdout is the master side of a
    pseudo-terminal; the slave side (a real tty device, raw mode) is the board's serial port."""

    def __init__(self, elf: Path, argv: list[str] | None = None, log: Path | None = None,
                 temp_dir: Path | None = None):
        self._temp_dir = temp_dir     # removed on stop() (the linux agent's log directory)
        master, slave = os.openpty()
        tty.setraw(slave)
        self.url = os.ttyname(slave)
        self._slave = slave
        self._open_log(log or Path(elf).with_suffix(".stderr.log"))
        self.proc = subprocess.Popen(argv or [str(elf)], stdin=master, stdout=master,
                                     stderr=self._log, close_fds=True)
        os.close(master)
        # the host firmware (firmware/ports/host/port.c) and the linux agent restart on SIGUSR1
        self.reset_handle = f"signal:{self.proc.pid}"

    def stop(self) -> None:
        self._terminate()
        if self._slave is not None:
            os.close(self._slave)
            self._slave = None
        self._log.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when we die, so no emulator outlives a killed host."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except Exception:   # not Linux: teardown then relies on stop()
        pass


def _check_elf(elf: Path, machine: str = "EM_ARM", arch: str = "ARM") -> None:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with elf.open("rb") as f:
            e = ELFFile(f)
            ok = e["e_machine"] == machine and any(seg["p_type"] == "PT_LOAD" for seg in e.iter_segments())
    except (OSError, ELFError) as err:
        raise BoardError(f"{elf} is not a firmware ELF: {err}") from None
    if not ok:
        raise BoardError(f"{elf} is not an {arch} firmware ELF (machine {e['e_machine']})")


def _check_arm_elf(elf: Path) -> None:
    _check_elf(elf, "EM_ARM", "ARM")


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
    """An emulated Cortex-M board: qemu-system-arm runs the firmware ELF with instruction counting
    (-icount shift=N, so SysTick counts instructions exactly and repeatably), its serial port 0 on
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

    def __init__(self, board: Board, elf: Path):
        exe = board.connect.get("qemu", "qemu-system-arm")
        qemu = shutil.which(exe)
        if qemu is None:
            raise ToolchainError(f"'{exe}' (the emulator for board {board.id}) is not installed; "
                                 f"install it with: {board.connect.get('install') or 'apt-get install --no-install-recommends qemu-system-arm'}")
        machine, shift = board.connect.get("machine"), board.connect.get("icount_shift")
        if not isinstance(machine, str) or not isinstance(shift, int):
            raise BoardError(f"board {board.id}: [connect] needs 'machine' (a QEMU machine name) "
                             "and 'icount_shift' (an integer)")
        self.board = board
        self.elf = Path(elf)
        _check_arm_elf(self.elf)   # QEMU would run any other file as a raw image, silently
        self._dir = Path(tempfile.mkdtemp(prefix="qe-qemu-"))   # short path: AF_UNIX limit
        self._control_path = self._dir / "control.sock"   # our monitor; monitor.sock is others'
        self._serial_path = self._dir / "serial.sock"
        self._monitor_path = self._dir / "monitor.sock"
        self.reset_handle = f"qemu-monitor:{self._monitor_path}"
        self._control: socket.socket | None = None
        self._open_log(self.elf.with_suffix(".qemu.log"))
        self.cmd = [qemu, "-machine", machine, "-kernel", str(self.elf), "-display", "none",
                    "-monitor", f"unix:{self._monitor_path},server=on,wait=off", "-nodefaults",
                    "-chardev", f"socket,id=control,path={self._control_path},server=on,wait=off",
                    "-mon", "chardev=control,mode=readline",
                    "-nic", "none", "-icount", f"shift={shift},{ICOUNT_IDLE}",
                    "-semihosting-config", "enable=on,target=native",
                    "-chardev", f"socket,id={SERIAL_ID},path={self._serial_path},server=on,"
                                f"wait=off,{SERIAL_BUFFER}",
                    "-echr", str(NO_ESCAPE_CHAR),
                    "-serial", f"chardev:{SERIAL_ID}", "-S",
                    *board.connect.get("extra_args", [])]
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, close_fds=True,
                                     preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        try:
            self._control_connect()
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
    import hashlib
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
    tmp = exe.with_name(f"{exe.name}.{os.getpid()}.tmp")
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
    stamp_path.write_text(stamp + "\n")
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

    def __init__(self, board: Board, elf: Path):
        mcu = board.connect.get("mcu")
        freq = board.connect.get("frequency", board.clock_hz)
        if not isinstance(mcu, str) or not mcu or not isinstance(freq, int) or isinstance(freq, bool) \
                or freq <= 0:
            raise BoardError(f"board {board.id}: [connect] needs 'mcu' (simavr's name for the MCU) "
                             "and a positive integer 'frequency' (Hz)")
        self.board = board
        self.elf = Path(elf)
        _check_elf(self.elf, "EM_AVR", "AVR")
        install = board.connect.get("install") or SIMAVR_INSTALL
        bridge = simavr_bridge(self.elf.parent, install)
        self._open_log(self.elf.with_suffix(".simavr.log"))
        self.cmd = [str(bridge), str(self.elf), mcu, str(freq)]
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, close_fds=True,
                                     preexec_fn=_die_with_parent if sys.platform == "linux" else None)
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



class ExternalPort(RunningBoard):
    """A board someone else started or flashed: we only know its port (--port)."""

    def __init__(self, url: str):
        self.url = url


class FlashedBoard(RunningBoard):
    """A real board over USB: flashed here with its vendor tool (quarl_edge/targets/flash.py), then
    reached on its serial port: `port` if given (--port), else the one attached port with the
    board's USB VID:PID (boards/<id>.toml `usb`), waited for while the board re-enumerates."""

    PORT_WAIT_S = 10.0

    def __init__(self, board: Board, elf: Path, port: str | None = None,
                 flasher: str | None = None, drive: str | None = None):
        from .flash import flash
        from .ports import find_port
        self.board = board
        if port is None and not board.usb:     # say so before the board is flashed, not after
            raise BoardError(f"board {board.id} has no USB id in its board file to find its "
                             "serial port by; pass --port (its serial adapter's port)")
        self.result = flash(board, Path(elf), port=port, flasher=flasher, drive=drive)
        self.tool = self.result.tool
        self.url = port or self.result.port or find_port(board, wait_s=self.PORT_WAIT_S)
        self.found_by_usb = port is None and self.result.port is None

    def describe_exit(self) -> str:
        how = f"was flashed with {self.tool}"
        if self.found_by_usb:
            how += f"; {self.url} was found by its USB id"
        return how


def start(board: Board, elf: Path, port: str | None = None, flasher: str | None = None,
          drive: str | None = None) -> RunningBoard:
    """Start the firmware `elf` on `board`; `port`, `flasher` and `drive` are for real boards
    (connect method 'serial'), which are flashed and then reached on their serial port."""
    method = board.connect_method
    if method == "serial":
        return FlashedBoard(board, elf, port, flasher, drive)
    if method == "pty":
        return HostPty(elf)
    if method == "qemu":
        return Qemu(board, elf)
    if method == "simavr":
        return Simavr(board, elf)
    if method == "agent":   # a linux board's agent, run here behind a pty (`elf` is the .tflite)
        temp_dir = Path(tempfile.mkdtemp(prefix="quarl-edge-agent-"))
        return HostPty(elf, [sys.executable, "-m", "quarl_edge.link.agent", str(elf), "--stdio",
                             "--board-id", board.id], temp_dir / "agent.stderr.log", temp_dir)
    raise BoardError(f"board {board.id}: starting boards by '{method}' is not supported yet; "
                     "flash it yourself and pass --port")


# What the linux agent needs on the board, relative to the quarl_edge package: the agent, the
# protocol it speaks and the tensor spec the protocol carries (quarl_edge.converters.tensor), and
# the package files that make them importable. quarl_edge's __init__ imports nothing at import
# time, nor does converters', so these run with numpy, pyserial and tflite-runtime.
AGENT_FILES = ("__init__.py", "errors.py", "tflite_host.py", "link/__init__.py", "link/protocol.py",
               "link/agent.py", "converters/__init__.py", "converters/tensor.py")


def agent_sources() -> dict[str, Path]:
    """AGENT_FILES -> the file here that is copied: quarl_edge's own, and the converters' from the
    imported quarl_edge.converters (a checkout keeps it at the top, as converters/)."""
    homes = {"converters": Path(converters.__file__).resolve().parent}
    pkg = Path(__file__).resolve().parents[1]
    out = {}
    for name in AGENT_FILES:
        top, _, rest = name.partition("/")
        out[name] = homes[top] / rest if top in homes else pkg / name
    return out


def parse_ssh_target(target: str) -> tuple[str, int | None]:
    """'user@host' or 'user@host:port' -> ('user@host', port or None)."""
    dest, _, port = target.partition(":")
    if not dest or (port and not port.isdigit()):
        raise QuarlError(f"--ssh takes USER@HOST or USER@HOST:PORT, got {target!r}")
    return dest, int(port) if port else None


def _remote_dir(board: Board) -> str:
    """Where on the board the deploy puts the agent, its model, log and pid file: the board
    file's `[connect] remote_dir`, relative to the SSH user's home (default quarl-edge-agent).
    It goes into a remote shell command and into scp's paths, so only plain path characters."""
    import re
    d = str(board.connect.get("remote_dir", "quarl-edge-agent"))
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", d) or ".." in d.split("/"):
        raise QuarlError(f"board {board.id}: [connect] remote_dir {d!r} may hold only letters, "
                         "digits and . _ - / (no '..')")
    return d


def ssh_deploy_commands(board: Board, model_path: Path, target: str,
                        ssh_options: list[str] | tuple[str, ...] = ()) -> tuple[list[list[str]], str]:
    """The commands that put the agent and a model on a linux board over SSH and start it there,
    as argument lists (no local shell), and the port URL it will answer on.

    `target` is USER@HOST[:SSH_PORT]; `ssh_options` are ssh_config options (KEY=VALUE, e.g.
    IdentityFile=~/.ssh/pi) for both ssh and scp. The board runs the agent with its
    `[connect] python` (default python3; a venv's python on Raspberry Pi OS, where pip refuses
    system-wide installs) and needs numpy, tflite-runtime and pyserial there."""
    import shlex
    dest, ssh_port = parse_ssh_target(target)
    port = int(board.connect.get("tcp_port", 5555))
    python = str(board.connect.get("python", "python3"))
    remote_dir = _remote_dir(board)
    opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    for o in ssh_options:
        if "=" not in o:
            raise QuarlError(f"--ssh-option takes KEY=VALUE (an ssh_config option), got {o!r}")
        opts += ["-o", o]
    ssh = ["ssh", *opts, *(["-p", str(ssh_port)] if ssh_port else []), dest]
    scp = ["scp", "-q", *opts, *(["-P", str(ssh_port)] if ssh_port else [])]
    # The previous agent (if any) is stopped by its pid file: a pkill -f pattern would also
    # match this very command line (and the ssh client's, when the board is this machine).
    start_cmd = (f"cd {remote_dir} && {{ [ -f agent.pid ] && kill $(cat agent.pid) 2>/dev/null; "
                 f"sleep 0.2; }}; nohup {shlex.quote(python)} -m quarl_edge.link.agent model.tflite "
                 f"--tcp 0.0.0.0:{port} --board-id {shlex.quote(board.id)} > agent.log 2>&1 "
                 f"< /dev/null & echo $! > agent.pid")
    sources = agent_sources()
    dirs = sorted({str(Path(f).parent) for f in AGENT_FILES})       # ".", "converters", "link"
    cmds = [[*ssh, "mkdir -p " + " ".join(f"{remote_dir}/quarl_edge/{d}" for d in dirs)]]
    for d in dirs:
        files = [f for f in AGENT_FILES if str(Path(f).parent) == d]
        cmds.append([*scp, *(str(sources[f]) for f in files), f"{dest}:{remote_dir}/quarl_edge/{d}/"])
    cmds += [[*scp, str(model_path), f"{dest}:{remote_dir}/model.tflite"], [*ssh, start_cmd]]
    host = dest.rsplit("@", 1)[-1]
    return cmds, f"socket://{host}:{port}"


def ssh_deploy(board: Board, model_path: Path, target: str,
               ssh_options: list[str] | tuple[str, ...] = (), wait_s: float = 20.0) -> str:
    """Copy the agent and the model to a linux board, start it and wait until it listens;
    returns the port URL. A dead agent's log (agent.log on the board) is in the error."""
    cmds, url = ssh_deploy_commands(board, model_path, target, ssh_options)
    for tool in ("ssh", "scp"):
        if shutil.which(tool) is None:
            raise ToolchainError(f"'{tool}' is not installed; install it with: "
                                 "apt-get install --no-install-recommends openssh-client")
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise BoardError(f"deploying to {target} failed at `{cmd[0]} ... {cmd[-1][:60]}` "
                             f"(exit code {proc.returncode}): {proc.stderr.strip()[-500:]}")
    host, port = url.removeprefix("socket://").rsplit(":", 1)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return url
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.3)
    remote_log = f"{_remote_dir(board)}/agent.log"
    log = subprocess.run([*cmds[0][:-1], f"tail -n 15 {remote_log}"],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    raise BoardError(f"the agent on {target} is not listening on {host}:{port} after "
                     f"{wait_s:.0f} s; its log ({remote_log}):\n{log or '(empty)'}")
