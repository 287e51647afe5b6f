"""Sub-byte weights: the int8x4 scheme (int8 activations, int4 weights), made by
litert-quantizer (Google's maintained quantizer for LiteRT, formerly ai-edge-quantizer) from the
fp32 .tflite of the TFLite converter.

Why litert-quantizer: TF 2.15's converter writes INT4 weights only from a graph with 4-bit fake
quantization (its experimental low-bit QAT flag), not from a representative dataset, so it has
no post-training int4; litert-quantizer calibrates the float model on the same observations as
int8 (min/max) and writes full-integer models with packed INT4 weights.

The recipe: every op it supports static, int8 activations; FULLY_CONNECTED with int4 weights
per tensor, the others (a CNN's convs) with int8 weights per channel. Per tensor because TF Lite
Micro's FULLY_CONNECTED refuses per-channel int4 weights (its Prepare fails); int8 convs because
FULLY_CONNECTED is the op our firmware runs with int4 weights. The graph's input and output (the
quantizer's virtual INPUT and OUTPUT ops) are left unquantized, so that, as in the int8 scheme,
the model has float32 I/O with QUANTIZE and DEQUANTIZE at its edges (what HIL plays).
"""
from __future__ import annotations

import contextlib
import io

import numpy as np

from ..core.errors import ModelError, QuarlError
from ..core.noise import captured_stderr, tail


def _quantizer():
    try:
        from litert_quantizer import qtyping
        from litert_quantizer import quantizer as qz
    except ImportError as e:
        raise QuarlError("scheme int8x4 needs litert-quantizer (pip install "
                         "'quarl-edge[tf]', or pip install litert-quantizer): "
                         f"{str(e).splitlines()[0]}") from None
    return qz, qtyping


def int4_weights(float_tflite: bytes, calibration: np.ndarray) -> bytes:
    """The fp32 model `float_tflite` as int8 activations x int4 weights (per tensor), its
    activation ranges calibrated on `calibration` (rows of the model's one input)."""
    qz, qtyping = _quantizer()
    from ai_edge_litert.interpreter import Interpreter
    signatures = Interpreter(model_content=float_tflite).get_signature_list()
    if len(signatures) != 1:
        raise ModelError(f"scheme int8x4: the float model has {len(signatures)} signatures, "
                         f"expected one")
    key, sig = next(iter(signatures.items()))
    if len(sig["inputs"]) != 1:
        raise ModelError(f"scheme int8x4: the float model has {len(sig['inputs'])} inputs, "
                         f"expected one")
    name = sig["inputs"][0]
    data = {key: [{name: np.asarray(x, np.float32)[None]} for x in calibration]}
    q = qz.Quantizer(float_tflite)
    # int8 everywhere (conv weights per channel, as the int8 scheme's), then int4 weights for
    # FULLY_CONNECTED: the op our firmware runs with int4 weights (TF Lite Micro also has int4
    # CONV_2D; a CNN policy's convs keep int8 weights, a small share of its bytes: MinAtar's
    # 3x3 conv holds 0.4 % of its weights).
    q.add_static_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                        activation_num_bits=8, weight_num_bits=8,
                        weight_granularity=qtyping.QuantGranularity.CHANNELWISE)
    q.add_static_config(regex=".*", operation_name=qtyping.TFLOperationName.FULLY_CONNECTED,
                        activation_num_bits=8, weight_num_bits=4,
                        weight_granularity=qtyping.QuantGranularity.TENSORWISE)
    from litert_quantizer.algorithm_manager import AlgorithmName
    for edge in (qtyping.TFLOperationName.INPUT, qtyping.TFLOperationName.OUTPUT):
        q.update_quantization_recipe(regex=".*", operation_name=edge,
                                     algorithm_key=AlgorithmName.NO_QUANTIZE)
    # it prints a summary to stdout and progress bars to stderr: shown only on failure
    with captured_stderr() as log, contextlib.redirect_stdout(io.StringIO()):
        try:
            result = q.quantize(q.calibrate(data, num_threads=1))
        except Exception as e:
            last = tail(log)
            raise ModelError(f"litert-quantizer (int8x4) failed: {str(e).splitlines()[0]}"
                             + ("\n  " + "\n  ".join(last) if last else "")) from e
    return bytes(result.quantized_model)
