"""Attached serial ports, and which of our boards each one is (by USB VID:PID from the board
files): `quarl-edge ports`. The enumeration and matching are usb.py's; here the registry's
boards are the default."""
from __future__ import annotations

from .boards import Board, all_boards
from .usb import PortInfo, attached


def list_ports(boards: dict[str, Board] | None = None) -> list[PortInfo]:
    """The attached serial ports, each with the ids of `boards` (default: every known board)
    whose USB id it has."""
    return attached(all_boards() if boards is None else boards)
