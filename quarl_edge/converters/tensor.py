"""The one description of a graph input or output: `TensorSpec` (dtype, shape, quantization).

The generator fills it in (quarl_edge/converters/spec.py's GeneratedModel, model.json through
dataclasses.asdict), the board reports it in its HELLO reply (quarl_edge/link/protocol.py packs
and parses it; the dtypes' wire codes are the protocol's), and the host reads tensors with it.
It imports nothing but the standard library, so the linux agent carries it to the board
(targets/launch.py's AGENT_FILES)."""
from __future__ import annotations

from dataclasses import dataclass

# dtype name -> (numpy dtype string, bytes per element): how its values lie in memory and on
# the wire (little-endian). The generator's graph inputs and outputs use the first four
# (quarl_edge/converters/spec.py, IO_DTYPES); a linux board may also report uint8.
DTYPE_LAYOUT = {"float32": ("<f4", 4), "int8": ("i1", 1), "int16": ("<i2", 2),
                "int32": ("<i4", 4), "uint8": ("u1", 1)}


@dataclass
class TensorSpec:
    """A graph input or output as the board reports it: type, shape and (int8/int16) quantization."""
    dtype: str
    shape: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0

    @property
    def np_dtype(self) -> str:
        return DTYPE_LAYOUT[self.dtype][0]

    @property
    def nbytes(self) -> int:
        n = DTYPE_LAYOUT[self.dtype][1]
        for d in self.shape:
            n *= d
        return n
