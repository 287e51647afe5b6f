"""The board registry: one TOML file per board in boards/, validated on load.

A board is data (what it is, how to build for it, how to reach it); code per board *family*
lives in firmware/ports/<family>/ (C) and quarl_edge/launch.py (how to start or flash it)."""
from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BoardError
from .paths import boards_dir

KINDS = ("host", "emulated", "real", "linux")
COST_UNITS = ("ns", "cycles", "instructions")
CONNECT_METHODS = ("pty", "qemu", "simavr", "serial", "agent")


@dataclass(frozen=True)
class Board:
    id: str
    name: str
    kind: str
    cpu: str
    clock_hz: int
    flash_bytes: int
    ram_bytes: int
    cost_unit: str
    family: str
    cc: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    max_payload: int
    install: str
    connect: dict = field(default_factory=dict)
    usb: tuple[tuple[int, int], ...] = ()   # USB (VID, PID) pairs of the board's serial port
    path: Path | None = None
    shared: tuple[str, ...] = ()   # extra firmware/ports/<dir>/ compiled with the family's port

    @property
    def connect_method(self) -> str:
        return self.connect["method"]

    def toolchain_installed(self) -> bool:
        return shutil.which(self.cc) is not None

    def missing_tools(self) -> list[tuple[str, str]]:
        """(what is missing, how to install it) for this board's compiler and emulator."""
        missing = []
        if not self.toolchain_installed():
            missing.append((self.cc, self.install))
        tool = {"qemu": "qemu-system-arm"}.get(self.connect_method)
        if tool and shutil.which(tool) is None:
            missing.append((tool, self.connect.get("install", "")))
        if self.connect_method == "simavr" and not Path("/usr/include/simavr/sim_avr.h").is_file():
            missing.append(("libsimavr-dev", self.connect.get("install", "")))
        return missing


def _require(data: dict, key: str, typ, where: str):
    if key not in data:
        raise BoardError(f"{where}: missing key '{key}'")
    val = data[key]
    if not isinstance(val, typ) or isinstance(val, bool) and typ is not bool:
        raise BoardError(f"{where}: '{key}' must be {typ.__name__ if isinstance(typ, type) else typ}, "
                         f"got {val!r}")
    return val


def _choice(data: dict, key: str, choices, where: str):
    val = _require(data, key, str, where)
    if val not in choices:
        raise BoardError(f"{where}: '{key}' is {val!r}; expected one of {', '.join(choices)}")
    return val


def load_board_file(path: Path) -> Board:
    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BoardError(f"{where}: not valid TOML: {e}") from None
    build = _require(data, "build", dict, where)
    connect = _require(data, "connect", dict, where)
    bid = _require(data, "id", str, where)
    if bid != path.stem:
        raise BoardError(f"{where}: id '{bid}' must match the file name '{path.stem}'")
    for k in ("clock_hz", "flash_bytes", "ram_bytes"):
        if _require(data, k, int, where) < 0:
            raise BoardError(f"{where}: '{k}' must be >= 0")
    _choice(connect, "method", CONNECT_METHODS, f"{where} [connect]")
    max_payload = _require(build, "max_payload", int, f"{where} [build]")
    if not 32 <= max_payload <= 4096:   # the host's resync (protocol.md) covers 4096
        raise BoardError(f"{where} [build]: max_payload must be in 32..4096")
    shared = build.get("shared", [])
    if not isinstance(shared, list) or not all(isinstance(s, str) and s for s in shared):
        raise BoardError(f"{where} [build]: 'shared' must be a list of port directory names")
    usb = []
    for item in data.get("usb", []):
        try:
            vid, pid = (int(x, 16) for x in str(item).split(":"))
        except ValueError:
            raise BoardError(f"{where}: usb entries are 'VID:PID' in hex, got {item!r}") from None
        usb.append((vid, pid))
    return Board(
        id=bid,
        name=_require(data, "name", str, where),
        kind=_choice(data, "kind", KINDS, where),
        cpu=_require(data, "cpu", str, where),
        clock_hz=data["clock_hz"],
        flash_bytes=data["flash_bytes"],
        ram_bytes=data["ram_bytes"],
        cost_unit=_choice(data, "cost_unit", COST_UNITS, where),
        family=_require(build, "family", str, f"{where} [build]"),
        cc=_require(build, "cc", str, f"{where} [build]"),
        cflags=tuple(_require(build, "cflags", list, f"{where} [build]")),
        ldflags=tuple(build.get("ldflags", [])),
        max_payload=max_payload,
        install=build.get("install", ""),
        connect=dict(connect),
        usb=tuple(usb),
        path=path,
        shared=tuple(shared),
    )


def all_boards(directory: Path | None = None) -> dict[str, Board]:
    directory = directory or boards_dir()
    return {p.stem: load_board_file(p) for p in sorted(directory.glob("*.toml"))}


def get_board(board_id: str, directory: Path | None = None) -> Board:
    directory = directory or boards_dir()
    path = directory / f"{board_id}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.toml")))
        raise BoardError(f"unknown board '{board_id}'; known boards: {known}")
    return load_board_file(path)
