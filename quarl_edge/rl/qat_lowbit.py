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


def quantize_model_int4(model):
    """tfmot's quantize_model with every Dense layer's kernel fake-quantized to 4 bits."""
    import tensorflow as tf
    import tensorflow_model_optimization as tfmot
    keras_q = tfmot.quantization.keras
    config_cls = _int4_dense_config(keras_q)

    def annotate(layer):
        if isinstance(layer, tf.keras.layers.Dense):
            return keras_q.quantize_annotate_layer(layer, config_cls())
        return keras_q.quantize_annotate_layer(layer)

    annotated = tf.keras.models.clone_model(model, clone_function=annotate)
    annotated.set_weights(model.get_weights())
    with keras_q.quantize_scope({config_cls.__name__: config_cls}):
        return keras_q.quantize_apply(keras_q.quantize_annotate_model(annotated))


def _int4_dense_config(keras_q):
    quantizers = keras_q.quantizers

    class Int4DenseQuantizeConfig(keras_q.QuantizeConfig):
        """Dense: kernel 4-bit symmetric per tensor, activation 8-bit asymmetric."""

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
            return []

        def get_config(self):
            return {}

    return Int4DenseQuantizeConfig
