"""What the generator returns: `GeneratedModel` and the graph's input/output specs (`IOTensor`).

The converters do not import quarl_edge.link.protocol: `IOTensor` has the fields of the protocol's
TensorSpec, in the same order (model.json serialises it with dataclasses.asdict).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .tflite_model import Operator

QE_MAX_DIMS = 6     # dimensions of a graph input/output (qe_tensor_spec_t, firmware/core/qe_model.h)

# dtype of a graph input/output -> (numpy dtype string, bytes per element), as on the wire
_IO_TYPES = {"float32": ("<f4", 4), "int8": ("i1", 1), "int16": ("<i2", 2), "int32": ("<i4", 4)}
IO_DTYPES = tuple(_IO_TYPES)


@dataclass
class IOTensor:
    """A graph input or output as the board reports it: type, shape and (int8/int16) quantization."""
    dtype: str
    shape: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0

    @property
    def np_dtype(self) -> str:
        return _IO_TYPES[self.dtype][0]

    @property
    def nbytes(self) -> int:
        n = _IO_TYPES[self.dtype][1]
        for d in self.shape:
            n *= d
        return n


@dataclass
class GeneratedModel:
    name: str
    hash: bytes                         # first 8 bytes of the .tflite's SHA-256
    inputs: list[IOTensor]
    outputs: list[IOTensor]
    arena_bytes: int
    ops: list[str]
    weight_bytes: int                   # const data emitted (weights, biases)
    layout_extra_bytes: int = 0         # of weight_bytes, what the variant's layouts add
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    input_offsets: list[int] = field(default_factory=list)
    output_offsets: list[int] = field(default_factory=list)
    c_path: Path | None = None
    json_path: Path | None = None

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)


@dataclass
class Kernel:
    """One op's lowering: what model.c gets for it."""
    op: Operator
    call: str               # C statement, with @T<index>@ placeholders for arena pointers
    params: str             # C definition of the const params struct
    consts: list[str]       # C definitions of const arrays
    const_bytes: int
    comment: str
    alias: bool = False     # RESHAPE-like: no code, the output is the input's bytes
    inplace: bool = False   # element-wise: the output may take over the input's buffer
    headers: tuple = ()     # kernel headers this op needs beyond ops.KERNEL_HEADERS (included
                            # only by the model.c of a model that uses the op)
    scratch_bytes: int = 0  # arena bytes the kernel needs during this op only (the call's
                            # @S<op index>@ placeholder is their address)
    layout_extra_bytes: int = 0  # flash its weights take beyond the reference layout (a kernel
                                 # variant's packed weights; 0 on reference boards)
