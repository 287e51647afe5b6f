"""The board registry: one TOML file per board, validated on load.

A board is data (what it is, how to build for it, how to reach it); code per board *family*
lives in firmware/ports/<family>/ (C), and code per connect method (how the host starts or
flashes and reaches the board) in quarl_edge/targets/connect.py, which `Board.method` returns.

Board files are looked for in these folders, first match wins (board_dirs()):
1. folders added with add_board_dir() (the CLI's --boards-dir), the last added first;
2. $QUARL_EDGE_BOARDS, directories separated by os.pathsep (':' on Linux and macOS);
3. ${XDG_CONFIG_HOME:-~/.config}/quarl-edge/boards/ (it need not exist);
4. the shipped boards/ (quarl_edge/core/resources.py: a checkout's, or the installed package's).
So a user's board file with a shipped board's id (its file name, e.g. mps2-an386.toml)
replaces that board. A file's `id` must match its file name; `[build] family` names one of the
shipped firmware/ports/ directories."""
from __future__ import annotations

import functools
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BoardError
from ..core.schema import Key, check
from ..core.resources import BOARDS_ENV, boards_dir, env_boards_dirs, firmware_dir, user_boards_dirs
from .connect import METHODS, ConnectMethod
from .flash_tools import TOOLS, tool_status

KINDS = ("host", "emulated", "real", "linux")
COST_UNITS = ("ns", "cycles", "instructions")
CONNECT_METHODS = tuple(METHODS)     # targets/connect.py: one class per method

# What a board file may hold (quarl_edge/core/schema.py checks it; [flash] is _flash_section's).
BOARD_KEYS = {
    "id": Key(str, required=True, nonempty=True),
    "name": Key(str, required=True),
    "kind": Key(str, required=True, choices=KINDS),
    "cpu": Key(str, required=True),
    "clock_hz": Key(int, required=True, min=0),
    "flash_bytes": Key(int, required=True, min=0),     # 0: no limit / unknown
    "ram_bytes": Key(int, required=True, min=0),
    "cost_unit": Key(str, required=True, choices=COST_UNITS),
    "usb": Key(list, items=str),                       # "VID:PID" in hex
    "build": Key(dict, required=True),
    "connect": Key(dict, required=True),
    "flash": Key(dict),
    "energy": Key(dict),
}
# [energy]: the figures of the first-order estimate energy = cycles x supply x run current per
# MHz (quarl_edge/measure/energy.py), each with its source; or `none`, why the board has none.
ENERGY_KEYS = {
    "none": Key(str, nonempty=True),
    "supply_v": Key(float, min=0.5, max=12),
    "run_ua_per_mhz": Key(float, min=0.1, max=100000),
    "mode": Key(str, nonempty=True),          # the datasheet's run mode and conditions
    "source": Key(str, nonempty=True),        # datasheet name, revision, table, the figure
    "url": Key(str),
    "found": Key(str),                        # how the source was found and read
    "basis": Key(str),                        # how the figure became µA/MHz, if derived
    "cpi": Key(float, min=1, max=100),        # instructions boards: cycles per instruction
    "cpi_range": Key(list, items=float, min=1, max=100),   # ... the [low, high] it lies in
    "cpi_note": Key(str, nonempty=True),      # ... and the error that CPI carries (its source)
}
ENERGY_FIGURES = ("supply_v", "run_ua_per_mhz", "mode", "source")
BUILD_KEYS = {
    "family": Key(str, required=True, nonempty=True),
    "cc": Key(str, required=True, nonempty=True),
    "cflags": Key(list, required=True, items=str),
    "ldflags": Key(list, items=str),
    "max_payload": Key(int, required=True, min=32, max=4096),  # protocol.md's resync covers 4096
    "install": Key(str),
    "shared": Key(list, items=str),
    "kernels": Key(str),
}
CONNECT_KEYS = {     # each connect method reads its own few (targets/connect.py and its launchers)
    "method": Key(str, required=True, choices=CONNECT_METHODS),
    "install": Key(str),
    "baud": Key(int, min=1),                           # serial
    "reset_on_open_ms": Key(int, min=0),
    "machine": Key(str), "icount_shift": Key(int, min=0), "systick_hz": Key(int, min=1),
    "qemu": Key(str), "extra_args": Key(list, items=str),                      # qemu
    "mcu": Key(str), "frequency": Key(int, min=1),                             # simavr
    "python": Key(str), "tcp_port": Key(int, min=1, max=65535),                # agent
    "remote_dir": Key(str),
}


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
    shared: tuple[str, ...] = ()   # extra firmware/ports/<dir>/ compiled with the family's own
    flashers: tuple[str, ...] = ()  # [flash] tools, in order of preference (real boards)
    flash_config: dict = field(default_factory=dict)   # tool -> its [flash.<tool>] table
    flash_timeout_s: float | None = None                # [flash] timeout_s
    # [build] kernels: "reference", or an optimized variant firmware/core/kernels/optimized/<name>/
    kernels: str = "reference"
    energy: dict | None = None    # [energy]: figures and sources, or {"none": why}; None: absent

    @property
    def connect_method(self) -> str:
        return self.connect["method"]

    @property
    def method(self) -> ConnectMethod:
        """How the host reaches this board: its [connect] method's class (targets/connect.py)."""
        try:
            return METHODS[self.connect_method]
        except KeyError:
            raise BoardError(f"board {self.id}: [connect] method {self.connect_method!r} is not "
                             f"one of {', '.join(METHODS)}") from None

    @property
    def baud(self) -> int:
        """The serial port's baud rate ([connect] baud; only real serial ports use it)."""
        return self.connect.get("baud", 115200)

    @property
    def reset_on_open_ms(self) -> int:
        """How long the board is busy after the host opens its port ([connect] reset_on_open_ms:
        e.g. the Arduino Uno resets on DTR and runs its boot loader first)."""
        return self.connect.get("reset_on_open_ms", 0)

    def toolchain_installed(self) -> bool:
        return shutil.which(self.cc) is not None

    def missing_tools(self) -> list[tuple[str, str]]:
        """(what is missing, how to install it) for this board's compiler and emulator, and for
        a real board its flash tools when none of them is installed (any one will do; copying
        to the board's USB drive needs no program)."""
        missing = self.missing_build_tools()
        status = self.flasher_status()
        if status and not any(s["status"] in ("ok", "copy") for s in status):
            missing.append((" or ".join(s["program"] for s in status),
                            " or ".join(s["install"] for s in status)))
        return missing

    def missing_build_tools(self) -> list[tuple[str, str]]:
        """(what is missing, how to install it) for this board's compiler and what its connect
        method needs (an emulator)."""
        missing = []
        if not self.toolchain_installed():
            missing.append((self.cc, self.install))
        else:
            missing += [(f"{name} ({self.cc}'s C library)", self.install)
                        for name in self.spec_files() if not _compiler_has_file(self.cc, name)]
        return missing + self.method.missing_tools(self)

    def spec_files(self) -> list[str]:
        """The GCC spec files the board's flags name (--specs=nano.specs, picolibc.specs): each
        comes with the C library's package, not with the compiler's."""
        flags = (*self.cflags, *self.ldflags)
        return list(dict.fromkeys(f.split("=", 1)[1] for f in flags if f.startswith("--specs=")))

    def flasher_status(self) -> list[dict]:
        """Per flash tool: 'ok', 'missing' (with its install command) or 'copy' (to a drive)."""
        return tool_status(self)


@functools.lru_cache(maxsize=None)
def _compiler_has_file(cc: str, name: str) -> bool:
    """Whether the compiler finds `name` in its own directories (`-print-file-name` prints the
    name alone when it does not)."""
    try:
        out = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out != name and Path(out).is_file()


def _require(data: dict, key: str, typ, where: str):
    if key not in data:
        raise BoardError(f"{where}: missing key '{key}'")
    val = data[key]
    if not isinstance(val, typ) or isinstance(val, bool) and typ is not bool:
        raise BoardError(f"{where}: '{key}' must be {typ.__name__ if isinstance(typ, type) else typ}, "
                         f"got {val!r}")
    return val


def _flash_section(data: dict, where: str) -> tuple[tuple[str, ...], dict, float | None]:
    """[flash]: `tools` in order of preference, one known tool each, and a [flash.<tool>] table
    with that tool's keys (flash.TOOLS says which are required)."""
    if "flash" not in data:
        if data.get("kind") == "real":
            raise BoardError(f"{where}: a real board needs a [flash] table with 'tools' "
                             f"(known tools: {', '.join(TOOLS)})")
        return (), {}, None
    flash = _require(data, "flash", dict, where)
    path, where = where, f"{where} [flash]"
    tools = _require(flash, "tools", list, where)
    if not tools or not all(isinstance(t, str) for t in tools):
        raise BoardError(f"{where}: 'tools' must be a non-empty list of tool names")
    for t in tools:
        if t not in TOOLS:
            raise BoardError(f"{where}: unknown flash tool '{t}'; known tools: {', '.join(TOOLS)}")
    if len(set(tools)) != len(tools):
        raise BoardError(f"{where}: 'tools' lists a tool twice")
    timeout = flash.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                or timeout <= 0):
        raise BoardError(f"{where}: 'timeout_s' must be a positive number of seconds")
    for key, val in flash.items():
        if key in ("tools", "timeout_s"):
            continue
        if key not in TOOLS:
            raise BoardError(f"{where}: unknown key or table '{key}'; known tools: {', '.join(TOOLS)}")
        if key not in tools:
            raise BoardError(f"{where}: [flash.{key}] is given but '{key}' is not in 'tools'")
        if not isinstance(val, dict):
            raise BoardError(f"{where}: '{key}' must be a table [flash.{key}]")
    config = {}
    for t in tools:
        spec, sub = TOOLS[t], f"{path} [flash.{t}]"
        cfg = dict(flash.get(t, {}))
        if t == "openocd" and isinstance(cfg.get("config"), str):
            cfg["config"] = [cfg["config"]]
        if spec.required and t not in flash:
            raise BoardError(f"{sub}: flash tool '{t}' needs a [flash.{t}] table with "
                             f"{', '.join(repr(k) for k in spec.required)}")
        for k, typ in spec.required.items():
            _require(cfg, k, typ, sub)
        for k, typ in spec.optional.items():
            if k in cfg:
                _require(cfg, k, typ, sub)
        unknown = set(cfg) - set(spec.required) - set(spec.optional)
        if unknown:
            known = ", ".join([*spec.required, *spec.optional]) or "none"
            raise BoardError(f"{sub}: unknown key(s) {', '.join(sorted(unknown))}; known: {known}")
        for k in ("config", "commands"):
            if k in cfg and not all(isinstance(c, str) and c for c in cfg[k]):
                raise BoardError(f"{sub}: '{k}' must be a list of strings")
        if t == "openocd" and not cfg["config"]:
            raise BoardError(f"{sub}: 'config' must name at least one OpenOCD .cfg file")
        for k in ("baud", "family_id", "base", "chip_id", "offset"):
            if k in cfg and cfg[k] < 0:
                raise BoardError(f"{sub}: '{k}' must be >= 0")
        config[t] = cfg
    return tuple(tools), config, (float(timeout) if timeout is not None else None)


def kernel_variants() -> tuple[str, ...]:
    """What `[build] kernels` may name: "reference", or an optimized variant's directory in
    firmware/core/kernels/optimized/ (its README says how a variant replaces kernel files)."""
    opt = firmware_dir() / "core" / "kernels" / "optimized"
    variants = sorted(d.name for d in opt.iterdir() if d.is_dir()) if opt.is_dir() else []
    return ("reference", *variants)


def load_board_file(path: Path) -> Board:
    path = Path(path)
    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BoardError(f"{where}: not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise BoardError(f"{where}: not a text file (a board file is TOML)") from None
    except OSError as e:
        raise BoardError(f"cannot read board file {where}: {e.strerror or e}") from None
    check(data, BOARD_KEYS, where, BoardError)
    build, connect = data["build"], data["connect"]
    check(build, BUILD_KEYS, f"{where} [build]", BoardError)
    check(connect, CONNECT_KEYS, f"{where} [connect]", BoardError)
    bid = data["id"]
    if bid != path.stem:
        raise BoardError(f"{where}: id '{bid}' must match the file name '{path.stem}'")
    flashers, flash_config, flash_timeout = _flash_section(data, where)
    max_payload = build["max_payload"]
    shared = build.get("shared", [])
    if not all(shared):
        raise BoardError(f"{where} [build]: 'shared' must be a list of port directory names")
    kernels = build.get("kernels", "reference")
    if kernels not in kernel_variants():
        raise BoardError(f"{where} [build]: 'kernels' is {kernels!r}; expected one of "
                         f"{', '.join(kernel_variants())}")
    usb = []
    for item in data.get("usb", []):
        try:
            vid, pid = (int(x, 16) for x in str(item).split(":"))
        except ValueError:
            raise BoardError(f"{where}: usb entries are 'VID:PID' in hex, got {item!r}") from None
        usb.append((vid, pid))
    return Board(
        id=bid,
        name=data["name"],
        kind=data["kind"],
        cpu=data["cpu"],
        clock_hz=data["clock_hz"],
        flash_bytes=data["flash_bytes"],
        ram_bytes=data["ram_bytes"],
        cost_unit=data["cost_unit"],
        family=build["family"],
        cc=build["cc"],
        cflags=tuple(build["cflags"]),
        ldflags=tuple(build.get("ldflags", [])),
        max_payload=max_payload,
        install=build.get("install", ""),
        connect=dict(connect),
        usb=tuple(usb),
        path=path,
        shared=tuple(shared),
        flashers=flashers,
        flash_config=flash_config,
        flash_timeout_s=flash_timeout,
        kernels=kernels,
        energy=_energy_section(data, where),
    )


def _energy_section(data: dict, where: str) -> dict | None:
    """[energy] checked: `none` alone, or every figure of ENERGY_FIGURES (and for a board
    counting instructions, the CPI that turns them into cycles and its error)."""
    energy = data.get("energy")
    if energy is None:
        return None
    check(energy, ENERGY_KEYS, f"{where} [energy]", BoardError)
    if "none" in energy:
        if set(energy) != {"none"}:
            raise BoardError(f"{where} [energy]: 'none' says the board has no energy figures; "
                             f"it takes no figures beside it, got {', '.join(sorted(energy))}")
        return dict(energy)
    missing = [k for k in ENERGY_FIGURES if k not in energy]
    if data.get("cost_unit") == "instructions":
        missing += [k for k in ("cpi", "cpi_note") if k not in energy]
    if missing:
        raise BoardError(f"{where} [energy]: missing {', '.join(missing)} (or none = \"why "
                         "the board has no energy figures\")")
    if "cpi_range" in energy:
        _cpi_range(energy, data.get("cost_unit"), where)
    return dict(energy)


def _cpi_range(energy: dict, cost_unit, where: str) -> None:
    """`cpi_range = [low, high]`: an instructions board's, two numbers with low <= cpi <= high."""
    span = energy["cpi_range"]
    if cost_unit != "instructions":
        raise BoardError(f"{where} [energy]: 'cpi_range' is for boards that count instructions; "
                         f"this one counts {cost_unit}")
    if len(span) != 2 or not span[0] <= energy["cpi"] <= span[1]:
        raise BoardError(f"{where} [energy]: 'cpi_range' must be [low, high] with low <= cpi "
                         f"({energy['cpi']:g}) <= high, got {span!r}")


_added_dirs: list[Path] = []      # add_board_dir(), the last added first


def add_board_dir(path: str | Path) -> Path:
    """Search `path` for board files before every other folder (for the CLI's --boards-dir);
    returns it. Adding a folder again moves it to the front. Not a directory: BoardError."""
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise BoardError(f"board folder {path} is not a directory")
    if p in _added_dirs:
        _added_dirs.remove(p)
    _added_dirs.insert(0, p)
    return p


def board_dirs() -> list[Path]:
    """The folders searched for board files, first match wins (see the module doc)."""
    for d in env_boards_dirs():
        if not d.is_dir():
            raise BoardError(f"${BOARDS_ENV} names {d}, which is not a directory")
    dirs = [*_added_dirs, *user_boards_dirs(), boards_dir()]
    return list(dict.fromkeys(dirs))      # a folder named twice is searched once


def _search(directory: Path | None) -> list[Path]:
    return [Path(directory)] if directory is not None else board_dirs()


def _files(dirs: list[Path]) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for d in dirs:
        for p in sorted(d.glob("*.toml")):
            files.setdefault(p.stem, p)
    return dict(sorted(files.items()))


def board_files(directory: Path | None = None) -> dict[str, Path]:
    """Board id -> the file that defines it: in `directory` alone when given, else the first of
    board_dirs() that has it (a user's file overrides a shipped one of the same id)."""
    return _files(_search(directory))


def all_boards(directory: Path | None = None) -> dict[str, Board]:
    """Every board by id, from board_dirs() (`directory` given: from that directory alone)."""
    return {bid: load_board_file(p) for bid, p in board_files(directory).items()}


def get_board(board_id: str, directory: Path | None = None) -> Board:
    """The board `board_id` from board_dirs() (`directory` given: from that directory alone).
    An id names a file in those folders, never a path: a board file names the compiler that
    runs, so one from elsewhere is loaded only when asked for (load_board_file, the CLI's
    --board-file)."""
    if not board_id or any(c in board_id for c in "/\\") or board_id.endswith(".toml") \
            or board_id.startswith("."):
        raise BoardError(f"--board takes a board id (`quarl-edge boards` lists them), got "
                         f"{board_id!r}; to use a board file elsewhere, pass --board-file PATH")
    dirs = _search(directory)
    files = _files(dirs)
    if board_id not in files:
        raise BoardError(f"unknown board '{board_id}'; known boards: {', '.join(files) or 'none'} "
                         f"(searched {', '.join(map(str, dirs))}; a board of your own is a file "
                         f"<id>.toml in one of these folders)")
    return load_board_file(files[board_id])
