"""What makes TensorFlow 2.15 and 2.16+ convert alike (a leaf module: rl/, quant/ and the tests
use it; it imports nothing of quarl_edge).

TensorFlow >= 2.16's converter quantizes a Dense layer's (FULLY_CONNECTED's) weights per output
channel by default; TensorFlow 2.15's, per tensor. The firmware's optimized FULLY_CONNECTED
variants (packed pairs for Cortex-M, the AVR kernel) take per-tensor weights, and the committed
results were measured with them, so every converter here is asked for per-tensor Dense weights,
on every TensorFlow (convolutions stay per channel, as on both).
"""
from __future__ import annotations

DENSE_PER_TENSOR = "_experimental_disable_per_channel_quantization_for_dense_layers"


def configure_converter(converter):
    """`converter` (a tf.lite.TFLiteConverter), set to quantize Dense weights per tensor where
    this TensorFlow would otherwise quantize them per channel; returned for chaining."""
    if hasattr(converter, DENSE_PER_TENSOR):     # TF >= 2.16; 2.15 is per tensor already
        setattr(converter, DENSE_PER_TENSOR, True)
    return converter
