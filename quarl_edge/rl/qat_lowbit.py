"""4-bit weights for quantization-aware training (the `qat-int8x4` scheme): a tfmot
QuantizeConfig for Dense layers with 4-bit per-tensor symmetric weights and 8-bit activations,
the rest of tfmot's default 8-bit scheme unchanged (its input layer, other layers).

The fake quantizers are tfmot's own (LastValueQuantizer for the kernel, MovingAverageQuantizer
for the activation), so their variables are named as in the default scheme (kernel_min/max,
post_activation_min/max) and rl/qat.py's qat_model initialises their ranges the same way.
TF 2.15's converter then writes the 4-bit fake-quantized kernels as INT4 tensors when asked to
(its experimental low-bit QAT flag: quant/schemes.py, _qat_int8x4): FULLY_CONNECTED with int4
weights per tensor, int8 activations, float32 I/O.
"""
from __future__ import annotations

WEIGHT_BITS = (8, 4)
# TFLite's int8 TANH writes its output at scale 1/128, zero point 0: the range [-1, 127/128].
# tfmot fake-quantizes a tanh layer before its activation only (the converter knows TANH's fixed
# output), and so does this config; but with the converter's low-bit QAT flag a TANH with no
# fake-quant after it stays float32 (DEQUANTIZE, float TANH, then a hybrid FULLY_CONNECTED
# that no int8 kernel runs). An explicit fixed fake-quant at exactly TANH's output
# quantization keeps the op int8 and changes no value.
TANH_OUT = (-1.0, 127.0 / 128.0)


def quantize_model_int4(model):
    """tfmot's quantize_model with every Dense layer's kernel fake-quantized to 4 bits."""
    import tensorflow as tf
    import tensorflow_model_optimization as tfmot
    keras_q = tfmot.quantization.keras
    config_cls = _int4_dense_config(keras_q)

    def annotate(layer):
        if isinstance(layer, tf.keras.layers.Dense):
            tanh = tf.keras.activations.serialize(layer.activation) == "tanh"
            return keras_q.quantize_annotate_layer(layer, config_cls(tanh))
        return keras_q.quantize_annotate_layer(layer)

    annotated = tf.keras.models.clone_model(model, clone_function=annotate)
    annotated.set_weights(model.get_weights())
    with keras_q.quantize_scope({config_cls.__name__: config_cls}):
        return keras_q.quantize_apply(keras_q.quantize_annotate_model(annotated))


def _int4_dense_config(keras_q):
    quantizers = keras_q.quantizers

    class Int4DenseQuantizeConfig(keras_q.QuantizeConfig):
        """Dense: kernel 4-bit symmetric per tensor, activation 8-bit asymmetric; a tanh
        layer's output also at TFLite's fixed int8 TANH quantization (see TANH_OUT)."""

        def __init__(self, tanh: bool = False):
            self.tanh = tanh

        def get_weights_and_quantizers(self, layer):
            return [(layer.kernel, quantizers.LastValueQuantizer(
                num_bits=4, symmetric=True, narrow_range=True, per_axis=False))]

        def get_activations_and_quantizers(self, layer):
            return [(layer.activation, quantizers.MovingAverageQuantizer(
                num_bits=8, symmetric=False, narrow_range=False, per_axis=False))]

        def set_quantize_weights(self, layer, quantize_weights):
            layer.kernel = quantize_weights[0]

        def set_quantize_activations(self, layer, quantize_activations):
            layer.activation = quantize_activations[0]

        def get_output_quantizers(self, layer):
            if not self.tanh:
                return []
            return [quantizers.FixedQuantizer(num_bits=8, init_min=TANH_OUT[0],
                                              init_max=TANH_OUT[1], narrow_range=False)]

        def get_config(self):
            return {"tanh": self.tanh}

    return Int4DenseQuantizeConfig
