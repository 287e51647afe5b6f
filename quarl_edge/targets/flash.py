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
import hashlib
import itertools
import os
import shlex
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BoardError, ToolchainError
from . import flash_tools
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
def loadable_segments(elf: Path) -> list[tuple[int, bytes]]:
    """(load address, bytes) of every PT_LOAD segment with file contents, by address. The load
    address is the physical address (LMA): initialised data is stored in flash after the code."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with Path(elf).open("rb") as f:
            segs = [(s["p_paddr"], s.data()[:s["p_filesz"]]) for s in ELFFile(f).iter_segments()
                    if s["p_type"] == "PT_LOAD" and s["p_filesz"] > 0]
    except (OSError, ELFError) as e:
        raise BoardError(f"{elf} is not a firmware ELF: {e}") from None
    if not segs:
        raise BoardError(f"{elf} has no loadable contents")
    segs.sort()
    for (a0, d0), (a1, _) in itertools.pairwise(segs):
        if a0 + len(d0) > a1:
            raise BoardError(f"{elf}: loadable segments overlap at 0x{a1:08x}")
    return segs


def _ihex_record(rtype: int, addr: int, data: bytes = b"") -> str:
    body = bytes([len(data), (addr >> 8) & 0xFF, addr & 0xFF, rtype]) + data
    return ":" + (body + bytes([(-sum(body)) & 0xFF])).hex().upper()


def intel_hex(segments: list[tuple[int, bytes]], record_bytes: int = 16) -> str:
    """Intel HEX (data, extended linear address and end-of-file records) of the segments."""
    lines, upper = [], None
    for base, data in segments:
        if base + len(data) > 1 << 32:
            raise BoardError(f"segment at 0x{base:x} does not fit 32-bit Intel HEX")
        off = 0
        while off < len(data):
            addr = base + off
            if addr >> 16 != upper:
                upper = addr >> 16
                lines.append(_ihex_record(4, 0, struct.pack(">H", upper)))
            n = min(record_bytes, len(data) - off, 0x10000 - (addr & 0xFFFF))  # not across 64 KiB
            lines.append(_ihex_record(0, addr & 0xFFFF, data[off:off + n]))
            off += n
    lines.append(_ihex_record(1, 0))
    return "\n".join(lines) + "\n"


UF2_MAGIC_START0, UF2_MAGIC_START1, UF2_MAGIC_END = 0x0A324655, 0x9E5D5157, 0x0AB16F30
UF2_FLAG_FAMILY_ID = 0x00002000
UF2_PAYLOAD = 256      # bytes per block (what the RP2040 boot ROM requires), 256-byte aligned


def uf2(segments: list[tuple[int, bytes]], family_id: int, base: int | None = None,
        size: int | None = None) -> bytes:
    """A UF2 file (github.com/microsoft/uf2's format): one 512-byte block per 256-byte page the
    segments touch, page-aligned, zero-filled around the segments, with the family id set.
    With `base` (and `size`), every byte must lie in [base, base + size): the flash."""
    pages: dict[int, bytearray] = {}
    for addr, data in segments:
        if base is not None and (addr < base or (size and addr + len(data) > base + size)):
            end = f"0x{base + size:08x}" if size else "the end"
            raise BoardError(f"a loadable segment at 0x{addr:08x}..0x{addr + len(data):08x} lies "
                             f"outside the flash (0x{base:08x}..{end}): a UF2 cannot write it")
        pos = 0
        while pos < len(data):
            a = addr + pos
            page, at = a - a % UF2_PAYLOAD, a % UF2_PAYLOAD
            n = min(UF2_PAYLOAD - at, len(data) - pos)
            pages.setdefault(page, bytearray(UF2_PAYLOAD))[at:at + n] = data[pos:pos + n]
            pos += n
    order = sorted(pages)
    blocks = []
    for i, page in enumerate(order):
        head = struct.pack("<8I", UF2_MAGIC_START0, UF2_MAGIC_START1, UF2_FLAG_FAMILY_ID, page,
                           UF2_PAYLOAD, i, len(order), family_id)
        payload = bytes(pages[page]).ljust(476, b"\0")
        blocks.append(head + payload + struct.pack("<I", UF2_MAGIC_END))
    return b"".join(blocks)


ESP_MAGIC, ESP_CHECKSUM_SEED, ESP_WP_PIN_DISABLED = 0xE9, 0xEF, 0xEE
ESP_FLASH_DIO_40M_4MB = (2, 0x20)   # header bytes 2, 3: DIO mode; 40 MHz (low nibble 0), 4 MiB (2)


def esp_image(segments: list[tuple[int, bytes]], entry: int, chip_id: int) -> bytes:
    """An image in Espressif's boot format (what `esptool elf2image` writes, documented in
    esptool's "Firmware Image Format"), for a boot ROM that loads it into RAM: the 8-byte header
    (magic 0xE9, segment count, flash mode/frequency/size, entry address), the 16-byte extended
    header (WP pin disabled, chip id, any chip revision, SHA-256 appended), each segment as
    (load address, length, bytes padded to 4), zero padding so that the checksum byte (0xEF
    XOR every segment byte) ends a 16-byte block, then the SHA-256 of everything before it."""
    if len(segments) > 16:
        raise BoardError(f"an ESP image holds at most 16 segments; the ELF has {len(segments)}")
    out = bytearray(struct.pack("<BBBBI", ESP_MAGIC, len(segments), *ESP_FLASH_DIO_40M_4MB, entry))
    out += struct.pack("<B3sHBHH4sB", ESP_WP_PIN_DISABLED, b"\0\0\0", chip_id, 0, 0, 0xFFFF,
                       b"\0" * 4, 1)
    checksum = ESP_CHECKSUM_SEED
    for addr, data in segments:
        data = data + b"\0" * (-len(data) % 4)
        out += struct.pack("<II", addr, len(data)) + data
        for byte in data:
            checksum ^= byte
    out += b"\0" * (15 - len(out) % 16) + bytes([checksum])
    return bytes(out) + hashlib.sha256(out).digest()


def _elf_entry(elf: Path) -> int:
    from elftools.elf.elffile import ELFFile
    with Path(elf).open("rb") as f:
        return ELFFile(f)["e_entry"]


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
        out.write_text(intel_hex(segs))
        return out
    cfg = board.flash_config[tool]
    if kind == "esp":
        out = elf.with_suffix(".esp.bin")
        out.write_bytes(esp_image(segs, _elf_entry(elf), cfg["chip_id"]))
        return out
    out = elf.with_suffix(".uf2")
    out.write_bytes(uf2(segs, cfg["family_id"], cfg.get("base"), board.flash_bytes or None))
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


def run_tool(board, tool: str, args: list[str], timeout: float,
             cwd: Path | None = None) -> str:
    """Run one flash command; its combined output, or a BoardError with the exit code and the
    output's last lines (or ToolchainError if the program vanished)."""
    command = shlex.join(args) + (f"  (in {cwd})" if cwd else "")
    try:
        proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd, check=False)
    except FileNotFoundError:
        raise ToolchainError(f"'{args[0]}' (flash tool '{tool}' for board {board.id}) is not "
                             f"installed; install it with: {TOOLS[tool].install}") from None
    except subprocess.TimeoutExpired as e:
        out = (e.output or b"").decode(errors="replace")
        raise BoardError(f"{tool} did not finish flashing board {board.id} within {timeout:.0f} s"
                         + (f"; its last output:\n{_tail(out)}" if out.strip() else "")
                         + f"\ncommand: {command}") from None
    out = proc.stdout.decode(errors="replace")
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
    tool = pick_tool(board, flasher)
    elf = Path(elf).resolve()       # the tools may run elsewhere (cwd); their messages name it
    cfg = board.flash_config.get(tool, {})
    timeout = timeout or board.flash_timeout_s or DEFAULT_TIMEOUT_S
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
    elif tool == "esptool":
        if port is None:
            port = find_port(board)
        args = esptool_args(cfg, image, port, program)
    else:   # a tool in TOOLS without a runner here is a bug
        raise AssertionError(tool)
    out = run_tool(board, tool, args, timeout, cwd)
    return FlashResult(tool, image, command=args, port=port if t.needs_port else None, output=out)
