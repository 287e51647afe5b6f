"""Build: .tflite -> generated C (quarl_edge/converters/cgen) -> firmware ELF for one board, with a memory report.

The firmware is firmware/core (harness, protocol, kernels) + firmware/ports/<family> + the
generated model.c, compiled with the board's compiler and flags from boards/<id>.toml.

Beside firmware.elf go the images other tools take: firmware.hex (Intel HEX, each loadable
segment at its load address) and firmware.bin (raw bytes from the lowest load address, gaps
0xFF; its address is Firmware.bin_address), for drag-and-drop drives and vendor flashers. Both are
made from the ELF's loadable segments (targets/flash.py reads them), not from objcopy's sections:
objcopy -O binary also places empty RAM sections, which makes a .bin of hundreds of MiB. A host
build is a program, so it gets neither."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from .boards import Board
from .flash import intel_hex, loadable_segments
from .flash_tools import TOOLS
from ..core.errors import QuarlError, ToolchainError
from ..core.files import atomic_path, disk_error, locked, own, subdir, write_atomic, writing
from ..core.resources import firmware_dir
from ..converters.cgen import generate

COMMON_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off")
COST_MACROS = {"ns": "QE_COST_NS", "cycles": "QE_COST_CYCLES", "instructions": "QE_COST_INSTRUCTIONS"}


# A .bin stores the gaps between segments as 0xFF bytes; segments further apart than this (e.g.
# an image with parts in flash and in RAM) get no .bin (the .hex and .elf keep their addresses).
BIN_MAX_GAP = 16 << 20


@dataclass
class MemoryReport:
    """What the firmware takes, and (board_*) what the board has, from its board file (0: the
    board file gives no size). The percentages are derived from those in __post_init__, whatever
    was passed (None when the board gives no size), so asdict() and memory.json carry them."""
    flash_bytes: int          # allocated sections with contents (code, constants, .data image)
    ram_bytes: int            # writable allocated sections (.data, .bss, stack section if any)
    arena_bytes: int          # the model's activation arena (part of ram_bytes)
    weights_bytes: int        # the model's constant data (part of flash_bytes)
    stack_bytes: int | None = None  # high-water, measured on the board (MEM)
    board_flash_bytes: int = 0      # the board's flash (board file's flash_bytes)
    board_ram_bytes: int = 0        # the board's RAM (board file's ram_bytes)
    flash_percent: float | None = None   # flash_bytes in % of board_flash_bytes (2 decimals)
    ram_percent: float | None = None     # ram_bytes in % of board_ram_bytes (2 decimals)
    layout_extra_bytes: int = 0     # of weights_bytes, what a kernel variant's weight layout adds
                                    # over the reference layout (model.json)

    def __post_init__(self):
        self.flash_percent = _percent(self.flash_bytes, self.board_flash_bytes)
        self.ram_percent = _percent(self.ram_bytes, self.board_ram_bytes)


def _percent(used: int, total: int) -> float | None:
    return round(100.0 * used / total, 2) if total else None


@dataclass
class Firmware:
    board: Board
    model_path: Path
    elf: Path
    out_dir: Path
    model_info: dict          # model.json written by the generator
    memory: MemoryReport
    bin: Path | None = None           # firmware.bin (None: see image_notes)
    bin_address: int | None = None    # the load address of the .bin's first byte
    hex: Path | None = None           # firmware.hex (None: see image_notes)
    image_notes: tuple[str, ...] = ()  # why a .bin or .hex was not written


def elf_memory(elf: Path) -> tuple[int, int]:
    """(flash, ram) in bytes from the ELF's section headers."""
    flash = ram = 0
    with elf.open("rb") as f:
        for sec in ELFFile(f).iter_sections():
            flags = sec["sh_flags"]
            if not flags & SH_FLAGS.SHF_ALLOC:
                continue
            if sec["sh_type"] != "SHT_NOBITS":
                flash += sec["sh_size"]
            if flags & SH_FLAGS.SHF_WRITE:
                ram += sec["sh_size"]
    return flash, ram


def binary_image(segments: list[tuple[int, bytes]],
                 max_gap: int = BIN_MAX_GAP) -> tuple[int, bytes]:
    """(load address, bytes) of a raw image of the segments (sorted, not overlapping, as
    flash.loadable_segments gives them): from the lowest load address to the end of the last
    segment, the gaps filled with 0xFF (erased flash). A gap over max_gap: QuarlError."""
    base = segments[0][0]
    for (a0, d0), (a1, d1) in zip(segments, segments[1:]):
        gap = a1 - (a0 + len(d0))
        if gap > max_gap:
            raise QuarlError(f"its loadable segments at 0x{a0:08x}..0x{a0 + len(d0):08x} and "
                             f"0x{a1:08x}..0x{a1 + len(d1):08x} lie {_mib(gap)} apart, more than "
                             f"a .bin fills ({_mib(max_gap)} of 0xFF at most); flash firmware.hex "
                             "or firmware.elf, which keep each segment at its address")
    end = segments[-1][0] + len(segments[-1][1])
    image = bytearray(b"\xff" * (end - base))
    for addr, data in segments:
        image[addr - base:addr - base + len(data)] = data
    return base, bytes(image)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def write_images(board: Board, elf: Path
                 ) -> tuple[Path | None, int | None, Path | None, tuple[str, ...]]:
    """Write firmware.bin and firmware.hex beside `elf`: (bin, its address, hex, notes on what
    was not written and why). A stale image of an earlier build is removed, never left behind."""
    bin_path, hex_path = elf.with_suffix(".bin"), elf.with_suffix(".hex")
    bin_path.unlink(missing_ok=True)
    hex_path.unlink(missing_ok=True)
    if board.kind == "host":
        return None, None, None, (f"no firmware.bin/.hex: {board.id} runs the ELF as a host "
                                  "program",)
    try:
        segments = loadable_segments(elf)
    except QuarlError as e:
        return None, None, None, (f"no firmware.bin/.hex: {e}",)
    notes, bin_out, address, hex_out = [], None, None, None
    try:
        if any(TOOLS[tool].image == "esp" for tool in board.flashers):
            raise QuarlError("the board's boot ROM loads an ESP image (firmware.esp.bin, written "
                             "when flashing), segment by segment into its RAM")
        address, image = binary_image(segments)
        write_atomic(bin_path, image)
        bin_out = bin_path
    except QuarlError as e:
        notes.append(f"no firmware.bin: {e}")
    try:
        write_atomic(hex_path, intel_hex(segments))
        hex_out = hex_path
    except QuarlError as e:
        notes.append(f"no firmware.hex: {e}")
    return bin_out, address, hex_out, tuple(notes)


def family_dirs(board: Board) -> list[Path]:
    """The firmware family's directory (firmware/ports/<family>), then the shared family
    directories the board file names (`[build] shared`, e.g. "cortex-m"): all are compiled and
    on the include path."""
    ports = firmware_dir() / "ports"
    dirs = []
    for name in (board.family, *board.shared):
        d = ports / name
        if not d.is_dir():
            what = "port for family" if name == board.family else "shared port directory"
            raise QuarlError(f"board {board.id}: no {what} '{name}' in {ports}")
        dirs.append(d)
    return dirs


def kernel_sources(kernels: str = "reference") -> list[Path]:
    """firmware/core/kernels/*.c, each replaced by the file of the same name in the optimized
    variant firmware/core/kernels/optimized/<kernels>/ when it has one (the board's `[build]
    kernels`; see that directory's README)."""
    kdir = firmware_dir() / "core" / "kernels"
    ref = sorted(kdir.glob("*.c"))
    if kernels == "reference":
        return ref
    vdir = kdir / "optimized" / kernels
    if not vdir.is_dir():
        raise QuarlError(f"no optimized kernel variant '{kernels}' in {vdir.parent}")
    orphans = sorted(f.name for f in vdir.glob("*.c") if not (kdir / f.name).is_file())
    if orphans:
        raise QuarlError(f"kernel variant '{kernels}': {', '.join(orphans)} replace no reference "
                         f"kernel file in {kdir}")
    return [vdir / f.name if (vdir / f.name).is_file() else f for f in ref]


def firmware_sources(board: Board) -> list[Path]:
    fw = firmware_dir()
    return (sorted((fw / "core").glob("*.c")) + kernel_sources(board.kernels)
            + [c for d in family_dirs(board) for c in sorted(d.glob("*.c"))])


def expand_flag(board: Board, flag: str) -> str:
    """Board-relative paths in cflags/ldflags: {port} = firmware/ports/<family>, {ports} =
    firmware/ports, {firmware} = firmware (e.g. "-T{port}/mps2.ld")."""
    fw = firmware_dir()
    for key, val in (("{port}", fw / "ports" / board.family), ("{ports}", fw / "ports"),
                     ("{firmware}", fw)):
        flag = flag.replace(key, str(val))
    return flag


def board_defines(board: Board) -> list[str]:
    defines = [f'-DQE_BOARD_ID="{board.id}"', f"-DQE_CLOCK_HZ={board.clock_hz}u",
               f"-DQE_COST_UNIT={COST_MACROS[board.cost_unit]}",
               f"-DQE_MAX_PAYLOAD={board.max_payload}u"]
    return defines + board.method.defines(board)     # e.g. QEMU's instruction counting


# What GNU ld says when a section does not fit its MEMORY region.
_LD_OVERFLOW = ("will not fit in region", "overflowed by")


def _failure(cc: str, proc: subprocess.CompletedProcess, lines: int = 30) -> str:
    """Why the compiler failed: its exit code or the signal that killed it (a killed compiler
    says nothing itself), then the last `lines` lines of what it printed."""
    code = proc.returncode
    if code < 0:
        try:
            name = f" ({signal.Signals(-code).name})"
        except ValueError:
            name = ""
        how = f"{Path(cc).name} was killed by signal {-code}{name}"
    else:
        how = f"{Path(cc).name} exited with code {code}"
    said = proc.stderr.strip().splitlines()[-lines:]
    return how + (":\n" + "\n".join(said) if said else " and printed nothing")


# ---------------------------------------------------------------------------- object cache
CACHE_ENV = "QUARL_EDGE_CACHE_DIR"


def object_cache_dir() -> Path:
    """Where compiled firmware objects are kept between builds: $QUARL_EDGE_CACHE_DIR, else
    ${XDG_CACHE_HOME:-~/.cache}/quarl-edge/objects."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "quarl-edge" / "objects"


_COMPILER_IDS: dict[tuple[str, int, int], str] = {}


def _compiler_id(cc: str) -> str:
    """The compiler's real path and its `--version` text (asked once per process per binary)."""
    real = os.path.realpath(cc)
    st = os.stat(real)
    key = (real, st.st_mtime_ns, st.st_size)
    if key not in _COMPILER_IDS:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True)
        _COMPILER_IDS[key] = f"{real}\n{proc.stdout}"
    return _COMPILER_IDS[key]


def _includable_digest(dirs: list[Path]) -> str:
    """One hash of every file a firmware source can #include: all .c and .h files under the
    include directories' common root, firmware/ (the variants #include the reference .c files,
    so .c files count too). System headers are the compiler's own, covered by its version."""
    h = hashlib.sha256()
    roots = sorted({d.resolve() for d in dirs})
    for root in roots:
        for f in sorted(root.rglob("*")):
            if f.suffix in (".c", ".h") and f.is_file():
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _compile_objects(cc: str, flags: list[str], sources: list[Path], cache: Path,
                     failure: str, model_defines: tuple[str, ...] = ()) -> list[Path]:
    """Compile each source to an object in `cache`, reusing the objects already there.

    The cache key of an object is the SHA-256 of: the compiler (real path and `--version`), the
    whole compile command but for the source and output paths, the source's path and bytes, and
    one digest of every .c/.h file under firmware/ (_includable_digest). That last part is the
    simple, conservative choice over hashing each file's preprocessed text: running the
    preprocessor costs a good part of a compile, while hashing ~100 small files costs
    milliseconds; it misses no header a source includes (firmware sources include only the
    firmware tree and the compiler's own headers), at the price of recompiling everything when
    any firmware file changes. So a second build of another model for the same board compiles
    only the model's model.c. Objects are written under a temporary name and renamed into place
    (atomic on one file system), so a parallel build sees a whole object or none.

    `model_defines` (-DNAME=VALUE flags that change from model to model, e.g.
    QE_INPUT_COPY_BYTES) are passed to every source like `flags`, but are part of a source's key
    only where they can matter: when NAME occurs in the source's text or in any header of the
    tree (then in every key). So they do not make every model recompile the whole firmware."""
    cache.mkdir(parents=True, exist_ok=True)
    fw = firmware_dir()
    common = hashlib.sha256()
    common.update(_compiler_id(cc).encode() + b"\0" + "\0".join(flags).encode() + b"\0"
                  + _includable_digest([fw]).encode())
    header_text = b"".join(f.read_bytes() for f in sorted(fw.rglob("*.h")))
    names = {d: d[2:].split("=", 1)[0].encode() for d in model_defines}
    everywhere = [d for d in model_defines if names[d] in header_text]
    jobs, objects = [], []
    for src in sources:
        text = src.read_bytes()
        h = common.copy()
        h.update(str(src.resolve()).encode() + b"\0" + text)
        for d in model_defines:
            if d in everywhere or names[d] in text:
                h.update(b"\0" + d.encode())
        obj = cache / f"{src.stem}-{h.hexdigest()[:32]}.o"
        objects.append(obj)
        if not obj.is_file():
            jobs.append((src, obj))

    def compile_one(job: tuple[Path, Path]) -> subprocess.CompletedProcess:
        src, obj = job
        tmp = own(obj, "tmp", thread=True)
        try:
            proc = subprocess.run([cc, *flags, *model_defines, "-c", str(src), "-o", str(tmp)],
                                  capture_output=True, text=True)
            if proc.returncode == 0:
                with writing(obj):
                    os.replace(tmp, obj)
        finally:
            tmp.unlink(missing_ok=True)
        return proc

    if jobs:
        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
            failed = [p for p in pool.map(compile_one, jobs) if p.returncode != 0]
        if failed:
            more = f"\n(and {len(failed) - 1} more sources failed)" if len(failed) > 1 else ""
            first = _failure(cc, failed[0])
            if more and "printed nothing" in first:    # e.g. a killed compiler: one line
                more = f" (so did {len(failed) - 1} more sources)"
            raise ToolchainError(f"{failure}: {first}{more}")
    return objects


def compile_firmware(board: Board, sources: list[Path], out_elf: Path, extra_flags=(),
                     model_defines=()) -> None:
    """Compile `sources` (each through the object cache, object_cache_dir()) and link them into
    `out_elf`. build.cmd beside it is the same build as one compiler call, re-runnable in a
    shell without the cache. `model_defines`: -D flags of this model (see _compile_objects)."""
    cc = shutil.which(board.cc)
    if cc is None:
        raise ToolchainError(f"compiler '{board.cc}' for board {board.id} is not installed; "
                             f"install it with: {board.install or 'your package manager'}")
    fw = firmware_dir()
    includes = [f"-I{fw / 'core'}", *(f"-I{d}" for d in family_dirs(board))]
    flags = [*COMMON_CFLAGS, *(expand_flag(board, f) for f in board.cflags), *extra_flags,
             *board_defines(board), *includes]
    ldflags = [expand_flag(board, f) for f in board.ldflags]
    cmd = [cc, *flags, *model_defines, *map(str, sources), "-o", str(out_elf), *ldflags]
    write_atomic(out_elf.parent / "build.cmd", shlex.join(cmd) + "\n")   # re-runnable in a shell
    objects = _compile_objects(cc, flags, sources, object_cache_dir(),
                               f"building firmware for {board.id} failed", tuple(model_defines))
    # the compile flags again when linking: they choose the multilib (-mcpu, -mfloat-abi)
    # linked beside, then renamed: a board started from the previous ELF keeps its file
    with atomic_path(out_elf) as tmp_elf:
        proc = subprocess.run([cc, *flags, *map(str, objects), "-o", str(tmp_elf), *ldflags],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            _link_failed(board, cc, proc, out_elf)
    # Warnings are errors when compiling (-Werror); the linker's warnings are kept here.
    write_atomic(out_elf.parent / "build.log", proc.stderr)


def _link_failed(board: Board, cc: str, proc: subprocess.CompletedProcess, elf: Path) -> None:
    """Raise what a failed link means: the firmware does not fit (the board or the disk), or
    the toolchain failed."""
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS):
        if os.strerror(code) in proc.stderr:
            raise disk_error(elf, OSError(code, os.strerror(code)))
    if any(s in proc.stderr for s in _LD_OVERFLOW):
        lines = [ln for ln in proc.stderr.splitlines() if any(s in ln for s in _LD_OVERFLOW)]
        raise QuarlError(f"firmware for {board.id} does not fit the board's memory "
                         f"(linker: {'; '.join(ln.split(': ', 1)[-1] for ln in lines)})")
    raise ToolchainError(f"building firmware for {board.id} failed: {_failure(cc, proc)}")


PER_OP_FLAG = "-DQE_PER_OP"   # a per-op build: model.c with each op timed (qe_model.h)


def generate_c(model_path: Path, board: Board, out_dir: Path, per_op: bool = False) -> Path:
    """The generated C of `model_path` for `board` (its kernel variant's weight layout) in
    OUT/gen (model.c, model.json): the first half of build(), as a step of its own
    (quarl_edge/pipeline.py). Returns OUT/gen; build(..., generated=it) compiles it."""
    model_path = Path(model_path)
    if not model_path.is_file():
        raise QuarlError(f"no model at {model_path}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with locked(out_dir):
        return _generate(model_path, out_dir, board, True, per_op)


def build(model_path: Path, board: Board, out_dir: Path, extra_flags=(),
          pack_weights: bool = True, extra_sources=(), extra_defines=(),
          generated: Path | None = None) -> Firmware:
    """Generate C for `model_path` and compile the firmware for `board` into `out_dir`. When the
    board's kernel variant lays weights out its own way (the packed FULLY_CONNECTED weights, about
    twice the int8 bytes) and the firmware then does not fit the board's flash, it is built once
    more with the reference layout, which the variant runs too. `extra_sources`, `extra_defines`:
    more C files and -D flags of this build (`hil --act`: the exported library beside the
    model, firmware/core/act/qe_act.c and its glue, -DQE_ACT...). `generated`: OUT/gen as
    generate_c() made it for this model and board (then not generated again, unless the
    build falls back to the reference weight layout)."""
    model_path = Path(model_path)
    if not model_path.is_file():
        raise QuarlError(f"no model at {model_path}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Two commands may build into one folder at once (two `hil` on one run directory): the
    # second waits for the first, and the ELF and images are replaced whole, so a board already
    # started from the earlier build keeps running the file it opened.
    with locked(out_dir):
        return _build(model_path, board, out_dir, extra_flags, pack_weights,
                      (tuple(map(Path, extra_sources)), tuple(extra_defines)),
                      generated if pack_weights else None)


def _generate(model_path: Path, out_dir: Path, board: Board, pack_weights: bool,
              per_op: bool = False) -> Path:
    """The generator's model.c and model.json in OUT/gen: generated into a new folder of this
    process, then each renamed into place (a symlink planted there is replaced, not written
    through)."""
    gen_dir = subdir(out_dir, "gen")
    tmp = own(gen_dir, "tmp")
    with writing(tmp):
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    try:
        with writing(gen_dir):
            generate(model_path, tmp, name=model_path.stem, kernels=board.kernels,
                     pack_weights=pack_weights, per_op=per_op)
        for f in sorted(tmp.iterdir()):
            with writing(gen_dir / f.name):
                os.replace(f, gen_dir / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return gen_dir


def _build(model_path: Path, board: Board, out_dir: Path, extra_flags, pack_weights: bool,
           more=((), ()), generated: Path | None = None) -> Firmware:
    gen_dir = generated if generated is not None and (Path(generated) / "model.json").is_file() \
        else _generate(model_path, out_dir, board, pack_weights, PER_OP_FLAG in extra_flags)
    info = json.loads((gen_dir / "model.json").read_text())
    elf = out_dir / "firmware.elf"
    # BENCH replays the last INFER input from a copy; size it to this model's inputs (AVR RAM).
    # Inputs larger than one frame are streamed into the arena (docs/protocol.md, "Streamed
    # tensors") and have no copy: the arena is the only buffer they need.
    input_bytes = sum(int(t["bytes"]) for t in info["inputs"])
    copy_bytes = 0 if input_bytes > board.max_payload else input_bytes
    for stale in (elf.with_suffix(".bin"), elf.with_suffix(".hex")):   # of an earlier build
        stale.unlink(missing_ok=True)
    packed = int(info.get("layout_extra_bytes", 0)) > 0
    weights, extra = int(info["weight_bytes"]), int(info.get("layout_extra_bytes", 0))
    if board.flash_bytes and weights > board.flash_bytes:
        # Said before compiling: a compiler may refuse such an array outright (avr-gcc: "size
        # of array is too large" above 32 KiB) instead of the linker saying it does not fit.
        if packed and weights - extra <= board.flash_bytes:
            return _build(model_path, board, out_dir, extra_flags, False, more)
        raise QuarlError(f"firmware for {board.id} needs {weights - extra if packed else weights}"
                         f" B of flash; the board has {board.flash_bytes} B: the model's weights "
                         f"alone do not fit (its arena takes {info['arena_bytes']} B; the board "
                         f"has {board.ram_bytes} B of RAM)")
    try:
        compile_firmware(board, firmware_sources(board) + [gen_dir / "model.c", *more[0]], elf,
                         extra_flags, model_defines=(f"-DQE_INPUT_COPY_BYTES={copy_bytes}u",
                                                     *more[1]))
    except QuarlError as e:
        if "does not fit the board's memory" not in str(e):
            raise
        if packed:      # the linker's overflow: try the reference weight layout
            return _build(model_path, board, out_dir, extra_flags, False, more)
        raise QuarlError(f"{e}; the model's arena takes {info['arena_bytes']} B, its weights "
                         f"{info['weight_bytes']} B; the board has {board.ram_bytes} B of RAM, "
                         f"{board.flash_bytes} B of flash") from None
    flash, ram = elf_memory(elf)
    if packed and board.flash_bytes and flash > board.flash_bytes:
        return _build(model_path, board, out_dir, extra_flags, False, more)
    memory = MemoryReport(flash, ram, int(info["arena_bytes"]), int(info["weight_bytes"]),
                          board_flash_bytes=board.flash_bytes, board_ram_bytes=board.ram_bytes,
                          layout_extra_bytes=int(info.get("layout_extra_bytes", 0)))
    if board.flash_bytes and flash > board.flash_bytes:
        raise QuarlError(f"firmware for {board.id} needs {flash} B of flash; the board has "
                         f"{board.flash_bytes} B")
    if board.ram_bytes and ram > board.ram_bytes:
        raise QuarlError(f"firmware for {board.id} needs {ram} B of RAM; the board has "
                         f"{board.ram_bytes} B")
    write_atomic(out_dir / "memory.json", json.dumps(asdict(memory), indent=2) + "\n")
    bin_path, bin_address, hex_path, notes = write_images(board, elf)
    return Firmware(board, model_path, elf, out_dir, info, memory, bin=bin_path,
                    bin_address=bin_address, hex=hex_path, image_notes=notes)
