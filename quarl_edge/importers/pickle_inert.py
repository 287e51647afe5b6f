"""`load_symbolic`: a pickle from a file we do not trust as inert data (safe_pickle.py's
docstring). A global becomes a `Symbol` (just its name), calling one records the call, and the
object state the pickle sets is kept as a dict; numpy arrays of plain numbers are rebuilt from
their bytes. The caller reads the fields it needs from that tree and trusts none of it: the
tree may share one object along 2^60 paths or nest without limit, so it is walked (here, and
by callers) only with each object visited once."""
from __future__ import annotations

import io
import pickle

import numpy as np

from ..core.errors import QuarlError
from .bounded import UnsafePickle, check_pickle, pickle_error, short, text


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
        return f"<{text(self.qualname, 100)}>"


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
        return f"<{text(self.type_name, 100)} object>"


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
            raise UnsafePickle(f"a numpy array of dtype {short(dtype)} (only plain numbers are read)")
        if not isinstance(raw, (bytes, bytearray)):
            raise UnsafePickle("a numpy array whose data is not raw bytes")
        flat = np.frombuffer(bytes(raw), dtype=dtype)
        self.array = flat.reshape(shape, order="F" if fortran else "C").copy()


class _DTypeRecipe:
    def __init__(self, code):
        if not isinstance(code, str):
            raise UnsafePickle(f"a numpy dtype {short(code)}")
        self.dtype = np.dtype(code)
        if self.dtype.kind not in _PLAIN_KINDS:
            raise UnsafePickle(f"a numpy array of dtype {short(code)} (only plain numbers are read)")

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


def _children(x) -> list | None:
    """What a container the unpickler built refers to (None for a leaf)."""
    if isinstance(x, Obj):
        return [*x.args, x.state, *x.items]
    if isinstance(x, dict):
        return [*x.keys(), *x.values()]
    if isinstance(x, (list, tuple)):
        return list(x)
    return None


def _unwrap(root):
    """The values our recipes stand for, through containers: each object the pickle built is
    visited once however often it is shared (a 200-byte pickle can build 2^60 paths through 60
    lists), without recursion (pickles nest without limit), cycles kept. Lists, dicts and Objs
    are changed in place; a tuple holding a recipe is rebuilt."""
    done: dict[int, object] = {}
    keep = [root]                     # the originals stay alive: their ids stay unique
    todo = [(root, False)]
    while todo:
        x, ready = todo.pop()
        if not ready:
            if id(x) in done:
                continue
            kids = _children(x)
            if kids is None:
                done[id(x)] = x.array if isinstance(x, _ArrayRecipe) else \
                    x.dtype if isinstance(x, _DTypeRecipe) else x
                continue
            done[id(x)] = x           # what a cycle back to x finds
            keep.extend(kids)
            todo.append((x, True))
            todo.extend((k, False) for k in kids if id(k) not in done)
            continue
        new = lambda v: done.get(id(v), v)  # noqa: E731
        if isinstance(x, Obj):
            x.args, x.state, x.items = tuple(map(new, x.args)), new(x.state), \
                list(map(new, x.items))
        elif isinstance(x, dict):
            pairs = [(new(k), new(v)) for k, v in x.items()]
            x.clear()
            x.update(pairs)
        elif isinstance(x, list):
            x[:] = map(new, x)
        elif any(new(v) is not v for v in x):
            done[id(x)] = tuple(map(new, x))
    return done[id(root)]


class _SymbolicUnpickler(pickle.Unpickler):
    def __init__(self, f, allowed: tuple[str, ...] | None = None):
        super().__init__(f)
        self.allowed = allowed

    def find_class(self, module, name):
        qualname = f"{module}.{name}"
        if self.allowed is not None and not qualname.startswith(self.allowed):
            raise UnsafePickle(f"refused: the pickle asks for {text(qualname, 100)}, "
                               "which is not "
                               "part of what it should hold (it could run code)")
        if (module, name) in _NUMPY:
            return _NUMPY[(module, name)]
        return _symbol_class(module, name)

    def persistent_load(self, pid):
        raise UnsafePickle(f"refused: persistent id {short(pid)}")


def load_symbolic(data: bytes, where: str, allowed: tuple[str, ...] | None = None):
    """A pickle as inert data (see the module docstring); nothing in it is imported or run.
    `allowed`: prefixes of the only globals the pickle may name (e.g. "gymnasium.spaces."),
    for callers that know what it should hold: any other is refused by name, so that a file
    whose pickle was replaced by one asking for os.system is rejected, not just left unrun."""
    try:
        check_pickle(io.BytesIO(data), "")
        return _unwrap(_SymbolicUnpickler(io.BytesIO(data), allowed).load())
    except UnsafePickle as e:
        raise UnsafePickle(f"{where}: {e}") from None
    except Exception as e:
        raise QuarlError(f"{where}: malformed pickle ({pickle_error(e)})") from None
