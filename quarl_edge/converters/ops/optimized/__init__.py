"""The lowerings of the optimized kernel variants, one package per variant as the kernels are in
firmware/core/kernels/optimized/<variant>/ (the package's name is the variant's, with "_" for
"-": cortex_m_dsp for cortex-m-dsp). On boards that build an optimized kernel variant (`[build]
kernels` other than "reference"; cgen.generate's `kernels`), these lowerings replace the
reference ones of ops/__init__.py's LOWERINGS, per variant: they map an op onto a kernel the
variant makes fast, or lay its weights out for it, and start from the reference lowering of the
op (its checks and parameter math). Boards with the reference kernels get exactly the C they
always got.

To give a variant a lowering: quarl_edge/converters/ops/optimized/<variant>/<op>.py, named after the
firmware file it serves, and one line in VARIANT_LOWERINGS below.
"""
from __future__ import annotations

from functools import partial

from ..conv import lower_conv
from .avr.fully_connected_s4 import lower_fully_connected_avr_any
from .cortex_m0.conv import lower_conv_rows
from .cortex_m0.fully_connected import lower_fully_connected_pairs
from .cortex_m0.quantize import lower_quantize_inv
from .cortex_m_dsp.conv import lower_conv_packed, lower_conv_pointwise_as_fc
from .cortex_m_dsp.fully_connected import lower_fully_connected_packed

VARIANT_LOWERINGS = {
    "cortex-m-dsp": {
        # int8, padded depth <= 128: the packed filter (conv.h), four channels per SMLAD pass;
        # deeper: 1x1, stride 1, no padding -> FULLY_CONNECTED
        "CONV_2D": lower_conv_packed,
        # int8, depth multiplier 1: the pre-widened filter on a widened, padded image (scratch)
        "DEPTHWISE_CONV_2D": lower_conv_packed,
        # int8 per tensor: packed weights, four rows per pass; fewer than four rows (a policy's
        # 2-3 action head) run faster on the two-row kernel than padded to four, unless the
        # packed kernel's 5-instruction output stage applies (dsp_mm_stage); int8 x int4 per
        # tensor: the int4 layout (fully_connected_s4.h), four rows' nibbles per 16-bit lane
        "FULLY_CONNECTED": partial(lower_fully_connected_packed, min_rows=4, min_rows_mm=1,
                                   int4_layout=True),
    },
    "cortex-m0": {
        # int8, depth <= 128: int32 weights, four channels per LDM, over a gathered window (conv.h)
        "CONV_2D": lower_conv_rows,
        # int8 per tensor: chunked row pairs, one MULS for two rows' products (fully_connected.h)
        "FULLY_CONNECTED": lower_fully_connected_pairs,
        # float -> int8: the scale's reciprocal from the generator, not a division per call
        "QUANTIZE": lower_quantize_inv,
    },
    # cores without SIMD multiply-accumulate (RISC-V rv32imc/imac): cortex-m0's layouts, run by
    # that variant's portable C (firmware/core/kernels/optimized/rv32/ includes its files)
    "rv32": {
        "CONV_2D": lower_conv_rows,
        "FULLY_CONNECTED": lower_fully_connected_pairs,
        "QUANTIZE": lower_quantize_inv,
    },
    "avr": {
        # int8 per tensor: the chunked stream of 16-bit-summable runs (fully_connected.h); int8 x
        # int4 per tensor: the int4 stream, two rows' nibbles per byte (fully_connected_s4.h)
        "FULLY_CONNECTED": lower_fully_connected_avr_any,
    },
}

# What replaces a variant's lowerings that lay weights out when the build asks for the reference
# layout (cgen.generate(pack_weights=False): the packed firmware would not fit the board's flash).
UNPACKED_LOWERINGS = {
    "cortex-m-dsp": {"CONV_2D": lower_conv_pointwise_as_fc, "DEPTHWISE_CONV_2D": lower_conv},
    # the rows filter is four times the int8 filter's flash, with its step tables
    "cortex-m0": {"CONV_2D": lower_conv},
    "rv32": {"CONV_2D": lower_conv},
}

__all__ = ["UNPACKED_LOWERINGS", "VARIANT_LOWERINGS"]
