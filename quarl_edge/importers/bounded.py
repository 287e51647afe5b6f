"""The bounds every importer keeps on what an untrusted policy file can make it do (issue 36):
how much a zip member may inflate to, how deep and how large parsed JSON/YAML may be, how many
tensor bytes a file may ask for, and short, one-line descriptions of untrusted values for error
messages (never a whole repr: a pickle or YAML can build 2^60 shared lists in 200 bytes, and
printing one would walk every path). docs/import.md lists the limits.

Each limit is checked before the work it bounds: a zip member's declared size before it is
inflated, and the inflated stream again as it comes (a declared size can lie; only stored and
deflated members are read, which zipfile inflates in bounded steps)."""
from __future__ import annotations

import io
import pickletools
import zipfile
import zlib

import numpy as np

from ..core.errors import QuarlError

# SB3's `data` JSON and a .keras file's config.json (real ones: a few KB to a few hundred KB)
MAX_JSON_BYTES = 16 << 20
# a policy's weights: policy.pth inflated, the storages in it, the tensors made of them; a
# .keras file's members, an .h5 file's datasets, an .onnx file with its external data (the
# largest real policies, Atari CNNs, are ~15 MB)
MAX_WEIGHTS_BYTES = 128 << 20
# an RL Zoo config.yml / args.yml (real ones: under 2 KB)
MAX_YAML_BYTES = 1 << 20
# nesting of JSON / YAML / pickled containers (real files: under 10)
MAX_NESTING = 100
# values of parsed JSON (real SB3 data: a few hundred)
MAX_JSON_VALUES = 1_000_000
# YAML nodes, counting what aliases stand for as copies (the size a consumer that expands
# them would see; a "billion laughs" file asks for 10^9)
MAX_YAML_NODES = 100_000
# opcodes of a pickle (each builds at most one object); real policy.pth: a few thousand
MAX_PICKLE_OPS = 2_000_000
# tuple elements the unpickler may hash as dict keys or set items, counted along every path
MAX_HASHED = 1_000_000
# members of a zip (SB3's: 5; a .keras file's: 3)
MAX_ZIP_MEMBERS = 10_000
# ONNX: the elements a folded shape-arithmetic node may make (ConstantOfShape, Expand, Concat,
# Gather; real ones: a handful), the nodes of a graph and the Dense layers it maps onto (real
# policies: tens of nodes, under 10 layers)
MAX_FOLD_ELEMENTS = 1 << 20
MAX_GRAPH_NODES = 100_000
MAX_LAYERS = 256
_CHUNK = 1 << 20


def read_member(z: zipfile.ZipFile, name: str, limit: int, where: str,
                error: type[QuarlError] = QuarlError) -> bytes:
    """A zip member's bytes, refused past `limit` before anything is inflated (its declared
    size) and while it inflates (in chunks, in case the declared size lies)."""
    info = z.getinfo(name)
    if info.file_size > limit:
        raise error(f"{where}: refused: {name} inflates to {info.file_size:,} bytes, more than "
                    f"the limit of {limit:,} (a zip bomb?)")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # zipfile inflates a bzip2 or lzma member's every compressed byte it reads at once,
        # whatever size is asked for: 2 KB of bzip2 is 3 GiB in memory before any cap applies
        method = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}.get(
            info.compress_type, f"method {info.compress_type}")
        raise error(f"{where}: refused: {name} is compressed with {method}; only stored and "
                    "deflated zip members are read")
    parts, total = [], 0
    try:
        with z.open(info) as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise error(f"{where}: refused: {name} inflates past the limit of "
                                f"{limit:,} bytes (a zip bomb?)")
                parts.append(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
            ValueError) as e:
        raise error(f"{where}: a corrupted zip member {name} ({short(str(e), 100)})") from None
    return b"".join(parts)


def check_members(z: zipfile.ZipFile, limit: int, where: str,
                  error: type[QuarlError] = QuarlError) -> None:
    """The members' declared sizes together within `limit`, and not too many of them."""
    infos = z.infolist()
    if len(infos) > MAX_ZIP_MEMBERS:
        raise error(f"{where}: refused: a zip of {len(infos):,} members (the limit is "
                    f"{MAX_ZIP_MEMBERS:,})")
    total = sum(i.file_size for i in infos)
    if total > limit:
        raise error(f"{where}: refused: its members inflate to {total:,} bytes, more than the "
                    f"limit of {limit:,} (a zip bomb?)")


def read_file(path, limit: int, what: str, error: type[QuarlError] = QuarlError) -> bytes:
    """A file's bytes, refused past `limit` (read with a cap: a device or a growing file has no
    size to check first)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise error(f"cannot read {path}: {e}") from None
    if len(raw) > limit:
        raise error(f"{path}: refused: {what} larger than the limit of {limit:,} bytes")
    return raw


def check_tree(value, where: str, max_depth: int = MAX_NESTING,
               max_nodes: int = MAX_JSON_VALUES, error: type[QuarlError] = QuarlError):
    """Refuse parsed JSON/YAML (dicts, lists, tuples) nested deeper than `max_depth` or with
    more than `max_nodes` distinct containers and values; walked without recursion, each shared
    object once. Returns `value`."""
    seen: set[int] = set()
    todo = [(value, 1)]
    nodes = 0
    while todo:
        x, depth = todo.pop()
        nodes += 1
        if nodes > max_nodes:
            raise error(f"{where}: refused: more than {max_nodes:,} values")
        if not isinstance(x, (dict, list, tuple)) or id(x) in seen:
            continue
        seen.add(id(x))
        if depth > max_depth:
            raise error(f"{where}: refused: nested deeper than {max_depth} levels")
        items = [*x.keys(), *x.values()] if isinstance(x, dict) else x
        todo.extend((v, depth + 1) for v in items)
    return value


def short(x, n: int = 60) -> str:
    """What an untrusted value is, in at most about `n` printable characters, without walking
    it: a string's or a number's start (control characters escaped), else its type and size."""
    if isinstance(x, (str, bytes)):
        s = repr(x[:n])
        return s if len(x) <= n else s + "..."
    if isinstance(x, (bool, int, float, type(None))):
        s = repr(x) if not isinstance(x, int) or x.bit_length() < 200 else "a huge integer"
        return s[:n]
    if isinstance(x, (list, tuple, dict, set)):
        return f"a {type(x).__name__} of {len(x)} items"
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape[:8]}"
    kind = getattr(x, "type_name", None)        # an object a pickle built (pickle_inert.Obj)
    if isinstance(kind, str):
        return f"a {text(kind, n)} object"
    return f"a {getattr(type(x), '__name__', 'object')[:40]}"


def text(x, n: int = 80) -> str:
    """A name from a file (a string) as printable text without quotes, control and non-ASCII
    characters escaped, at most about `n` characters; anything else as `short` says it."""
    if not isinstance(x, str):
        return short(x, n)
    s = x[:n].encode("unicode_escape").decode("ascii")
    return s if len(x) <= n else s + "..."


def check_finite(name: str, value, where: str, error: type[QuarlError] = QuarlError) -> None:
    """Refuse a float tensor holding NaN or an infinity, naming it (a network with one imports
    as "agreeing" with its source: both give NaN, whose argmax is 0)."""
    a = np.asarray(value)
    if a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise error(f"{where}: refused: tensor {text(str(name))} holds {bad:,} NaN or "
                    "infinite values")


# ------------------------------------------------------------------ pickles
class UnsafePickle(QuarlError):
    """A pickle that asks for something other than data."""


# CPython's unpickler grows its memo to the index a PUT opcode names, at 8 bytes an entry: a
# file naming index 2**31 has it allocate 16 GB (and the OOM killer end the process) before
# any check here could run. Real pickles number memo entries from 0 upwards, one per object.
MAX_MEMO_INDEX = 1 << 20


def check_pickle(f: io.BytesIO, where: str) -> None:
    """Refuse a pickle (the one at f's position) whose memo indices exceed MAX_MEMO_INDEX, of
    more than MAX_PICKLE_OPS opcodes (each builds at most one object: this bounds what the
    unpickler makes), or that would make the unpickler hash more than MAX_HASHED tuple
    elements (see _Stack), read opcode by opcode without building anything; f is left where
    it was. A malformed pickle passes here: the unpickler then says what is wrong with it."""
    start, stack = f.tell(), _Stack()
    prefix = f"{where}: " if where else ""
    try:
        for count, (op, arg, _pos) in enumerate(pickletools.genops(f)):
            if op.name in ("PUT", "BINPUT", "LONG_BINPUT") and int(arg) > MAX_MEMO_INDEX:
                raise UnsafePickle(f"{prefix}refused: a pickle memo index of {int(arg):,} "
                                   "(it would make the reader allocate gigabytes)")
            if count >= MAX_PICKLE_OPS:
                raise UnsafePickle(f"{prefix}refused: a pickle of more than "
                                   f"{MAX_PICKLE_OPS:,} opcodes")
            stack.step(op, arg)
            if stack.hashed > MAX_HASHED:
                raise UnsafePickle(f"{prefix}refused: a pickle whose dict keys or set items are "
                                   f"tuples of more than {MAX_HASHED:,} elements in all, "
                                   "counted along every path (shared tuples hash once per "
                                   "path: 40 levels of pairs are 2^40)")
    except UnsafePickle:
        raise
    except Exception:   # noqa: BLE001 (malformed: left to the unpickler)
        pass
    finally:
        f.seek(start)


class _Stack:
    """The unpickler's stack and memo as the sizes of what they hold: a tuple's size counts
    its elements along every path (a tuple can hold one tuple twice, 40 levels of which take
    80 bytes), anything else is 1. Hashing a tuple (a dict key, a set item) walks every path,
    and CPython's unpickler hashes keys as it builds dicts: `hashed` adds up what they cost."""
    MARK = None

    def __init__(self):
        self.items: list = []
        self.memo: dict = {}
        self.hashed = 0

    def to_mark(self) -> list:
        k = len(self.items) - 1 - self.items[::-1].index(self.MARK)
        out, self.items = self.items[k + 1:], self.items[:k]
        return out

    def step(self, op, arg) -> None:
        name, items = op.name, self.items
        if name == "MARK":
            items.append(self.MARK)
        elif name == "DUP":
            items.append(items[-1])
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            self.memo[arg] = items[-1]
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = items[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            items.append(self.memo.get(arg, 1))
        elif name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1]) if name != "TUPLE" else None
            parts = self.to_mark() if n is None else [items.pop() for _ in range(n)]
            items.append(min(1 + sum(parts), MAX_HASHED + 1))
        elif name in ("SETITEM", "SETITEMS"):
            parts = self.to_mark() if name == "SETITEMS" else [items.pop(), items.pop()][::-1]
            self.hashed += sum(parts[0::2])
        elif name in ("ADDITEMS", "FROZENSET"):
            self.hashed += sum(self.to_mark())
            if name == "FROZENSET":
                items.append(1)
        else:                           # any other opcode: its documented stack effect
            for kind in reversed(op.stack_before):
                if kind is pickletools.markobject:
                    self.to_mark()
                elif kind is not pickletools.stackslice:
                    items.pop()
            items.extend(1 for _ in op.stack_after)


def pickle_error(e: Exception) -> str:
    """An exception of the pickle machinery in a few words (never the repr of what it holds)."""
    first = e.args[0] if e.args and isinstance(e.args[0], str) else ""
    return f"{type(e).__name__}: {short(first, 100)}" if first else type(e).__name__
