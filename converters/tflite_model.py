"""Read a .tflite file into plain Python objects: tensors, operators, graph inputs and outputs.

Uses the flatbuffers schema shipped with the tflite-micro package. Anything that is not a
well-formed TFLite flatbuffer raises `quarl_edge.errors.ModelError` with a one-line reason; what
the generator can or cannot run is decided later (converters/cgen.py), not here.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from quarl_edge.errors import ModelError

from .safe_text import safe_text

try:
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
except ImportError as exc:  # pragma: no cover - the package is a pinned dependency
    raise ImportError("quarl_edge.converters needs the tflite-micro package "
                      "(pip install -e . in a quarl-edge checkout)") from exc

FILE_IDENTIFIER = b"TFL3"


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
        model = schema.ModelT.InitFromPackedBuf(data, 0)
    except Exception as exc:  # flatbuffers raises whatever the garbage makes it raise
        raise ModelError(f"{path} is a malformed TFLite flatbuffer ({type(exc).__name__}: {exc})") from None
    try:
        return _convert(model, data, path)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"{path} is a malformed TFLite model ({type(exc).__name__}: {exc})") from None


def _name(x) -> str:
    """A string of the flatbuffer (a name, the description) as safe_text: every byte outside
    the characters names are made of written as %XX, so it can reach a C comment, model.json
    and a one-line error message as it is."""
    return safe_text(x if isinstance(x, (bytes, bytearray, str)) or x is None else str(x))


def _ints(x) -> list[int]:
    return [] if x is None else [int(v) for v in x]


def _buffer_bytes(model, data: bytes, index: int, path: str) -> bytes | None:
    buffers = model.buffers or []
    if not 0 <= index < len(buffers):
        raise ModelError(f"{path}: tensor refers to buffer {index}, the model has {len(buffers)}")
    buf = buffers[index]
    if buf is None:
        return None
    if buf.data is not None and len(buf.data) > 0:
        return bytes(np.asarray(buf.data, dtype=np.uint8))
    offset, size = int(getattr(buf, "offset", 0) or 0), int(getattr(buf, "size", 0) or 0)
    if offset > 1 and size > 0:   # buffers stored after the flatbuffer (models > 2 GB style)
        if offset + size > len(data):
            raise ModelError(f"{path}: buffer {index} lies outside the file")
        return data[offset:offset + size]
    return None


def _convert(model, data: bytes, path: str) -> TFLiteModel:
    """The flatbuffer's first subgraph as a TFLiteModel: its tensors (with their constant data),
    its operators, every tensor index checked."""
    subgraphs = model.subgraphs or []
    if not subgraphs:
        raise ModelError(f"{path}: the model has no subgraph")
    sg = subgraphs[0]
    opcodes = model.operatorCodes or []
    tensors = [_tensor(model, data, path, i, t) for i, t in enumerate(sg.tensors or [])]

    def check_indices(idx: list[int], what: str, optional: bool) -> list[int]:
        for k in idx:
            if not (0 <= k < len(tensors) or (optional and k == -1)):
                raise ModelError(f"{path}: {what} refers to tensor {k}, "
                                 f"the graph has {len(tensors)} tensors")
        return idx

    operators: list[Operator] = []
    for i, op in enumerate(sg.operators or []):
        opname, version, options = _opcode(op, opcodes, path, i)
        operators.append(Operator(i, opname, version,
                                  check_indices(_ints(op.inputs), f"operator {i} ({opname})", True),
                                  check_indices(_ints(op.outputs), f"operator {i} ({opname})", False),
                                  options))

    metadata = {}
    for m in model.metadata or []:
        raw = _buffer_bytes(model, data, int(m.buffer), path)
        metadata[_name(m.name)] = raw if raw is not None else b""

    return TFLiteModel(
        path=path,
        sha256=hashlib.sha256(data).digest(),
        version=int(model.version or 0),
        description=_name(model.description),
        tensors=tensors,
        operators=operators,
        inputs=check_indices(_ints(sg.inputs), "the graph input list", False),
        outputs=check_indices(_ints(sg.outputs), "the graph output list", False),
        n_subgraphs=len(subgraphs),
        metadata=metadata,
    )


def _tensor(model, data: bytes, path: str, i: int, t) -> Tensor:
    """Tensor i of the subgraph: its type, shape, quantization and, for a constant, its data
    (the buffer's size checked against the shape)."""
    type_name = TENSOR_TYPES.get(t.type, f"TYPE_{t.type}")
    dtype, np_dtype = _NP_DTYPES.get(type_name, (type_name.lower(), None))
    shape = tuple(_ints(t.shape))
    name = _name(t.name) or f"tensor_{i}"
    if any(d < 0 for d in shape):
        raise ModelError(f"{path}: tensor '{name}' has a negative dimension {list(shape)}")
    quant = None
    q = t.quantization
    if q is not None and q.scale is not None and len(q.scale) > 0:
        zp = _ints(q.zeroPoint) or [0] * len(q.scale)
        if len(zp) != len(q.scale):
            raise ModelError(f"{path}: tensor '{name}' has {len(q.scale)} scales "
                             f"but {len(zp)} zero points")
        quant = Quantization(np.asarray(q.scale, dtype=np.float32),
                             np.asarray(zp, dtype=np.int64), int(q.quantizedDimension or 0))
    raw = _buffer_bytes(model, data, int(t.buffer), path)
    arr = None
    if raw is not None:
        if np_dtype is None:
            arr = np.frombuffer(raw, dtype=np.uint8)   # kept raw: the generator rejects it
        else:
            n = 1
            for d in shape:
                n *= d
            want = n * np.dtype(np_dtype).itemsize
            if len(raw) != want:
                raise ModelError(f"{path}: tensor '{name}' {list(shape)} {dtype} needs {want} "
                                 f"bytes of data, its buffer holds {len(raw)}")
            arr = np.frombuffer(raw, dtype=np_dtype).reshape(shape)
    return Tensor(i, name, shape, dtype, quant, arr, bool(t.isVariable))


def _opcode(op, opcodes: list, path: str, i: int) -> tuple[str, int, dict]:
    """Operator i's (op name, version, builtin options): CUSTOM ops as CUSTOM:<code>."""
    if not 0 <= op.opcodeIndex < len(opcodes):
        raise ModelError(f"{path}: operator {i} uses opcode {op.opcodeIndex}, "
                         f"the model has {len(opcodes)}")
    oc = opcodes[op.opcodeIndex]
    code = max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode))
    opname = BUILTIN_OPS.get(code, f"BUILTIN_{code}")
    if opname == "CUSTOM":
        opname = f"CUSTOM:{_name(oc.customCode)}"
    options = {}
    if op.builtinOptions is not None:
        options = {k: v for k, v in vars(op.builtinOptions).items()}
    return opname, int(oc.version or 1), options
