"""The policy as a C library of its own (`quarl-edge export`): the generated model and the
firmware kernels it calls, copied with every identifier of ours renamed to the library's prefix.

    sources = library_sources(model_c, kernel_files, core_dir, name)  # {file name: C text}

The copy is a token-level rename: `qe_x` becomes `NAME_x` and `QE_X` becomes `NAME_X` (in code,
comments and file names alike), so that two exported policies link into one program. Only what
the model calls is copied: the kernel files defining a function model.c calls, then those
their own calls need (requant.c, lut.c, ...), then every header these include. The tree is
flattened into one folder (src/ of an Arduino library): `kernels/fully_connected.h` becomes
`NAME_fully_connected.h`, and the #include lines name the new files. A board's optimized variant
of a kernel file (firmware/core/kernels/optimized/<variant>/, chosen by the caller the way
targets/build.py's kernel_sources does) replaces the reference file; the reference file it
#includes is copied as NAME_<op>_reference.inc, which no build compiles on its own.

The model's file drops what only our harness needs: the `qe_model_info` tables (the HELLO
reply's tensor specs) and the protocol header. Nothing here validates the model: cgen.generate
has done that when it wrote model.c.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..core.errors import QuarlError

# C99's keywords and C++'s (the header is included from C++ too): a prefix equal to one of
# them would still give valid identifiers (int_act), but names the library and its CMake
# target, where it reads as a mistake
C_KEYWORDS = frozenset((
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while _Bool _Complex _Imaginary "
    "alignas alignof and and_eq asm bitand bitor bool catch char16_t char32_t class compl "
    "constexpr const_cast decltype delete dynamic_cast explicit export false friend mutable "
    "namespace new noexcept not not_eq nullptr operator or or_eq private protected public "
    "reinterpret_cast static_assert static_cast template this thread_local throw true try "
    "typeid typename using virtual wchar_t xor xor_eq").split())

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\b(?:qe|QE)_(?=\w)")
_INCLUDE = re.compile(r'^(\s*#\s*include\s+)"([^"]+)"', re.M)
# a function defined with external linkage: a line at column 0 that is not static, names a
# qe_ function and is followed by the body (the kernels' style: the return type on that line)
_DEFINITION = re.compile(r"^(?!static\b)(?![#/ *])[A-Za-z][^;(]*?\b(qe_\w+)\s*\([^;]*?\)\s*\{",
                         re.M | re.S)
_CALL = re.compile(r"\b(qe_\w+)\s*\(")


def check_name(name: str) -> str:
    """`name` when it is a C identifier and not a keyword; else a QuarlError saying why."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise QuarlError(f"--name {name!r} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*): it "
                         "prefixes every symbol of the library")
    if name in C_KEYWORDS:
        raise QuarlError(f"--name {name!r} is a C or C++ keyword; choose another prefix")
    if len(name) > 40:
        raise QuarlError(f"--name {name!r} is longer than 40 characters")
    return name


def prefixed(text: str, name: str) -> str:
    """`text` with our qe_ / QE_ identifiers renamed to name_ (the token-level rename)."""
    return _TOKEN.sub(f"{name}_", text)


def _defined(text: str) -> set[str]:
    return {m.group(1) for m in _DEFINITION.finditer(_strip_comments(text))}


def _called(text: str) -> set[str]:
    return set(_CALL.findall(_strip_comments(text)))


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", re.sub(r"//[^\n]*", "", text), flags=re.S)


class _Tree:
    """Resolves #include "..." of a firmware file the way the harness build does: beside the
    including file first, then firmware/core (-I), then firmware/core/kernels."""

    def __init__(self, core: Path):
        self.core = core.resolve()

    def resolve(self, src: Path, inc: str) -> Path:
        for base in (src.parent, self.core, self.core / "kernels"):
            p = (base / inc).resolve()
            if p.is_file():
                return p
        raise QuarlError(f"{src}: #include \"{inc}\" names no file of {self.core}")

    def includes(self, src: Path) -> list[Path]:
        return [self.resolve(src, m.group(2)) for m in _INCLUDE.finditer(src.read_text())]

    def unit_text(self, src: Path) -> str:
        """The file with the .c files it #includes (an optimized variant includes the
        reference): what it defines and calls as one translation unit."""
        parts = [src.read_text()]
        for inc in self.includes(src):
            if inc.suffix == ".c":
                parts.append(self.unit_text(inc))
        return "\n".join(parts)


def needed_units(model_c: str, units: list[Path], tree: _Tree) -> list[Path]:
    """The kernel files (of `units`: one per op file, the board's variant where it has one, and
    requant.c) that model.c needs: those defining what it calls, then what they call."""
    defines: dict[str, Path] = {}
    for u in units:
        for f in _defined(tree.unit_text(u)):
            defines.setdefault(f, u)
    keep: list[Path] = []
    todo = sorted(_called(model_c))
    seen: set[str] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        u = defines.get(f)
        if u is not None and u not in keep:
            keep.append(u)
            todo.extend(sorted(_called(tree.unit_text(u)) - seen))
    return sorted(keep, key=lambda p: p.name)


def _closure(files: list[Path], tree: _Tree) -> list[Path]:
    out: list[Path] = []
    todo = list(files)
    while todo:
        f = todo.pop(0)
        if f in out:
            continue
        out.append(f)
        todo.extend(tree.includes(f))
    return out


def _flat_names(units: list[Path], files: list[Path], name: str) -> dict[Path, str]:
    """Each copied file's name in the flat folder: NAME_<file> (a header of the core keeps its
    qe_ name renamed: qe_model.h -> NAME_model.h); a reference .c that a variant includes:
    NAME_<op>_reference.inc."""
    names: dict[Path, str] = {}
    for f in files:
        base = prefixed(f.name, name) if f.name.startswith("qe_") else f"{name}_{f.name}"
        if f.suffix == ".c" and f not in units:
            base = f"{name}_{f.stem}_reference.inc"
        if base in names.values():
            raise QuarlError(f"two firmware files would both be copied as {base}")
        names[f] = base
    return names


FLASH_H = """/* QE_FLASH: the qualifier of the model's constant arrays (firmware/core/qe_flash.h).
 * With avr-gcc in a GNU mode (-std=gnu99, gnu11: Arduino's default) the arrays stay in flash
 * (__flash, read with LPM); in a strict ISO mode (-std=c99) __flash does not exist, and they
 * are ordinary const arrays, which avr-gcc copies into RAM at reset. Empty everywhere else. */
#ifndef QE_FLASH_H
#define QE_FLASH_H

#if defined(__AVR__) && !defined(__STRICT_ANSI__)
#define QE_FLASH __flash
#else
#define QE_FLASH
#endif

#define QE_FLASH_NULL 0

#endif /* QE_FLASH_H */
"""


MODEL_H = """/* The generated model inside the library (firmware/core/qe_model.h without the harness's
 * tensor specs): its arena, its schedule and, for a model with state, the state's reset. */
#ifndef QE_MODEL_H
#define QE_MODEL_H

#include <stdint.h>

#include "qe_flash.h"

#if defined(__GNUC__)
#define QE_ALIGNED(n) __attribute__((aligned(n)))
#else
#define QE_ALIGNED(n)
#endif

extern uint8_t qe_arena[];
void qe_model_invoke(void);
void qe_model_reset_state(void);

#endif /* QE_MODEL_H */
"""


# where emit.model_c's harness-only part starts (qe_model_info and the tensor specs)
INFO_MARK = "/* " + "-" * 67 + " info */"


def _model_file(model_c: str, kept_headers: set[str]) -> str:
    """model.c for the library: without the harness's info tables and protocol header, and
    including only the kernel headers of the kernels it keeps."""
    cut = model_c.find(INFO_MARK)
    if cut < 0:
        raise QuarlError("the generated model.c has no info section to leave out (emit.py's "
                         "model_c changed: update quarl_edge/converters/library.py's INFO_MARK)")
    text = model_c[:cut]
    for helper in re.findall(r"^static inline float (qe_libm_\w+)\(", text, flags=re.M):
        if text.count(helper) == 1:        # unused here: clang warns of an unused static
            text = re.sub(rf"^static inline float {helper}\(.*\n", "", text, flags=re.M)

    def drop(inc: str) -> bool:
        return inc == "qe_protocol.h" or (inc.startswith("kernels/")
                                          and inc.removeprefix("kernels/") not in kept_headers)
    return re.sub(r'^#include "([^"]+)"\n', lambda m: "" if drop(m.group(1)) else m.group(0),
                  text, flags=re.M)


def library_sources(model_c: str, units: list[Path], core: Path, name: str) -> dict[str, str]:
    """{file name: text} of the library's model and kernel files (the API wrapper is
    library_api.py's): `units` are the candidate translation units (firmware/core/requant.c
    and each kernel .c, the board's variant where it has one), `core` is firmware/core."""
    tree = _Tree(core)
    units = [u.resolve() for u in units]
    keep = needed_units(model_c, units, tree)
    files = _closure([*keep, (core / "qe_model.h").resolve()], tree)
    kept_headers = {f.name for f in files if f.suffix == ".h" and f.parent.name == "kernels"}
    names = _flat_names(keep, files, name)
    model = _model_file(model_c, kept_headers)
    out: dict[str, str] = {}
    for f in [*files, None]:
        src_text = model if f is None else f.read_text()
        src_path = (core / "model.c") if f is None else f
        if f is not None and f.name in ("qe_flash.h", "qe_model.h"):
            src_text = FLASH_H if f.name == "qe_flash.h" else MODEL_H

        def inc(m: re.Match, src_path=src_path) -> str:
            target = tree.resolve(src_path, m.group(2))
            if target not in names:
                raise QuarlError(f"{src_path.name} includes {m.group(2)}, not copied")
            return f'{m.group(1)}"{names[target]}"'
        text = prefixed(_INCLUDE.sub(inc, src_text), name)
        out[f"{name}_model.c" if f is None else names[f]] = text
    return out
