"""Start ("flash") a built firmware on its board and say where its serial port is.

A running board is a context manager with a `url` that pyserial's serial_for_url() opens. Here:
the ones that need no emulator (the host build or the linux agent behind a pty, a board
someone else started, a real board flashed over USB) and the shared child-process handling;
the emulators are qemu.py and simavr.py. Which one a board gets is its connect method's choice
(targets/connect.py, `start`). Also here: deploying the linux agent to a board over SSH.
`board` arguments are targets/boards.py's Board (not imported: boards.py asks connect.py,
which starts boards with the classes here)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import tty
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from .. import converters
from ..core.errors import BoardError, QuarlError, ToolchainError
from ..core.files import open_new
from .flash import flash
from .usb import find_port


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
        self._log = open_new(self._log_path, "wb")   # (a symlink there is replaced)

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


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when we die, so no emulator outlives a killed host."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except Exception:   # not Linux: teardown then relies on stop()
        pass


def check_elf(elf: Path, machine: str, arch: str) -> None:
    """Refuse a file that is not a loadable firmware ELF for `machine` (an emulator would run any
    file as a raw image, silently)."""
    try:
        with elf.open("rb") as f:
            e = ELFFile(f)
            ok = e["e_machine"] == machine and any(seg["p_type"] == "PT_LOAD" for seg in e.iter_segments())
    except (OSError, ELFError) as err:
        raise BoardError(f"{elf} is not a firmware ELF: {err}") from None
    if not ok:
        article = "an" if arch[:1] in "AEIOU" else "a"
        raise BoardError(f"{elf} is not {article} {arch} firmware ELF (machine {e['e_machine']})")


class ExternalPort(RunningBoard):
    """A board someone else started or flashed: we only know its port (--port)."""

    def __init__(self, url: str):
        self.url = url


class FlashedBoard(RunningBoard):
    """A real board over USB: flashed here with its vendor tool (quarl_edge/targets/flash.py), then
    reached on its serial port: `port` if given (--port), else the one attached port with the
    board's USB VID:PID (boards/<id>.toml `usb`), waited for while the board re-enumerates."""

    PORT_WAIT_S = 10.0

    def __init__(self, board, elf: Path, port: str | None = None,
                 flasher: str | None = None, drive: str | None = None):
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


def start(board, elf: Path, port: str | None = None, flasher: str | None = None,
          drive: str | None = None) -> RunningBoard:
    """Start the firmware `elf` on `board` the way its connect method does (targets/connect.py);
    `port`, `flasher` and `drive` are for real boards, which are flashed and then reached on
    their serial port. A linux board's agent takes the .tflite as `elf`."""
    return board.method.start(board, elf, port, flasher, drive)


# What the linux agent needs on the board, relative to the quarl_edge package: the agent, the
# protocol it speaks and the tensor spec the protocol carries (quarl_edge.converters.tensor), and
# the package files that make them importable. quarl_edge's __init__ imports nothing at import
# time, nor does converters', so these run with numpy, pyserial and tflite-runtime.
AGENT_FILES = ("__init__.py", "core/__init__.py", "core/errors.py", "core/tflite_host.py",
               "link/__init__.py", "link/protocol.py",
               "link/agent.py", "converters/__init__.py", "converters/tensor.py")


def agent_sources() -> dict[str, Path]:
    """AGENT_FILES -> the file here that is copied: quarl_edge's own, and the converters' from the
    imported quarl_edge.converters (quarl_edge/converters/, like the rest)."""
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


def _remote_dir(board) -> str:
    """Where on the board the deploy puts the agent, its model, log and pid file: the board
    file's `[connect] remote_dir`, relative to the SSH user's home (default quarl-edge-agent).
    It goes into a remote shell command and into scp's paths, so only plain path characters."""
    import re
    d = str(board.connect.get("remote_dir", "quarl-edge-agent"))
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", d) or ".." in d.split("/"):
        raise QuarlError(f"board {board.id}: [connect] remote_dir {d!r} may hold only letters, "
                         "digits and . _ - / (no '..')")
    return d


def ssh_deploy_commands(board, model_path: Path, target: str,
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
    dirs = sorted({str(Path(f).parent) for f in AGENT_FILES})       # ".", "converters", "core", "link"
    cmds = [[*ssh, "mkdir -p " + " ".join(f"{remote_dir}/quarl_edge/{d}" for d in dirs)]]
    for d in dirs:
        files = [f for f in AGENT_FILES if str(Path(f).parent) == d]
        cmds.append([*scp, *(str(sources[f]) for f in files), f"{dest}:{remote_dir}/quarl_edge/{d}/"])
    cmds += [[*scp, str(model_path), f"{dest}:{remote_dir}/model.tflite"], [*ssh, start_cmd]]
    host = dest.rsplit("@", 1)[-1]
    return cmds, f"socket://{host}:{port}"


def ssh_deploy(board, model_path: Path, target: str,
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
