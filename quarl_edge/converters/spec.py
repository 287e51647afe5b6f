"""What the generator returns: `GeneratedModel`, with the graph's input/output specs
(`TensorSpec`, quarl_edge/converters/tensor.py: the one the board reports in its HELLO too), and `Kernel`,
one op's lowering.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .tensor import TensorSpec
from .tflite_model import Operator

QE_MAX_DIMS = 6     # dimensions of a graph input/output (qe_tensor_spec_t, firmware/core/qe_model.h)

# the dtypes a graph input/output may have (their layout: quarl_edge/converters/tensor.py)
IO_DTYPES = ("float32", "int8", "int16", "int32")


@dataclass
class GeneratedModel:
    name: str
    hash: bytes                         # first 8 bytes of the .tflite's SHA-256
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
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
