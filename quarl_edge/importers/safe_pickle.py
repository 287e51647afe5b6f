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
- `load_symbolic`: any other pickle (SB3's vecnormalize.pkl) as inert data. A global becomes a
  `Symbol` (just its name), calling one records the call, and the object state the pickle sets
  is kept as a dict; numpy arrays of plain numbers are rebuilt from their bytes. The caller
  reads the fields it needs from that tree and trusts none of it.
"""
from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np

from ..errors import QuarlError


class UnsafePickle(QuarlError):
    """A pickle that asks for something other than data."""


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
    """A `torch.save`d state dict (the bytes of its zip archive) as {name: numpy array}."""
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
        state = _TorchUnpickler(archive.read(pkl[0]), archive, prefix, where).load()
    except QuarlError:
        raise
    except Exception as e:   # a malformed pickle: any of pickle's own errors
        raise QuarlError(f"{where}: malformed pickle ({type(e).__name__}: {e})") from None
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
    def find_class(self, module, name):
        if (module, name) in _NUMPY:
            return _NUMPY[(module, name)]
        return _symbol_class(module, name)

    def persistent_load(self, pid):
        raise UnsafePickle(f"refused: persistent id {pid!r:.80}")


def load_symbolic(data: bytes, where: str):
    """A pickle as inert data (see the module docstring); nothing in it is imported or run."""
    try:
        return _unwrap(_SymbolicUnpickler(io.BytesIO(data)).load())
    except UnsafePickle as e:
        raise UnsafePickle(f"{where}: {e}") from None
    except Exception as e:
        raise QuarlError(f"{where}: malformed pickle ({type(e).__name__}: {e})") from None
