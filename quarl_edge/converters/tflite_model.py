"""Read a .tflite file into plain Python objects: tensors, operators, graph inputs and outputs.

Uses the flatbuffers schema shipped with the tflite-micro package. Anything that is not a
well-formed TFLite flatbuffer raises `quarl_edge.core.errors.ModelError` with a one-line reason; what
the generator can or cannot run is decided later (quarl_edge/converters/cgen.py), not here.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import ModelError

from .safe_text import safe_text

try:
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
except ImportError as exc:  # pragma: no cover - the package is a pinned dependency
    raise ImportError("quarl_edge.converters needs the tflite-micro package "
                      "(pip install -e . in a quarl-edge checkout)") from exc

FILE_IDENTIFIER = b"TFL3"

# What a model may hold: a file past these is refused, named, before anything is built. MAX_OPS
# bounds the build: gcc -O2 takes ~2 ms per generated op even with qe_model_invoke split in
# parts, and `validate --board host` of a 5,000-op chain took 47 s on a loaded 2-core machine
# (benchmarks/codegen_scaling.py --compile), while policies for microcontrollers have tens to
# hundreds of ops (docs/pipeline.md, "Limits").
MAX_OPS = 5_000              # ops in the graph
MAX_TENSORS = 20 * MAX_OPS   # tensors, buffers, operator codes, metadata entries, subgraphs
MAX_RANK = 16                # dimensions of a tensor
MAX_ELEMENTS = 1 << 31       # elements of a tensor (the C's offsets and sizes are 32-bit)
# Reading charges every vector element, string byte and object (OBJECT_COST) to a budget of
# BUDGET_PER_BYTE per byte of the file plus BUDGET_BASE; a well-formed file stays far below it.
OBJECT_COST = 16
BUDGET_PER_BYTE = 4
BUDGET_BASE = 1 << 20


def _enum_names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


BUILTIN_OPS = _enum_names(schema.BuiltinOperator)
TENSOR_TYPES = _enum_names(schema.TensorType)
ACTIVATIONS = _enum_names(schema.ActivationFunctionType)

# TensorType name -> (our dtype name, numpy dtype); types we can hold constant data of.
_NP_DTYPES = {
    "FLOAT32": ("float32", "<f4"), "FLOAT16": ("float16", "<f2"), "FLOAT64": ("float64", "<f8"),
    "INT8": ("int8", "i1"), "UINT8": ("uint8", "u1"), "INT16": ("int16", "<i2"),
    "UINT16": ("uint16", "<u2"), "INT32": ("int32", "<i4"), "UINT32": ("uint32", "<u4"),
    "INT64": ("int64", "<i8"), "UINT64": ("uint64", "<u8"), "BOOL": ("bool", "?"),
}


@dataclass
class Quantization:
    scale: np.ndarray           # float32, one per channel (length 1: per-tensor)
    zero_point: np.ndarray      # int64
    quantized_dimension: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str                          # "float32", "int8", ... ("int4", "string" ... as named)
    quantization: Quantization | None = None
    data: np.ndarray | None = None      # constant data, shaped; None for activations
    is_variable: bool = False           # state kept across invocations (an LSTM's cell and
                                        # hidden state): TFLite's Tensor.isVariable

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        if self.dtype in _BY_NAME:
            return np.dtype(_BY_NAME[self.dtype]).itemsize
        raise ModelError(f"tensor '{self.name}' has type {self.dtype}, which has no fixed size")

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def scale(self) -> float:
        """Per-tensor scale (0.0 when the tensor is not quantized)."""
        return float(self.quantization.scale[0]) if self.quantization is not None else 0.0

    @property
    def zero_point(self) -> int:
        return int(self.quantization.zero_point[0]) if self.quantization is not None else 0

    def describe(self) -> str:
        return f"{self.name} {list(self.shape)} {self.dtype}"


_BY_NAME = {ours: np_dt for ours, np_dt in _NP_DTYPES.values()}


@dataclass
class Operator:
    index: int
    opcode: str                         # builtin name ("FULLY_CONNECTED") or "CUSTOM:<name>"
    version: int
    inputs: list[int]                   # tensor indices, -1 for an omitted optional input
    outputs: list[int]
    options: dict = field(default_factory=dict)

    @property
    def fused_activation(self) -> str | None:
        code = self.options.get("fusedActivationFunction")
        return None if code is None else ACTIVATIONS.get(code, f"ACTIVATION_{code}")


@dataclass
class TFLiteModel:
    path: str
    sha256: bytes
    version: int
    description: str
    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]
    n_subgraphs: int = 1
    metadata: dict[str, bytes] = field(default_factory=dict)   # the model's named metadata buffers

    @property
    def hash8(self) -> bytes:
        return self.sha256[:8]

    def input_tensors(self) -> list[Tensor]:
        return [self.tensors[i] for i in self.inputs]

    def output_tensors(self) -> list[Tensor]:
        return [self.tensors[i] for i in self.outputs]


# ------------------------------------------------------------------------------------ load
def load(path) -> TFLiteModel:
    """Read and parse a .tflite file."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read model file {p}: {exc.strerror or exc}") from None
    return parse(data, str(p))


def parse(data: bytes, path: str = "<bytes>") -> TFLiteModel:
    """Parse a TFLite flatbuffer held in memory."""
    data = bytes(data)
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise ModelError(f"{path} is not a TFLite model (no 'TFL3' flatbuffer identifier)")
    try:
        return _Reader(data, path).model()
    except ModelError:
        raise
    except Exception as exc:  # flatbuffers raises whatever the garbage makes it raise
        raise ModelError(f"{path} is a malformed TFLite flatbuffer "
                         f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _name(x) -> str:
    """A string of the flatbuffer (a name, the description) as safe_text: every byte outside
    the characters names are made of written as %XX, so it can reach a C comment, model.json
    and a one-line error message as it is."""
    return safe_text(x if isinstance(x, (bytes, bytearray, str)) or x is None else str(x))


class _Reader:
    """The fields of a flatbuffer the generator uses, read through the schema's accessors (no
    other field is touched: unpacking the whole object tree would also walk whatever a hostile
    file hides in fields we never use). A flatbuffer's tables may share offsets, so a small
    file can name one large vector a million times: everything read is charged to a budget of
    a few times the file's size (`take`), and counts and sizes are checked before use."""

    def __init__(self, data: bytes, path: str):
        self.data, self.path = data, path
        self.budget = BUDGET_PER_BYTE * len(data) + BUDGET_BASE
        self.buffer_cache: dict[int, bytes | None] = {}
        self.options_cache: dict[tuple[int, int], dict] = {}

    def take(self, n: int, what: str) -> None:
        self.budget -= n
        if self.budget < 0:
            raise ModelError(f"{self.path} is a malformed TFLite flatbuffer: its tables refer to "
                             f"more data than the file holds (at {what})")

    def count(self, n: int, what: str, limit: int) -> int:
        if not 0 <= n <= limit:
            raise ModelError(f"{self.path}: the model has {n} {what}; at most {limit:,} are "
                             "supported")
        self.take(OBJECT_COST * n, what)
        return n

    def ints(self, obj, field: str) -> list[int]:
        """A vector of integers (empty when absent), charged to the budget."""
        n = getattr(obj, field + "Length")()
        if n == 0:
            return []
        self.take(n, field)
        return [int(v) for v in getattr(obj, field + "AsNumpy")()]

    def model(self) -> TFLiteModel:
        m = schema.Model.GetRootAs(self.data, 0)
        n_sub = m.SubgraphsLength()
        if n_sub == 0:
            raise ModelError(f"{self.path}: the model has no subgraph")
        self.count(n_sub, "subgraphs", MAX_TENSORS)
        sg = m.Subgraphs(0)
        # every count first: a model past a limit is refused before any of it is read
        n_ops = self.count(sg.OperatorsLength(), "ops", MAX_OPS)
        n_t = self.count(sg.TensorsLength(), "tensors", MAX_TENSORS)
        n_codes = self.count(m.OperatorCodesLength(), "operator codes", MAX_TENSORS)
        n_bufs = self.count(m.BuffersLength(), "buffers", MAX_TENSORS)
        n_meta = self.count(m.MetadataLength(), "metadata entries", MAX_TENSORS)
        opcodes = [self.opcode(m.OperatorCodes(j)) for j in range(n_codes)]
        tensors = [self.tensor(m, n_bufs, i, sg.Tensors(i)) for i in range(n_t)]
        operators = [self.operator(sg.Operators(i), i, opcodes, n_t) for i in range(n_ops)]
        metadata = {}
        for j in range(n_meta):
            e = m.Metadata(j)
            raw = self.buffer(m, n_bufs, int(e.Buffer()))
            metadata[_name(e.Name())] = raw if raw is not None else b""
        description = m.Description()
        self.take(len(description or b""), "the description")
        return TFLiteModel(
            path=self.path, sha256=hashlib.sha256(self.data).digest(), version=int(m.Version()),
            description=_name(description), tensors=tensors, operators=operators,
            inputs=self.indices(self.ints(sg, "Inputs"), "the graph input list", n_t, False),
            outputs=self.indices(self.ints(sg, "Outputs"), "the graph output list", n_t, False),
            n_subgraphs=n_sub, metadata=metadata)

    def indices(self, idx: list[int], what: str, n_tensors: int, optional: bool) -> list[int]:
        for k in idx:
            if not (0 <= k < n_tensors or (optional and k == -1)):
                raise ModelError(f"{self.path}: {what} refers to tensor {k}, "
                                 f"the graph has {n_tensors} tensors")
        return idx

    def opcode(self, oc) -> tuple[str, int]:
        code = max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))
        opname = BUILTIN_OPS.get(code, f"BUILTIN_{code}")
        if opname == "CUSTOM":
            custom = oc.CustomCode()
            self.take(len(custom or b""), "a custom op's name")
            opname = f"CUSTOM:{_name(custom)}"
        return opname, int(oc.Version() or 1)

    def operator(self, op, i: int, opcodes: list[tuple[str, int]], n_tensors: int) -> Operator:
        k = int(op.OpcodeIndex())
        if not 0 <= k < len(opcodes):
            raise ModelError(f"{self.path}: operator {i} uses opcode {k}, "
                             f"the model has {len(opcodes)}")
        opname, version = opcodes[k]
        options = {}
        table, kind = op.BuiltinOptions(), op.BuiltinOptionsType()
        if table is not None:
            key = (kind, table.Pos)          # ops may share one options table: unpacked once
            if key not in self.options_cache:
                built = schema.BuiltinOptionsCreator(kind, table)
                found = dict(vars(built)) if built is not None else {}
                self.take(OBJECT_COST + sum(len(v) for v in found.values() if hasattr(v, "__len__")),
                          f"operator {i}'s options")
                self.options_cache[key] = found
            options = dict(self.options_cache[key])
        what = f"operator {i} ({opname})"
        return Operator(i, opname, version,
                        self.indices(self.ints(op, "Inputs"), what, n_tensors, True),
                        self.indices(self.ints(op, "Outputs"), what, n_tensors, False), options)

    def buffer(self, m, n_bufs: int, index: int) -> bytes | None:
        """Buffer `index`'s bytes (None when it holds none), read once however many tensors
        share it."""
        if index in self.buffer_cache:
            return self.buffer_cache[index]
        if not 0 <= index < n_bufs:
            raise ModelError(f"{self.path}: tensor refers to buffer {index}, the model has {n_bufs}")
        buf, raw = m.Buffers(index), None
        n = buf.DataLength()
        if n > 0:
            self.take(n, f"buffer {index}")
            raw = buf.DataAsNumpy().tobytes()
            if len(raw) != n:
                raise ModelError(f"{self.path}: buffer {index} lies outside the file")
        else:
            offset, size = int(buf.Offset()), int(buf.Size())
            if offset > 1 and size > 0:   # buffers stored after the flatbuffer (models > 2 GB style)
                if offset + size > len(self.data):
                    raise ModelError(f"{self.path}: buffer {index} lies outside the file")
                self.take(size, f"buffer {index}")
                raw = self.data[offset:offset + size]
        self.buffer_cache[index] = raw
        return raw

    def tensor(self, m, n_bufs: int, i: int, t) -> Tensor:
        """Tensor i of the subgraph: its type, shape, quantization and, for a constant, its
        data (the buffer's size checked against the shape)."""
        raw_name = t.Name()
        self.take(len(raw_name or b""), f"tensor {i}'s name")
        name = _name(raw_name) or f"tensor_{i}"
        type_name = TENSOR_TYPES.get(t.Type(), f"TYPE_{t.Type()}")
        dtype, np_dtype = _NP_DTYPES.get(type_name, (type_name.lower(), None))
        if t.ShapeLength() > MAX_RANK:
            raise ModelError(f"{self.path}: tensor '{name}' has {t.ShapeLength()} dimensions; "
                             f"at most {MAX_RANK} are supported")
        shape = tuple(self.ints(t, "Shape"))
        if any(d < 0 for d in shape):
            raise ModelError(f"{self.path}: tensor '{name}' has a negative dimension {list(shape)}")
        n = 1
        for d in shape:
            n *= d
        if n >= MAX_ELEMENTS:
            raise ModelError(f"{self.path}: tensor '{name}' {list(shape)} has {n:,} elements; "
                             f"at most {MAX_ELEMENTS - 1:,} are supported")
        quant = self.quantization(t.Quantization(), name)
        raw = self.buffer(m, n_bufs, int(t.Buffer()))
        arr = None
        if raw is not None:
            if np_dtype is None:
                arr = np.frombuffer(raw, dtype=np.uint8)   # kept raw: the generator rejects it
            else:
                want = n * np.dtype(np_dtype).itemsize
                if len(raw) != want:
                    raise ModelError(f"{self.path}: tensor '{name}' {list(shape)} {dtype} needs "
                                     f"{want} bytes of data, its buffer holds {len(raw)}")
                arr = np.frombuffer(raw, dtype=np_dtype).reshape(shape)
        return Tensor(i, name, shape, dtype, quant, arr, bool(t.IsVariable()))

    def quantization(self, q, name: str) -> Quantization | None:
        if q is None or q.ScaleLength() == 0:
            return None
        self.take(q.ScaleLength(), f"tensor '{name}''s scales")
        scale = np.array(q.ScaleAsNumpy(), dtype=np.float32)
        zp = self.ints(q, "ZeroPoint") or [0] * len(scale)
        if len(zp) != len(scale):
            raise ModelError(f"{self.path}: tensor '{name}' has {len(scale)} scales "
                             f"but {len(zp)} zero points")
        return Quantization(scale, np.asarray(zp, dtype=np.int64), int(q.QuantizedDimension()))


