"""The op table: TFLite op name -> its lowering (quarl_edge/converters/ops/<file>.py).

To add an op FOO (one kernel file + one lowering file + its golden test):

1. the kernel: firmware/core/kernels/foo.c and foo.h, bit-exact with TFLM's kernel;
2. the lowering: quarl_edge/converters/ops/foo.py with a docstring naming the TFLM kernel it matches and
   the op's limits, and
       SUPPORTED = ("FOO int8 and float32",)    # the supported list, "not supported" messages
       KERNEL_HEADERS = ()                      # included by every model.c: () for a new op
       OP_HEADERS = ("foo.h",)                  # passed as Kernel(..., headers=OP_HEADERS):
                                                # included only by models that use FOO, so
                                                # every other model.c keeps its exact bytes
       def lower_foo(op, model, pname) -> Kernel: ...
   which validates the op completely (ops/common.py: unsupported, per_tensor, ...) and returns
   the C to emit (ops/common.py: Kernel);
3. one line in LOWERINGS below (with its import);
4. a golden test against TF Lite Micro (tests/test_ops_golden.py, tests/test_cnn_ops_golden.py);
   the op's SUPPORTED is then in the supported list (supported_list below): paste that list
   into docs/pipeline.md, where tests/test_cgen.py compares it.

SUPPORTED and KERNEL_HEADERS here are collected from the lowering modules in table order.
"""
from __future__ import annotations

import sys

from .activations import lower_activation
from .arg_max import lower_arg_max
from .binary import lower_binary
from .common import Kernel
from .concatenation import lower_concatenation
from .conv import lower_conv
from .fully_connected import lower_fully_connected
from .hard_swish import lower_hard_swish
from .leaky_relu import lower_leaky_relu
from .lstm import lower_lstm
from .maximum_minimum import lower_maximum_minimum
from .mean import lower_mean
from .optimized import UNPACKED_LOWERINGS, VARIANT_LOWERINGS
from .pad import lower_pad
from .pooling import lower_pool
from .quantize import lower_quantize
from .reshape import lower_reshape
from .softmax import lower_softmax
from .strided_slice import lower_strided_slice
from .sub import lower_sub
from .svdf import lower_svdf
from .transpose import lower_transpose
from .transpose_conv import lower_transpose_conv

LOWERINGS = {
    "QUANTIZE": lower_quantize,
    "DEQUANTIZE": lower_quantize,
    "FULLY_CONNECTED": lower_fully_connected,
    "RELU": lower_activation,
    "RELU6": lower_activation,
    "TANH": lower_activation,
    "LOGISTIC": lower_activation,
    "RESHAPE": lower_reshape,
    "SQUEEZE": lower_reshape,
    "EXPAND_DIMS": lower_reshape,
    "SOFTMAX": lower_softmax,
    "CONV_2D": lower_conv,
    "DEPTHWISE_CONV_2D": lower_conv,
    "MAX_POOL_2D": lower_pool,
    "AVERAGE_POOL_2D": lower_pool,
    "ADD": lower_binary,
    "MUL": lower_binary,
    "CONCATENATION": lower_concatenation,
    "MEAN": lower_mean,
    "ARG_MAX": lower_arg_max,
    "SUB": lower_sub,
    "LEAKY_RELU": lower_leaky_relu,
    "HARD_SWISH": lower_hard_swish,
    "MAXIMUM": lower_maximum_minimum,
    "MINIMUM": lower_maximum_minimum,
    "PAD": lower_pad,
    "PADV2": lower_pad,
    "TRANSPOSE": lower_transpose,
    "TRANSPOSE_CONV": lower_transpose_conv,
    "STRIDED_SLICE": lower_strided_slice,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": lower_lstm,
    "SVDF": lower_svdf,
}

# VARIANT_LOWERINGS and UNPACKED_LOWERINGS, the optimized kernel variants' replacements for some
# of these lowerings, are in quarl_edge/converters/ops/optimized/.
_MODULES = list(dict.fromkeys(sys.modules[f.__module__] for f in LOWERINGS.values()))
SUPPORTED = tuple(s for m in _MODULES for s in m.SUPPORTED)
KERNEL_HEADERS = tuple(sorted({h for m in _MODULES for h in m.KERNEL_HEADERS}))


def supported_list() -> str:
    """The supported ops as a Markdown list, one item per entry of the lowering modules'
    SUPPORTED, in table order: the one list of what the generator runs (cgen's --help prints
    it, docs/pipeline.md carries a copy that tests/test_cgen.py checks); each op's limits are in
    its own module's docstring."""
    return "\n".join(f"- {s}" for s in SUPPORTED)

__all__ = ["KERNEL_HEADERS", "LOWERINGS", "SUPPORTED", "UNPACKED_LOWERINGS", "VARIANT_LOWERINGS",
           "Kernel", "supported_list"]
