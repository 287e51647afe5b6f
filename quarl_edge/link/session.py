"""A session with a board: build the firmware (unless a port is given), start or flash the
board, open its serial port, handshake, and stop everything on exit. What measure/ uses to talk
to any board, whatever reaches it (targets/launch.py)."""
from __future__ import annotations

import time
from pathlib import Path

from ..core.errors import BoardError
from ..targets.boards import Board
from ..targets.build import build
from ..targets.launch import ExternalPort, RunningBoard, start
from .checks import check_hello, check_mem, cost_rate
from .runner import HANDSHAKE_S, BoardLink


def model_hash(model_path: Path) -> bytes:
    import hashlib
    return hashlib.sha256(Path(model_path).read_bytes()).digest()[:8]


EMULATED_HANDSHAKE_S = 40.0


class BoardSession:
    """Build (unless a port is given), start, connect and handshake; stop everything on exit.

    With `port`, the board is assumed to run firmware for `model_path` already (flashed earlier);
    the model hash in its HELLO must match. `flash=True` builds and flashes a real board even
    then (`quarl-edge flash --port`: the port to flash through and talk on). A real board
    without `port` is always built, flashed (`flasher`, `drive`: quarl_edge/targets/flash.py) and found
    by its USB VID:PID. After opening a real board's port we wait its `reset_on_open_ms`.
    `act`: (C sources, -D flags) built in beside the model (`hil --act`, measure/hil_act.py).
    `firmware`: the board's firmware already built for `model_path` (targets/build.py's
    Firmware: quarl_edge/pipeline.py's build step); then the session only starts (or flashes)
    the board with it. Without it, a board that runs firmware has it built here into
    `out_dir` (the callers that build and run in one go: validate, bench --per-op)."""

    def __init__(self, model_path: Path, board: Board, out_dir: Path, port: str | None = None,
                 trace: bool = False, flasher: str | None = None, drive: str | None = None,
                 flash: bool = False, extra_flags: tuple = (), act=None, firmware=None):
        self.model_path, self.board, self.out_dir, self.port = Path(model_path), board, out_dir, port
        self.extra_flags = tuple(extra_flags)   # e.g. ("-DQE_PER_OP",): a per-op build
        self.trace = trace
        self.flasher, self.drive = flasher, drive
        self.flash = flash and board.method.flashes
        self.firmware = firmware
        self.running: RunningBoard | None = None
        self.link = None
        self.act = act or ((), ())

    def __enter__(self):
        try:
            if self.port and not self.flash:
                self.running = ExternalPort(self.port)
            elif not self.board.method.builds_firmware:   # runs the .tflite itself (the agent)
                self.running = start(self.board, self.model_path)
            else:
                if self.firmware is None:
                    self.firmware = build(self.model_path, self.board, self.out_dir,
                                          extra_flags=self.extra_flags,
                                          extra_sources=self.act[0], extra_defines=self.act[1])
                self.running = start(self.board, self.firmware.elf, port=self.port,
                                     flasher=self.flasher, drive=self.drive)
            method = self.board.method
            self.link = BoardLink(self.running.url, trace=self.trace, alive=self.running.alive,
                                  **method.link_options(self.board))
            wait_s = method.open_wait_s(self.board)
            if wait_s:   # opening the port reset the board (DTR): its boot loader runs first
                time.sleep(wait_s)
            try:
                # An emulator's speed follows the host's load (simavr on a busy 2-core machine
                # took > 10 s to answer): wait longer; a dead one is still seen at once (alive()).
                self.info = self.link.hello(EMULATED_HANDSHAKE_S if self.board.kind == "emulated"
                                            else HANDSHAKE_S)
            except BoardError as e:
                detail = self.running.describe_exit()
                raise BoardError(f"{e}" + (f" (board {detail})" if detail else "")) from None
            expected = model_hash(self.model_path)
            if self.info.model_hash != expected:
                raise BoardError(f"the board on {self.running.url} runs model '{self.info.model_name}' "
                                 f"(hash {self.info.model_hash.hex()}), not {self.model_path.name} "
                                 f"(hash {expected.hex()}); flash it first")
            # what else it says must be the model's and within the board file's limits
            check_hello(self.running.url, self.info, self.board, self.model_path)
            self.link.cost_rate = cost_rate(self.board, self.info.cost_unit)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type=None, exc=None, tb=None):
        # A board that died mid-session: say how (exit code, the emulator's last words).
        detail = ""
        if isinstance(exc, BoardError) and self.running is not None and not self.running.alive():
            detail = self.running.describe_exit()
        if self.link is not None:
            self.link.close()
        if self.running is not None:
            self.running.stop()
        if detail and "(board " not in str(exc):
            raise BoardError(f"{exc} (board {detail})") from None

    def release_port(self) -> None:
        """Close our connection to the board but keep the board running (`quarl-edge flash`):
        a QEMU board's serial socket takes one client at a time, so the user's next command
        (validate --port URL) can only connect once we are gone."""
        if self.link is not None:
            self.link.close()
            self.link = None

    def memory(self) -> dict:
        """Flash/RAM from the ELF (when we built it) or the board, stack high-water from the board."""
        m = self.link.mem()
        check_mem(self.link.url, m, self.board, self.link.info)
        out = {"flash_bytes": m.flash_bytes or None, "ram_bytes": m.ram_bytes or None,
               "stack_bytes": m.stack_used, "arena_bytes": m.arena_bytes}
        if self.firmware is not None:
            out["flash_bytes"] = out["flash_bytes"] or self.firmware.memory.flash_bytes
            out["ram_bytes"] = out["ram_bytes"] or self.firmware.memory.ram_bytes
            out["weights_bytes"] = self.firmware.memory.weights_bytes
        return out
