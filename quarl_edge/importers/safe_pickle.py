"""Reading pickles from files we do not trust, without running any code from them.

A pickle is a program: its GLOBAL opcodes name any importable callable and REDUCE calls it, so
`pickle.load` on a downloaded file can run anything. The two readers here replace the one place
where a pickle reaches code, `Unpickler.find_class`, and nothing from the file is ever imported
or called:

- `load_torch_archive`: the PyTorch archive `torch.save` writes (a zip of data.pkl and one raw
  file per tensor storage), as in Stable-Baselines3's policy.pth. Only plain containers and
  tensors are accepted (the globals in TORCH_GLOBALS, each rebuilt here by our own code into a
  numpy array); any other global is refused with its name. This is what torch.load does with
  `weights_only=True`, without needing torch.
  torch's older pickle-stream format (torch < 1.6, or `_use_new_zipfile_serialization=False`)
  is read the same way (`load_torch_legacy`).
- `load_symbolic`: any other pickle (SB3's vecnormalize.pkl) as inert data. A global becomes a
  `Symbol` (just its name), calling one records the call, and the object state the pickle sets
  is kept as a dict; numpy arrays of plain numbers are rebuilt from their bytes. The caller
  reads the fields it needs from that tree and trusts none of it.
"""
from __future__ import annotations

import io
import pickle
import pickletools
import zipfile

import numpy as np

from ..errors import QuarlError


class UnsafePickle(QuarlError):
    """A pickle that asks for something other than data."""


# CPython's unpickler grows its memo to the index a PUT opcode names, at 8 bytes an entry: a
# file naming index 2**31 has it allocate 16 GB (and the OOM killer end the process) before
# any check here could run. Real pickles number memo entries from 0 upwards, one per object.
MAX_MEMO_INDEX = 1 << 20


def _check_memo(f: io.BytesIO, where: str) -> None:
    """Refuse a pickle (the one at f's position) whose memo indices exceed MAX_MEMO_INDEX,
    read opcode by opcode without building anything; f is left where it was. A malformed
    pickle passes here: the unpickler then says what is wrong with it."""
    start = f.tell()
    try:
        for op, arg, _pos in pickletools.genops(f):
            if op.name in ("PUT", "BINPUT", "LONG_BINPUT") and int(arg) > MAX_MEMO_INDEX:
                raise UnsafePickle(f"{where + ': ' if where else ''}refused: a pickle memo "
                                   f"index of {int(arg):,} "
                                   "(it would make the reader allocate gigabytes)")
    except UnsafePickle:
        raise
    except Exception:
        pass
    finally:
        f.seek(start)


# torch's storage classes (the typed names torch.save still writes) -> numpy dtypes
STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                  "HalfStorage": np.float16, "LongStorage": np.int64, "IntStorage": np.int32,
                  "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
                  "BoolStorage": np.bool_}


class _StorageType:
    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(STORAGE_DTYPES[name])


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, hooks=None,
                       metadata=None):
    """torch._utils._rebuild_tensor_v2: a strided view of a storage, here copied to numpy."""
    if not isinstance(storage, np.ndarray):
        raise UnsafePickle("a tensor whose storage is not a saved storage")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset
    if offset < 0 or need > storage.size or any(s < 0 for s in stride):
        raise UnsafePickle(f"a tensor of size {size} reaches past its storage of "
                           f"{storage.size} elements")
    if int(np.prod(size, dtype=object)) > storage.size:   # stride 0: the copy could be huge
        raise UnsafePickle(f"a tensor of size {size} has more elements than its storage of "
                           f"{storage.size} (an expanded view) and is not read")
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=size,
                                           strides=[s * item for s in stride])
    return np.array(view)


def _rebuild_parameter(data, requires_grad=False, hooks=None):
    return data


def _ordered_dict(*args):
    import collections
    if args:
        raise UnsafePickle("an OrderedDict built from arguments")
    return collections.OrderedDict()


TORCH_GLOBALS = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _TorchUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, where: str):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix, self.where = archive, prefix, where

    def find_class(self, module, name):
        if (module, name) not in TORCH_GLOBALS:
            raise UnsafePickle(f"{self.where}: refused: the pickle asks for {module}.{name}, "
                               "not only tensors and plain containers (it could run code)")
        return TORCH_GLOBALS[(module, name)]

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise UnsafePickle(f"{self.where}: refused: unknown persistent id {pid!r:.80}")
        _, stype, key, _location, numel = pid
        try:
            raw = self.archive.read(f"{self.prefix}data/{key}")
        except KeyError:
            raise QuarlError(f"{self.where}: storage {key} is missing from the archive") from None
        if len(raw) < int(numel) * stype.dtype.itemsize:
            raise QuarlError(f"{self.where}: storage {key} is truncated ({len(raw)} bytes for "
                             f"{numel} {stype.dtype} elements)")
        return np.frombuffer(raw, dtype=stype.dtype.newbyteorder("<"), count=int(numel))


def load_torch_archive(data: bytes, where: str) -> dict[str, np.ndarray]:
    """A `torch.save`d state dict as {name: numpy array}: the zip archive torch >= 1.6 writes,
    or the older pickle stream (see load_torch_legacy), told apart by their first bytes."""
    if data[:1] == b"\x80":   # pickle's PROTO opcode; a zip starts with PK
        return load_torch_legacy(data, where)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        pkl = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
    except zipfile.BadZipFile as e:
        raise QuarlError(f"{where}: not a PyTorch archive ({e})") from None
    if len(pkl) != 1:
        raise QuarlError(f"{where}: not a PyTorch archive (no single data.pkl)")
    prefix = pkl[0][:-len("data.pkl")]
    order = archive.read(prefix + "byteorder").decode() if prefix + "byteorder" in \
        archive.namelist() else "little"
    if order != "little":
        raise QuarlError(f"{where}: a big-endian PyTorch archive is not supported")
    try:
        raw = archive.read(pkl[0])
        _check_memo(io.BytesIO(raw), where)
        state = _TorchUnpickler(raw, archive, prefix, where).load()
    except QuarlError:
        raise
    except Exception as e:   # a malformed pickle: any of pickle's own errors
        raise QuarlError(f"{where}: malformed pickle ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise QuarlError(f"{where}: not a state dict of tensors")
    return {str(k): v for k, v in state.items()}


# ---------------------------------------------------------- torch's legacy pickle stream
# torch < 1.6 (and torch.save(..., _use_new_zipfile_serialization=False)) writes five pickles
# one after the other, then the raw storages: the magic number, the protocol version, a dict of
# system info, the object (its persistent ids name the storages), the sorted list of storage
# keys; then for each key an int64 element count and the elements (little-endian here).
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
LEGACY_PROTOCOL = 1001


class _PlainUnpickler(pickle.Unpickler):
    """The header pickles and the key list hold plain values only: every global is refused."""

    def __init__(self, f, where: str):
        super().__init__(f)
        self.where = where

    def find_class(self, module, name):
        raise UnsafePickle(f"{self.where}: refused: the pickle asks for {module}.{name}, "
                           "not only tensors and plain containers (it could run code)")

    def persistent_load(self, pid):
        raise UnsafePickle(f"{self.where}: refused: unknown persistent id {pid!r:.80}")


class _LegacyTorchUnpickler(_TorchUnpickler):
    """The object pickle of the legacy format: persistent ids are
    ('storage', type, key, location, numel, view) and the storages come from `storages`
    (key -> numpy array; zeros of the right size on the first pass, before they are read)."""

    def __init__(self, f, storages: dict | None, limit: int, where: str):
        pickle.Unpickler.__init__(self, f)
        self.storages, self.limit, self.where = storages, limit, where
        self.wanted: dict[str, tuple[np.dtype, int]] = {}

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[4], int)):
            raise UnsafePickle(f"{self.where}: refused: unknown persistent id {pid!r:.80}")
        _, stype, key, _location, numel, view = pid
        key = str(key)
        if numel < 0 or numel * stype.dtype.itemsize > self.limit:
            raise QuarlError(f"{self.where}: storage {key} of {numel} elements is larger than "
                             "the file")
        self.wanted[key] = (stype.dtype, numel)
        storage = self.storages[key] if self.storages is not None else \
            np.zeros(numel, stype.dtype)
        if view is None:
            return storage
        if not (isinstance(view, tuple) and len(view) == 3):
            raise UnsafePickle(f"{self.where}: refused: storage view {view!r:.80}")
        _view_key, offset, size = (int(v) if i else v for i, v in enumerate(view))
        if offset < 0 or size < 0 or offset + size > numel:
            raise QuarlError(f"{self.where}: a storage view past the end of storage {key}")
        return storage[offset:offset + size]


def _legacy_storages(f: io.BytesIO, keys, wanted: dict, where: str) -> dict[str, np.ndarray]:
    """The raw storages after the key list, each an int64 element count then the elements."""
    out = {}
    for key in keys:
        key = str(key)
        if key not in wanted:
            raise QuarlError(f"{where}: storage {key} is not used by the pickled object")
        dtype, numel = wanted[key]
        head = f.read(8)
        if len(head) < 8 or int.from_bytes(head, "little", signed=True) != numel:
            raise QuarlError(f"{where}: storage {key} is truncated or has the wrong size")
        raw = f.read(numel * dtype.itemsize)
        if len(raw) < numel * dtype.itemsize:
            raise QuarlError(f"{where}: storage {key} is truncated ({len(raw)} bytes for "
                             f"{numel} {dtype} elements)")
        out[key] = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).copy()
    missing = sorted(set(wanted) - set(out))
    if missing:
        raise QuarlError(f"{where}: storages {', '.join(missing[:5])} are missing")
    return out


def load_torch_legacy(data: bytes, where: str) -> dict[str, np.ndarray]:
    """A state dict in torch's legacy pickle-stream format (see above) as {name: array}.

    The object pickle comes before the storages it refers to, so it is read twice: once to
    learn which storages it names (and where it ends), then, with the storages read, for the
    tensors. Both passes accept only TORCH_GLOBALS; nothing from the file is imported."""
    f = io.BytesIO(data)

    def next_pickle(unpickler):
        _check_memo(f, where)
        return unpickler.load()

    try:
        if next_pickle(_PlainUnpickler(f, where)) != LEGACY_MAGIC:
            raise QuarlError(f"{where}: not a PyTorch file (neither a zip archive nor the "
                             "legacy format's magic number)")
        if next_pickle(_PlainUnpickler(f, where)) != LEGACY_PROTOCOL:
            raise QuarlError(f"{where}: an unknown legacy PyTorch protocol version")
        info = next_pickle(_PlainUnpickler(f, where))
        if not isinstance(info, dict) or not info.get("little_endian", False):
            raise QuarlError(f"{where}: a big-endian legacy PyTorch file is not supported")
        start = f.tell()
        scan = _LegacyTorchUnpickler(f, None, len(data), where)
        next_pickle(scan)
        keys = next_pickle(_PlainUnpickler(f, where))
        if not isinstance(keys, list):
            raise QuarlError(f"{where}: the legacy storage key list is not a list")
        storages = _legacy_storages(f, keys, scan.wanted, where)
        state = _LegacyTorchUnpickler(io.BytesIO(data[start:]), storages, len(data),
                                      where).load()
    except QuarlError:
        raise
    except Exception as e:   # a malformed pickle: any of pickle's own errors
        raise QuarlError(f"{where}: not a PyTorch file or a malformed legacy one "
                         f"({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise QuarlError(f"{where}: not a state dict of tensors")
    return {str(k): v for k, v in state.items()}


# ------------------------------------------------------------------------- inert pickles
class Symbol:
    """A global named by a pickle; never imported. Calling it records the call."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    def __call__(self, *args):
        return Obj(self, args)

    def __repr__(self):
        return f"<{self.qualname}>"


class Obj:
    """An object a pickle built: who built it, with what, and the state it was given."""

    def __init__(self, symbol: Symbol, args=()):
        self.symbol, self.args, self.state, self.items = symbol, tuple(args), None, []

    def __setstate__(self, state):
        self.state = state

    # pickle's APPEND(S)/SETITEM(S) on objects that are not lists or dicts
    def append(self, x):
        self.items.append(x)

    def extend(self, xs):
        self.items.extend(xs)

    def __setitem__(self, k, v):
        self.items.append((k, v))

    @property
    def type_name(self) -> str:
        """The class this stands for (through copyreg's reconstructor when the pickle used it)."""
        if self.symbol.qualname == "copyreg._reconstructor" and self.args and \
                isinstance(self.args[0], Symbol):
            return self.args[0].qualname
        return self.symbol.qualname

    def attrs(self) -> dict:
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:   # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        return state if isinstance(state, dict) else {}

    def __repr__(self):
        return f"<{self.type_name} object>"


class _NewObjMeta(type):
    """NEWOBJ needs a real class; each global becomes one of these, with no behaviour."""


def _symbol_class(module: str, name: str):
    sym = Symbol(module, name)

    def new(cls, *args, **kwargs):
        return Obj(sym, args)

    return _NewObjMeta(f"Symbol<{module}.{name}>", (), {"__new__": new, "symbol": sym})


_PLAIN_KINDS = "biuf"   # bool, int, uint, float: numpy dtypes rebuilt from bytes


class _ArrayRecipe:
    """numpy.core.multiarray._reconstruct(ndarray, shape, typecode), then BUILD with its state."""

    def __init__(self):
        self.array = None

    def __setstate__(self, state):
        _version, shape, dtype, fortran, raw = state
        dtype = dtype.dtype if isinstance(dtype, _DTypeRecipe) else dtype
        if not isinstance(dtype, np.dtype) or dtype.kind not in _PLAIN_KINDS:
            raise UnsafePickle(f"a numpy array of dtype {dtype!r} (only plain numbers are read)")
        if not isinstance(raw, (bytes, bytearray)):
            raise UnsafePickle("a numpy array whose data is not raw bytes")
        flat = np.frombuffer(bytes(raw), dtype=dtype)
        self.array = flat.reshape(shape, order="F" if fortran else "C").copy()


class _DTypeRecipe:
    def __init__(self, code):
        if not isinstance(code, str):
            raise UnsafePickle(f"a numpy dtype {code!r}")
        self.dtype = np.dtype(code)
        if self.dtype.kind not in _PLAIN_KINDS:
            raise UnsafePickle(f"a numpy array of dtype {code!r} (only plain numbers are read)")

    def __setstate__(self, state):
        order = state[1] if isinstance(state, tuple) and len(state) > 1 else "|"
        if order in ("<", ">"):
            self.dtype = self.dtype.newbyteorder(order)


def _np_reconstruct(cls, shape, typecode):
    return _ArrayRecipe()


def _np_dtype(code, align=False, copy=True):
    return _DTypeRecipe(code)


def _np_scalar(dtype, raw=None):
    dtype = _unwrap(dtype)
    if not isinstance(dtype, np.dtype) or dtype.kind not in _PLAIN_KINDS or \
            not isinstance(raw, bytes):
        raise UnsafePickle("a numpy scalar that is not a plain number")
    return np.frombuffer(raw, dtype=dtype)[0].item()


_NUMPY = {}
for _core in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _NUMPY[(_core, "_reconstruct")] = _np_reconstruct
    _NUMPY[(_core, "scalar")] = _np_scalar
_NUMPY[("numpy", "dtype")] = _np_dtype
_NUMPY[("numpy", "ndarray")] = np.ndarray   # only ever passed to _np_reconstruct


def _unwrap(x):
    """The values our recipes stand for, through containers."""
    if isinstance(x, _ArrayRecipe):
        return x.array
    if isinstance(x, _DTypeRecipe):
        return x.dtype
    if isinstance(x, Obj):
        x.args = tuple(_unwrap(a) for a in x.args)
        x.state = _unwrap(x.state)
        x.items = [_unwrap(i) for i in x.items]
        return x
    if isinstance(x, dict):
        return {_unwrap(k): _unwrap(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    return x


class _SymbolicUnpickler(pickle.Unpickler):
    def __init__(self, f, allowed: tuple[str, ...] | None = None):
        super().__init__(f)
        self.allowed = allowed

    def find_class(self, module, name):
        qualname = f"{module}.{name}"
        if self.allowed is not None and not qualname.startswith(self.allowed):
            raise UnsafePickle(f"refused: the pickle asks for {qualname}, which is not "
                               "part of what it should hold (it could run code)")
        if (module, name) in _NUMPY:
            return _NUMPY[(module, name)]
        return _symbol_class(module, name)

    def persistent_load(self, pid):
        raise UnsafePickle(f"refused: persistent id {pid!r:.80}")


def load_symbolic(data: bytes, where: str, allowed: tuple[str, ...] | None = None):
    """A pickle as inert data (see the module docstring); nothing in it is imported or run.
    `allowed`: prefixes of the only globals the pickle may name (e.g. "gymnasium.spaces."),
    for callers that know what it should hold: any other is refused by name, so that a file
    whose pickle was replaced by one asking for os.system is rejected, not just left unrun."""
    try:
        _check_memo(io.BytesIO(data), "")
        return _unwrap(_SymbolicUnpickler(io.BytesIO(data), allowed).load())
    except UnsafePickle as e:
        raise UnsafePickle(f"{where}: {e}") from None
    except Exception as e:
        raise QuarlError(f"{where}: malformed pickle ({type(e).__name__}: {e})") from None
