"""Attached serial ports, and which of our boards each one is (by USB VID:PID from boards/*.toml)."""
from __future__ import annotations

from dataclasses import dataclass

from .boards import Board, all_boards


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


def match_boards(vid: int | None, pid: int | None, boards: dict[str, Board]) -> list[str]:
    if vid is None:
        return []
    return [b.id for b in boards.values() if (vid, pid) in b.usb]


def list_ports(boards: dict[str, Board] | None = None) -> list[PortInfo]:
    from serial.tools import list_ports as lp
    boards = all_boards() if boards is None else boards
    return [PortInfo(p.device, p.description or "", p.vid, p.pid, p.serial_number,
                     match_boards(p.vid, p.pid, boards))
            for p in sorted(lp.comports(), key=lambda p: p.device)]
