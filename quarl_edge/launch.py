"""Start ("flash") a built firmware on its board and say where its serial port is.

One small class per way of reaching a board (the `[connect] method` in boards/<id>.toml).
Each is a context manager with a `url` that pyserial's serial_for_url() opens."""
from __future__ import annotations

import os
import subprocess
import tty
from pathlib import Path

from .boards import Board
from .errors import BoardError


class RunningBoard:
    url: str

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


class HostPty(RunningBoard):
    """The host build runs as a child process whose stdin/stdout is the master side of a
    pseudo-terminal; the slave side (a real tty device, raw mode) is the board's serial port."""

    def __init__(self, elf: Path):
        master, slave = os.openpty()
        tty.setraw(slave)
        self.url = os.ttyname(slave)
        self._slave = slave
        self._stderr = open(Path(elf).with_suffix(".stderr.log"), "wb")
        self.proc = subprocess.Popen([str(elf)], stdin=master, stdout=master,
                                     stderr=self._stderr, close_fds=True)
        os.close(master)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe_exit(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        self._stderr.flush()
        err = Path(self._stderr.name).read_text(errors="replace").strip()[-500:]
        return f"exited with code {code}" + (f": {err}" if err else "")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._slave is not None:
            os.close(self._slave)
            self._slave = None
        self._stderr.close()


class ExternalPort(RunningBoard):
    """A board someone else started or flashed: we only know its port (--port)."""

    def __init__(self, url: str):
        self.url = url


def start(board: Board, elf: Path) -> RunningBoard:
    method = board.connect_method
    if method == "pty":
        return HostPty(elf)
    raise BoardError(f"board {board.id}: starting boards by '{method}' is not supported yet; "
                     "flash it yourself and pass --port")


def model_hash(model_path: Path) -> bytes:
    import hashlib
    return hashlib.sha256(Path(model_path).read_bytes()).digest()[:8]


class BoardSession:
    """Build (unless a port is given), start, connect and handshake; stop everything on exit.

    With `port`, the board is assumed to run firmware for `model_path` already (flashed earlier);
    the model hash in its HELLO must match."""

    def __init__(self, model_path: Path, board: Board, out_dir: Path, port: str | None = None,
                 trace: bool = False):
        self.model_path, self.board, self.out_dir, self.port = Path(model_path), board, out_dir, port
        self.trace = trace
        self.firmware = None
        self.running: RunningBoard | None = None
        self.link = None

    def __enter__(self):
        from .build import build
        from .runner import BoardLink
        try:
            if self.port:
                self.running = ExternalPort(self.port)
            else:
                self.firmware = build(self.model_path, self.board, self.out_dir)
                self.running = start(self.board, self.firmware.elf)
            self.link = BoardLink(self.running.url, trace=self.trace, alive=self.running.alive)
            try:
                self.info = self.link.hello()
            except BoardError as e:
                detail = self.running.describe_exit()
                raise BoardError(f"{e}" + (f" (board {detail})" if detail else "")) from None
            expected = model_hash(self.model_path)
            if self.info.model_hash != expected:
                raise BoardError(f"the board on {self.running.url} runs model '{self.info.model_name}' "
                                 f"(hash {self.info.model_hash.hex()}), not {self.model_path.name} "
                                 f"(hash {expected.hex()}); flash it first")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        if self.link is not None:
            self.link.close()
        if self.running is not None:
            self.running.stop()

    def memory(self) -> dict:
        """Flash/RAM from the ELF (when we built it) or the board, stack high-water from the board."""
        m = self.link.mem()
        out = {"flash_bytes": m.flash_bytes or None, "ram_bytes": m.ram_bytes or None,
               "stack_bytes": m.stack_used, "arena_bytes": m.arena_bytes}
        if self.firmware is not None:
            out["flash_bytes"] = out["flash_bytes"] or self.firmware.memory.flash_bytes
            out["ram_bytes"] = out["ram_bytes"] or self.firmware.memory.ram_bytes
            out["weights_bytes"] = self.firmware.memory.weights_bytes
        return out
