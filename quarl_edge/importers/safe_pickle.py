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
- `load_symbolic` (pickle_inert.py): any other pickle (SB3's vecnormalize.pkl) as inert data.
  A global becomes a `Symbol` (just its name), calling one records the call, and the object
  state the pickle sets is kept as a dict; numpy arrays of plain numbers are rebuilt from their
  bytes. The caller reads the fields it needs from that tree and trusts none of it.

Every pickle is first scanned opcode by opcode (bounded.check_pickle: its memo indices and its
number of opcodes), every zip member is read with a size limit before it inflates, and the
tensors one file may hold are within MAX_WEIGHTS_BYTES in all (bounded.py). Nothing untrusted
is ever printed whole (bounded.short).
"""
from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np

from ..core.errors import QuarlError
from .bounded import (MAX_WEIGHTS_BYTES, UnsafePickle, check_members, check_pickle, pickle_error,
                      read_member, short, text)
from .pickle_inert import Obj, Symbol, load_symbolic  # noqa: F401  (re-exported: the readers)

# torch's storage classes (the typed names torch.save still writes) -> numpy dtypes
STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                  "HalfStorage": np.float16, "LongStorage": np.int64, "IntStorage": np.int32,
                  "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
                  "BoolStorage": np.bool_}


class _StorageType:
    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(STORAGE_DTYPES[name])


class _Budget:
    """The bytes of tensor data one file may make the reader hold, in all (MAX_WEIGHTS_BYTES):
    storages read and tensors copied out of them (many tensors may view one storage)."""

    def __init__(self, where: str, limit: int = MAX_WEIGHTS_BYTES):
        self.where, self.left = where, limit

    def take(self, nbytes: int, what: str) -> None:
        if nbytes > self.left:
            raise QuarlError(f"{self.where}: refused: {what} takes the tensors past the limit "
                             f"of {MAX_WEIGHTS_BYTES:,} bytes")
        self.left -= nbytes


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, hooks=None,
                       metadata=None, budget: _Budget | None = None):
    """torch._utils._rebuild_tensor_v2: a strided view of a storage, here copied to numpy."""
    if not isinstance(storage, np.ndarray):
        raise UnsafePickle("a tensor whose storage is not a saved storage")
    if not (isinstance(size, (tuple, list)) and isinstance(stride, (tuple, list)) and
            isinstance(offset, int) and len(size) == len(stride) <= 8 and
            all(isinstance(s, int) for s in (*size, *stride))):
        raise UnsafePickle("a tensor whose offset, size or stride are not integers")
    size, stride = tuple(size), tuple(stride)
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset
    if offset < 0 or need > storage.size or any(s < 0 for s in stride):
        raise UnsafePickle(f"a tensor of size {size} reaches past its storage of "
                           f"{storage.size} elements")
    if int(np.prod(size, dtype=object)) > storage.size:   # stride 0: the copy could be huge
        raise UnsafePickle(f"a tensor of size {size} has more elements than its storage of "
                           f"{storage.size} (an expanded view) and is not read")
    item = storage.itemsize
    if budget is not None:
        budget.take(int(np.prod(size, dtype=object)) * item, f"a tensor of size {size}")
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
        self.budget, self.read = _Budget(where), {}

    def find_class(self, module, name):
        if (module, name) not in TORCH_GLOBALS:
            raise UnsafePickle(f"{self.where}: refused: the pickle asks for "
                               f"{text(module, 60)}.{text(name, 60)}, "
                               "not only tensors and plain containers (it could run code)")
        found = TORCH_GLOBALS[(module, name)]
        if found is _rebuild_tensor_v2:
            return lambda *args: _rebuild_tensor_v2(*args, budget=self.budget)
        return found

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise UnsafePickle(f"{self.where}: refused: unknown persistent id {short(pid)}")
        _, stype, key, _location, numel = pid
        if not (isinstance(key, str) and len(key) <= 100 and isinstance(numel, int)):
            raise UnsafePickle(f"{self.where}: refused: a storage key {short(key)} of "
                               f"{short(numel)} elements")
        if (key, numel, stype.name) in self.read:   # many references, one read
            return self.read[(key, numel, stype.name)]
        try:
            raw = read_member(self.archive, f"{self.prefix}data/{key}", self.budget.left,
                              self.where)
        except KeyError:
            raise QuarlError(f"{self.where}: storage {short(key)} is missing from the "
                             "archive") from None
        self.budget.take(len(raw), f"storage {short(key)}")
        if numel < 0 or len(raw) < numel * stype.dtype.itemsize:
            raise QuarlError(f"{self.where}: storage {key} is truncated ({len(raw)} bytes for "
                             f"{numel} {stype.dtype} elements)")
        array = np.frombuffer(raw, dtype=stype.dtype.newbyteorder("<"), count=numel)
        self.read[(key, numel, stype.name)] = array
        return array


def load_torch_archive(data: bytes, where: str) -> dict[str, np.ndarray]:
    """A `torch.save`d state dict as {name: numpy array}: the zip archive torch >= 1.6 writes,
    or the older pickle stream (see load_torch_legacy), told apart by their first bytes."""
    if data[:1] == b"\x80":   # pickle's PROTO opcode; a zip starts with PK
        return load_torch_legacy(data, where)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        check_members(archive, 1 << 62, where)     # only their number: sizes as they are read
        pkl = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
    except zipfile.BadZipFile as e:
        raise QuarlError(f"{where}: not a PyTorch archive ({short(str(e), 100)})") from None
    if len(pkl) != 1:
        raise QuarlError(f"{where}: not a PyTorch archive (no single data.pkl)")
    prefix = pkl[0][:-len("data.pkl")]
    order = read_member(archive, prefix + "byteorder", 16, where) if prefix + "byteorder" in \
        archive.namelist() else b"little"
    if order != b"little":
        raise QuarlError(f"{where}: a big-endian PyTorch archive is not supported")
    try:
        raw = read_member(archive, pkl[0], MAX_WEIGHTS_BYTES, where)
        check_pickle(io.BytesIO(raw), where)
        state = _TorchUnpickler(raw, archive, prefix, where).load()
    except QuarlError:
        raise
    except Exception as e:   # a malformed pickle: any of pickle's own errors
        raise QuarlError(f"{where}: malformed pickle ({pickle_error(e)})") from None
    return _state_dict(state, where)


def _state_dict(state, where: str) -> dict[str, np.ndarray]:
    """The unpickled object as {name: array}, if it is a state dict of tensors."""
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, np.ndarray)
                                              for k, v in state.items()):
        raise QuarlError(f"{where}: not a state dict of tensors (names to tensors)")
    return dict(state)


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
        raise UnsafePickle(f"{self.where}: refused: the pickle asks for "
                           f"{text(module, 60)}.{text(name, 60)}, "
                           "not only tensors and plain containers (it could run code)")

    def persistent_load(self, pid):
        raise UnsafePickle(f"{self.where}: refused: unknown persistent id {short(pid)}")


class _LegacyTorchUnpickler(_TorchUnpickler):
    """The object pickle of the legacy format: persistent ids are
    ('storage', type, key, location, numel, view) and the storages come from `storages`
    (key -> numpy array; zeros of the right size on the first pass, before they are read)."""

    def __init__(self, f, storages: dict | None, limit: int, where: str):
        pickle.Unpickler.__init__(self, f)
        self.storages, self.limit, self.where = storages, limit, where
        self.wanted: dict[str, tuple[np.dtype, int]] = {}
        self.budget = _Budget(where)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[4], int)):
            raise UnsafePickle(f"{self.where}: refused: unknown persistent id {short(pid)}")
        _, stype, key, _location, numel, view = pid
        if not (isinstance(key, str) and len(key) <= 100):
            raise UnsafePickle(f"{self.where}: refused: a storage key {short(key)}")
        if numel < 0 or numel * stype.dtype.itemsize > self.limit:
            raise QuarlError(f"{self.where}: storage {key} of {numel} elements is larger than "
                             "the file")
        if self.storages is None and key not in self.wanted:   # together within the file too
            self.limit -= numel * stype.dtype.itemsize
        self.wanted[key] = (stype.dtype, numel)
        storage = self.storages[key] if self.storages is not None else \
            np.zeros(numel, stype.dtype)
        if view is None:
            return storage
        if not (isinstance(view, tuple) and len(view) == 3):
            raise UnsafePickle(f"{self.where}: refused: storage view {short(view)}")
        _view_key, offset, size = (int(v) if i else v for i, v in enumerate(view))
        if offset < 0 or size < 0 or offset + size > numel:
            raise QuarlError(f"{self.where}: a storage view past the end of storage {key}")
        return storage[offset:offset + size]


def _legacy_storages(f: io.BytesIO, keys, wanted: dict, where: str) -> dict[str, np.ndarray]:
    """The raw storages after the key list, each an int64 element count then the elements."""
    out = {}
    for key in keys:
        if not isinstance(key, str):
            raise UnsafePickle(f"{where}: refused: a storage key {short(key)}")
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
        check_pickle(f, where)
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
                         f"({pickle_error(e)})") from None
    return _state_dict(state, where)
