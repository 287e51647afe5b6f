"""Serial ports attached to this machine and the boards they belong to, by USB VID:PID (`usb` in
a board file): pyserial's enumeration matched against given boards (attached), and the one port
of a board (find_port: where a flashed board is reached, targets/launch.py). `board` arguments
are targets/boards.py's Board, not imported: launching a board needs no board registry.
ports.py lists the ports against every known board."""
from __future__ import annotations

import time
from dataclasses import dataclass

from serial.tools import list_ports as lp

from ..core.errors import BoardError


@dataclass
class PortInfo:
    device: str
    description: str
    vid: int | None
    pid: int | None
    serial_number: str | None
    boards: list[str]

    @property
    def usb_id(self) -> str:
        return f"{self.vid:04x}:{self.pid:04x}" if self.vid is not None else "-"


def match_boards(vid: int | None, pid: int | None, boards: dict) -> list[str]:
    """The ids of those `boards` (id -> Board) that have the USB id vid:pid."""
    if vid is None:
        return []
    return [b.id for b in boards.values() if (vid, pid) in b.usb]


def attached(boards: dict) -> list[PortInfo]:
    """The serial ports attached to this machine (pyserial's enumeration), each with those of
    `boards` (id -> Board) whose USB id it has."""
    return [PortInfo(p.device, p.description or "", p.vid, p.pid, p.serial_number,
                     match_boards(p.vid, p.pid, boards))
            for p in sorted(lp.comports(), key=lambda p: p.device)]


def _usb_ids(board) -> str:
    return " or ".join(f"{v:04x}:{p:04x}" for v, p in board.usb)


def find_port(board, wait_s: float = 0.0, poll_s: float = 0.25) -> str:
    """The one attached serial port whose USB VID:PID is one of the board's (`usb` in its board
    file), waiting up to `wait_s` for it to appear (a board re-enumerates after flashing).
    None attached, or several: a BoardError saying so (and to pass --port)."""
    if not board.usb:
        raise BoardError(f"board {board.id} has no USB ids ('usb' in {board.path}) to find its "
                         "serial port by; pass --port")
    deadline = time.monotonic() + wait_s
    while True:
        ports = attached({board.id: board})
        matches = [p for p in ports if p.boards]
        if len(matches) == 1:
            return matches[0].device
        if len(matches) > 1:
            listed = ", ".join(f"{p.device} ({p.usb_id}"
                               + (f", serial {p.serial_number}" if p.serial_number else "")
                               + (f", {p.description}" if p.description else "") + ")"
                               for p in matches)
            raise BoardError(f"several serial ports have board {board.id}'s USB id "
                             f"({_usb_ids(board)}): {listed}; pass --port")
        if time.monotonic() >= deadline:
            others = ", ".join(f"{p.device} ({p.usb_id})" for p in ports if p.vid is not None)
            raise BoardError(f"no serial port with USB id {_usb_ids(board)} (board {board.id}) is "
                             "attached" + (f" (USB serial ports: {others})" if others else "")
                             + "; plug the board in, or pass --port")
        time.sleep(poll_s)
