"""Flash a firmware ELF onto a real board with its vendor tool, or by copying an image to the
board's USB drive.

A board file names its flash tools in order of preference (`[flash] tools`), each with its own
sub-table (`[flash.openocd]`, `[flash.avrdude]`, ...; the keys are in TOOLS below). `flash()`
picks the first tool that is installed (or the one `--flasher` names), writes the image that
tool takes (ELF, Intel HEX, UF2 or an ESP image, all written here from the ELF's loadable
segments at their load addresses), and runs the tool with an argument list (never a shell
string) and a timeout.
A missing tool is a ToolchainError naming it and the command that installs it; a tool that
fails is a BoardError with its exit code and the last lines it printed.

The argument lists are built by one pure function per tool (`openocd_args`, ...), so what runs
is testable without a board. `board` arguments are targets/boards.py's Board (not imported:
boards.py asks connect.py, whose serial method flashes with this module)."""
from __future__ import annotations

import getpass
import os
import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BoardError, ToolchainError
from ..core.files import write_atomic
from . import flash_tools
from .images import _elf_entry, esp_image, intel_hex, loadable_segments, uf2  # noqa: F401
from .flash_tools import COPY_TOOLS, DEFAULT_TIMEOUT_S, TOOLS, FlashTool  # noqa: F401  (the tool table)
from .usb import find_port


# ------------------------------------------------------------------- argument lists (pure)
def _tcl_word(path: str) -> str:
    """A path as one word of an OpenOCD (Tcl) command: braces keep spaces literal."""
    if any(c in path for c in "{}\\"):
        raise BoardError(f"openocd cannot be given the path {path!r} (it contains braces or "
                         "backslashes); build somewhere else")
    return "{" + path + "}"


def openocd_args(cfg: dict, elf: Path, program: str = "openocd") -> list[str]:
    args = [program]
    for c in cfg["config"]:
        args += ["-f", c]
    for c in cfg.get("commands", []):
        args += ["-c", c]
    return args + ["-c", f"program {_tcl_word(str(elf))} verify reset exit"]


def pyocd_args(cfg: dict, image: Path, program: str = "pyocd") -> list[str]:
    return [program, "flash", "-t", cfg["target"], str(image)]


def avrdude_args(cfg: dict, hex_path: Path, port: str, program: str = "avrdude") -> list[str]:
    # -U memtype:op:filename:format splits at ':'; flash() passes a bare file name (cwd = its dir)
    if ":" in str(hex_path):
        raise BoardError(f"avrdude cannot be given a file name with ':' ({hex_path})")
    args = [program, "-p", cfg["partno"], "-c", cfg["programmer"], "-P", port]
    if "baud" in cfg:
        args += ["-b", str(cfg["baud"])]
    return args + ["-D", "-U", f"flash:w:{hex_path}:i"]


def gdb_args(cfg: dict, elf: Path, server: str, program: str = "gdb-multiarch") -> list[str]:
    """Load through a GDB server: connect, load, compare-sections (verify), reset, detach (the
    target then runs)."""
    if not server:
        raise BoardError("the gdb flasher needs its GDB server: --flasher gdb=HOST:PORT (or a "
                         "probe's device), or `server` in the board file's [flash.gdb]")
    reset = cfg.get("reset")
    if reset is None:       # a reset by hand: the initial SP and PC from the vector table
        vt = loadable_segments(elf)[0][0]
        reset = [f"set $sp = *(unsigned int *)0x{vt:x}", f"set $pc = *(unsigned int *)0x{vt + 4:x}"]
    cmds = ["set confirm off", "set pagination off", f"target extended-remote {server}",
            *cfg.get("commands", []), "load", "compare-sections", *reset, "detach"]
    return [program, "-nx", "-q", "-batch", *(a for c in cmds for a in ("-ex", c)), str(elf)]


def picotool_args(cfg: dict, image: Path, program: str = "picotool") -> list[str]:
    return [program, "load", "-x", str(image)]


def teensy_args(cfg: dict, hex_path: Path, program: str = "teensy_loader_cli") -> list[str]:
    return [program, f"--mcu={cfg['mcu']}", "-w", "-v", str(hex_path)]


def esptool_args(cfg: dict, image: Path, port: str, program: str = "esptool.py") -> list[str]:
    """esptool's write_flash of our ESP image at `offset`; the header's flash settings are kept
    (esp_image wrote them), the chip reset into our firmware afterwards."""
    return [program, "--chip", cfg["chip"], "--port", port, "--baud", str(cfg.get("baud", 460800)),
            "--after", "hard_reset", "write_flash", "--flash_mode", "keep", "--flash_size", "keep",
            hex(cfg.get("offset", 0)), str(image)]


# ------------------------------------------------------------------------------- images
def write_image(board, tool: str, elf: Path) -> Path:
    """The file `tool` takes, written next to the ELF (firmware.hex / .uf2 / .esp.bin)."""
    kind = TOOLS[tool].image
    elf = Path(elf)
    if kind == "elf":
        loadable_segments(elf)      # refuse a file that is not a firmware ELF before a tool sees it
        return elf
    segs = loadable_segments(elf)
    if kind == "hex":
        out = elf.with_suffix(".hex")
        write_atomic(out, intel_hex(segs))
        return out
    cfg = board.flash_config[tool]
    if kind == "esp":
        out = elf.with_suffix(".esp.bin")
        write_atomic(out, esp_image(segs, _elf_entry(elf), cfg["chip_id"]))
        return out
    out = elf.with_suffix(".uf2")
    write_atomic(out, uf2(segs, cfg["family_id"], cfg.get("base"), board.flash_bytes or None))
    return out


# -------------------------------------------------------------------------------- drives
def _mount_roots() -> list[Path]:
    user = os.environ.get("USER") or getpass.getuser()
    return [Path("/media") / user, Path("/run/media") / user, Path("/media"), Path("/Volumes")]


def _mounted_at(label: str) -> list[Path]:
    """Mount points named `label` in /proc/mounts (Linux), wherever they are."""
    try:
        text = Path("/proc/mounts").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 1:
            mnt = parts[1].replace("\\040", " ")
            if Path(mnt).name == label:
                out.append(Path(mnt))
    return out


DRIVE_MARK = {"daplink": "DETAILS.TXT", "uf2": "INFO_UF2.TXT"}


def find_drive(label: str, mark: str, drive: str | Path | None = None) -> Path:
    """The mounted USB drive with volume `label` holding the file `mark` (DAPLink's DETAILS.TXT,
    a UF2 boot loader's INFO_UF2.TXT), or `drive` checked the same way."""
    what = "DAPLink" if mark == "DETAILS.TXT" else "UF2 boot loader"
    if drive is not None:
        d = Path(drive)
        if not d.is_dir():
            raise BoardError(f"--drive {d} is not a directory (the board's mounted USB drive)")
        if not (d / mark).is_file():
            raise BoardError(f"{d} is not a {what} drive (it has no {mark})")
        return d
    looked = []
    for cand in [r / label for r in _mount_roots()] + _mounted_at(label):
        if cand in looked:
            continue
        looked.append(cand)
        if (cand / mark).is_file():
            return cand
    raise BoardError(f"no {label} drive ({what}, with {mark}) is mounted; looked in "
                     f"{', '.join(map(str, looked))}. Plug the board in"
                     + (" holding BOOTSEL" if mark == "INFO_UF2.TXT" else "")
                     + ", mount it, or pass --drive PATH")


DRIVE_GONE_S = 15.0     # DAPLink unmounts after programming ...
DRIVE_BACK_S = 30.0     # ... and comes back; FAIL.TXT then holds its error


def _copy_synced(src: Path, dest: Path) -> None:
    data = src.read_bytes()
    try:
        with open(dest, "wb") as f:
            f.write(data)
            f.flush()
            try:
                os.fsync(f.fileno())
            except OSError:
                pass        # the drive may detach as soon as it has the last block
    except OSError as e:
        raise BoardError(f"copying {src.name} to {dest.parent} failed: {e}") from None
    if hasattr(os, "sync"):
        os.sync()


def copy_to_drive(tool: str, image: Path, drive: Path, gone_s: float = DRIVE_GONE_S,
                  back_s: float = DRIVE_BACK_S) -> list[str]:
    """Copy `image` to a DAPLink or UF2 drive. DAPLink programs the chip, unmounts and mounts
    again, with FAIL.TXT if programming failed (a BoardError with its text). Returns notes."""
    mark = drive / DRIVE_MARK[tool]
    _copy_synced(image, drive / image.name)
    if tool == "uf2":      # the boot loader writes the flash and restarts into it: the drive goes
        return []
    deadline = time.monotonic() + gone_s
    while mark.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    if mark.is_file():
        notes = [f"the {drive} drive did not unmount within {gone_s:.0f} s after the copy"]
    else:
        notes = []
        deadline = time.monotonic() + back_s
        while not mark.is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not mark.is_file():
            return [(f"the DAPLink drive did not come back at {drive} within {back_s:.0f} s (not "
                     "mounted automatically?); mount it and look for FAIL.TXT if the board does "
                     "not answer")]
    fail = drive / "FAIL.TXT"
    if fail.is_file():
        text = fail.read_text(errors="replace").strip()
        raise BoardError(f"DAPLink could not program the board from {image.name}: {text} "
                         f"({fail})")
    return notes


# --------------------------------------------------------------------------------- flash
@dataclass
class FlashResult:
    tool: str
    image: Path
    command: list[str] | None = None     # None for a drive copy
    drive: Path | None = None
    port: str | None = None
    output: str = ""
    notes: list[str] = field(default_factory=list)


def check_fits(board, elf: Path) -> None:
    """Refuse an image larger than the board's flash before any tool runs."""
    size = sum(len(d) for _, d in loadable_segments(elf))
    if board.flash_bytes and size > board.flash_bytes:
        raise BoardError(f"the firmware image {Path(elf).name} is {size:,} B and board "
                         f"{board.id}'s flash holds {board.flash_bytes:,} B (flash_bytes in "
                         f"{board.path}): it does not fit; nothing was flashed")


def pick_tool(board, flasher: str | None = None) -> str:
    """The tool to use: `flasher` if given (one of the board's), else the first of the board's
    tools that is installed (a drive copy needs no program). ToolchainError if none is."""
    if not board.flashers:
        raise BoardError(f"board {board.id} has no [flash] tools in its board file "
                         f"({board.path}); it is not flashed by quarl-edge")
    if flasher is not None:
        if flasher not in board.flashers:
            raise BoardError(f"board {board.id} is flashed with {', '.join(board.flashers)}; "
                             f"not '{flasher}'")
        t = TOOLS[flasher]
        if t.program is not None and flash_tools.find_program(t.program) is None:
            raise ToolchainError(f"'{t.program}' (flash tool '{flasher}' for board {board.id}) is "
                                 f"not installed; install it with: {t.install}")
        return flasher
    for name in board.flashers:
        t = TOOLS[name]
        if t.program is None or flash_tools.find_program(t.program):
            return name
    options = "; ".join(f"{TOOLS[n].program} with: {TOOLS[n].install}" for n in board.flashers)
    raise ToolchainError(f"no flash tool for board {board.id} is installed; install one of: "
                         f"{options}")


def _tail(text: str, lines: int = 12) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


def _diagnose(board, tool: str, out: str, port: str | None, log: Path | None) -> str | None:
    """One line for a failure the tool's output names (a boot loader that does not answer, a
    flash that does not verify), or None."""
    where = f"; {tool}'s whole output: {log}" if log else ""
    if tool == "avrdude" and ("not in sync" in out or "not responding" in out):
        baud = board.flash_config.get("avrdude", {}).get("baud")
        return (f"avrdude got no answer from the boot loader on {port} (not in sync): the wrong "
                f"port, a board that was not reset into its boot loader (it listens for about a "
                f"second after a reset; opening the port resets an Uno), or the wrong baud rate "
                f"({baud or 'avrdude default'}){where}")
    if tool == "gdb":
        if re.search(r"Connection refused|Connection timed out|could not connect|No route to host|"
                     r"Remote communication error", out):
            return (f"the GDB server at {port} refused the connection: is the probe's GDB server "
                    f"running there (st-util, pyocd gdbserver, JLinkGDBServer; a Black Magic "
                    f"Probe's first port)?{where}")
        if "MIS-MATCHED" in out:
            bad = re.findall(r"Section (\S+), range (0x[0-9a-f]+ -- 0x[0-9a-f]+): MIS-MATCHED", out)
            return (f"gdb loaded board {board.id}'s flash but it does not verify (compare-sections:"
                    f" {', '.join(f'{n} {r}' for n, r in bad) or 'mismatch'}){where}")
    m = re.search(r"device 0x([0-9a-fA-F]+) != input 0x([0-9a-fA-F]+) at addr 0x([0-9a-fA-F]+)", out)
    if m or "verification error" in out or "verification mismatch" in out:
        first = (f": first at byte 0x{m.group(3)} (the board has 0x{m.group(1)}, the image "
                 f"0x{m.group(2)})") if m else ""
        return (f"{tool} wrote board {board.id}'s flash but it does not verify{first}; flash "
                f"again, and if it persists the flash or the boot loader is faulty{where}")
    return None


def _gone(port: str | None) -> bool:
    return port is not None and port.startswith("/dev/") and not os.path.exists(port)


def run_tool(board, tool: str, args: list[str], timeout: float,
             cwd: Path | None = None, port: str | None = None, log: Path | None = None) -> str:
    """Run one flash command; its combined output (also written to `log`), or a BoardError:
    one line for a failure recognised in the output or the `port` device vanishing while the
    tool runs (the tool is stopped), else the exit code and the output's last lines (or
    ToolchainError if the program vanished)."""
    command = shlex.join(args) + (f"  (in {cwd})" if cwd else "")
    out_file = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out_file,
                                stderr=subprocess.STDOUT, cwd=cwd)
    except FileNotFoundError:
        out_file.close()
        raise ToolchainError(f"'{args[0]}' (flash tool '{tool}' for board {board.id}) is not "
                             f"installed; install it with: {TOOLS[tool].install}") from None
    deadline, vanished, timed_out = time.monotonic() + timeout, False, False
    had_port = port is not None and os.path.exists(port)
    try:
        while proc.poll() is None:
            vanished = had_port and _gone(port)
            timed_out = time.monotonic() > deadline
            if vanished or timed_out:
                proc.kill()
                proc.wait()
                break
            time.sleep(0.1)
    finally:
        if proc.poll() is None:     # interrupted: stop the tool
            proc.kill()
            proc.wait()
        out_file.seek(0)
        out = out_file.read().decode(errors="replace").replace("\r", "\n")
        out_file.close()
    if log is not None:
        write_atomic(log, f"$ {command}\n{out}")
    if vanished:
        raise BoardError(f"the port {port} vanished while {tool} was flashing board {board.id} "
                         "(unplugged, or the board or its emulator stopped); the flash is "
                         f"incomplete: flash again{f'; its output: {log}' if log else ''}")
    if timed_out or proc.returncode != 0:
        line = _diagnose(board, tool, out, port, log)
        if line is not None:
            raise BoardError(line)
    if timed_out:
        raise BoardError(f"{tool} did not finish flashing board {board.id} within {timeout:.0f} s"
                         + (f"; its last output:\n{_tail(out)}" if out.strip() else "")
                         + f"\ncommand: {command}")
    if proc.returncode != 0:
        hint = ""
        if tool == "pyocd" and "not recognized" in out:   # a target pyocd does not build in
            target = board.flash_config.get("pyocd", {}).get("target", "TARGET")
            hint = f"\nhint: pyocd needs the target's CMSIS pack: pyocd pack install {target}"
        raise BoardError(f"{tool} failed flashing board {board.id} (exit code {proc.returncode})"
                         + (f":\n{_tail(out)}" if out.strip() else "") + hint
                         + f"\ncommand: {command}")
    return out


def flash(board, elf: Path, port: str | None = None, flasher: str | None = None,
          drive: str | Path | None = None, timeout: float | None = None) -> FlashResult:
    """Flash `elf` onto `board` with its preferred installed tool (or `flasher`). `port` is the
    serial port for tools that flash through it (avrdude; default: found by the board's USB
    VID:PID), `drive` the mounted USB drive for drive-copy tools (default: found by its label)."""
    flasher, _, server = (flasher or "").partition("=")
    tool = pick_tool(board, flasher or None)
    elf = Path(elf).resolve()       # the tools may run elsewhere (cwd); their messages name it
    cfg = board.flash_config.get(tool, {})
    timeout = timeout or board.flash_timeout_s or DEFAULT_TIMEOUT_S
    check_fits(board, elf)
    image = write_image(board, tool, elf)
    t = TOOLS[tool]
    if t.program is None:
        try:
            d = find_drive(cfg["volume"], DRIVE_MARK[tool], drive)
        except BoardError as e:
            others = [n for n in board.flashers if n != tool]
            if flasher is None and others:    # the preferred tool; say what else there is
                raise BoardError(f"{e}; or flash with another tool: --flasher "
                                 f"{' / '.join(others)}") from None
            raise
        notes = copy_to_drive(tool, image, d)
        return FlashResult(tool, image, drive=d, notes=notes)
    program = flash_tools.find_program(t.program) or t.program
    cwd = None
    if tool == "openocd":
        args = openocd_args(cfg, image, program)
    elif tool == "pyocd":
        args = pyocd_args(cfg, image, program)
    elif tool == "picotool":
        args = picotool_args(cfg, image, program)
    elif tool == "teensy":
        args = teensy_args(cfg, image, program)
    elif tool == "avrdude":
        if port is None:
            port = find_port(board)
        args, cwd = avrdude_args(cfg, Path(image.name), port, program), image.parent
    elif tool == "gdb":
        server = server or cfg.get("server", "")
        args = gdb_args(cfg, image, server, program)
        out = run_tool(board, tool, args, timeout, port=server, log=elf.with_suffix(".gdb.log"))
        return FlashResult(tool, image, command=args, output=out)
    elif tool == "esptool":
        if port is None:
            port = find_port(board)
        args = esptool_args(cfg, image, port, program)
    else:   # a tool in TOOLS without a runner here is a bug
        raise AssertionError(tool)
    log = elf.with_suffix(f".{tool}.log")
    try:
        out = run_tool(board, tool, args, timeout, cwd, port=port if t.needs_port else None,
                       log=log)
    except BoardError:
        if tool != "avrdude" or not _lost_sync(log):
            raise
        # Once more, as one does by hand: opening the port again resets the board into its
        # boot loader. avrdude sends two GET_SYNCs before it listens; a boot loader slow to
        # start (a loaded host's emulator, a board with a slow reset) answers them late, and
        # the stale answers put avrdude out of step ("protocol expects OK byte 0x10 but got
        # 0x14"). Nothing was written: avrdude stops before its first page.
        out = run_tool(board, tool, args, timeout, cwd, port=port if t.needs_port else None,
                       log=log)
    return FlashResult(tool, image, command=args, port=port if t.needs_port else None, output=out)


def _lost_sync(log: Path) -> bool:
    """avrdude's log says it got out of step with the boot loader before writing anything."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False
    return ("initialization failed" in text and "protocol expects" in text
            and "Writing" not in text and "writing" not in text)
