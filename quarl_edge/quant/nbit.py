"""QuaRL's n-bit sweep: weights and activations fake-quantized to n bits (2..8) with min/max
ranges, the number of levels really restricted to 2**n, and the greedy return of each.
Computed in numpy, bit-for-bit the arithmetic of tf.quantization.fake_quant_with_min_max_vars
(narrow_range=False): the range is nudged so that 0 is exactly representable, values are
clamped to it and rounded half up.

MLPs run in numpy (`fake_quant_forward`); sequential CNNs (pixel-task Q-networks: Conv2D, pooling,
Flatten, Dense) as one traced TensorFlow function (`keras_fake_quant_forward`) whose activations
go through tf.quantization.fake_quant_with_min_max_args, the op the numpy code reproduces."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.names import SWEEP_MODES
from ..core.nets import ACTIVATIONS, KERNEL_LAYERS, keras_call, mlp_forward, mlp_layers
from ..core.run import load_keras, load_run
from .calibration import collect_calibration
from ..core.envs import compare_outputs, make_gym, play_batched


def fake_quant(x: np.ndarray, bits: int, lo, hi) -> np.ndarray:
    """`x` fake-quantized to 2**bits levels over [lo, hi]; lo/hi may be arrays broadcasting
    against x (per channel). As in TF, the grid keeps the step (hi - lo) / (2**bits - 1) and is
    shifted so that 0 is a level (a range not holding 0 is shifted to start or end at 0)."""
    if not 2 <= int(bits) <= 16:
        raise QuarlError(f"bits must be in 2..16, got {bits}")
    x = np.asarray(x, np.float32)
    lo, hi = np.asarray(lo, np.float32), np.asarray(hi, np.float32)
    qmax = np.float32(2 ** int(bits) - 1)
    scale = (hi - lo) / qmax
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    zero = np.clip(np.floor(-lo / scale + np.float32(0.5)), 0, qmax)
    nlo, nhi = (0 - zero) * scale, (qmax - zero) * scale
    q = np.floor((np.clip(x, nlo, nhi) - nlo) / scale + np.float32(0.5))
    return (q * scale + nlo).astype(np.float32)


def fake_quant_weights(w: np.ndarray, bits: int, per_channel: bool = False) -> np.ndarray:
    """A kernel ([in, out], or a convolution's [..., out]) fake-quantized with its own min/max
    (per output channel, the last axis, if asked)."""
    w = np.asarray(w, np.float32)
    if per_channel:
        axes = tuple(range(w.ndim - 1))
        return fake_quant(w, bits, np.minimum(w.min(axis=axes, keepdims=True), 0),
                          np.maximum(w.max(axis=axes, keepdims=True), 0))
    return fake_quant(w, bits, min(float(w.min()), 0.0), max(float(w.max()), 0.0))


def activation_ranges(layers, calibration: np.ndarray) -> list[tuple[float, float]]:
    """(min, max) of the input and of each layer's output on `calibration` (float network),
    widened to hold 0 as TFLite and tfmot do (else TF's nudging would shift the whole grid:
    Q-values in [62, 114] would be clamped to [0, 52])."""
    x = np.asarray(calibration, np.float32).reshape(len(calibration), -1)
    ranges = [(min(float(x.min()), 0.0), max(float(x.max()), 0.0))]
    for layer in layers:
        x = mlp_forward([layer], x)
        ranges.append((min(float(x.min()), 0.0), max(float(x.max()), 0.0)))
    return ranges


def fake_quant_forward(layers, calibration: np.ndarray, weight_bits: int | None,
                       activation_bits: int | None, per_channel: bool = False):
    """A numpy batch forward of the MLP `layers` (train.mlp_layers) with n-bit fake-quantized
    weights (biases stay float, as in QuaRL) and n-bit activations (the input and every layer's
    output, ranges from `calibration`). None leaves that part in float32."""
    ranges = activation_ranges(layers, calibration)
    qlayers = [(k if weight_bits is None else fake_quant_weights(k, weight_bits, per_channel), b, a)
               for k, b, a in layers]

    def forward(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        if activation_bits is not None:
            x = fake_quant(x, activation_bits, *ranges[0])
        for i, (k, b, act) in enumerate(qlayers):
            x = ACTIVATIONS[act](x @ k + b).astype(np.float32)
            if activation_bits is not None:
                x = fake_quant(x, activation_bits, *ranges[i + 1])
        return x

    forward.layers = qlayers
    return forward


# Layers of a sequential network whose output is not an activation of its own to quantize: they
# only move values (a quantized input stays on its grid).
_REARRANGING = ("Flatten", "Reshape", "Dropout")


def keras_fake_quant_forward(model, calibration: np.ndarray, weight_bits: int | None,
                             activation_bits: int | None, per_channel: bool = False):
    """fake_quant_forward for a sequential Keras network that is not a plain MLP (a CNN): a copy
    with every kernel fake-quantized to `weight_bits` (biases float), and, at `activation_bits`,
    the input and the output of every layer that computes (convolutions, pooling, Dense)
    fake-quantized over its range on `calibration`. One traced tf.function."""
    import tensorflow as tf

    copy = tf.keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    chain = [layer for layer in copy.layers if layer.__class__.__name__ != "InputLayer"]
    if weight_bits is not None:
        for layer in chain:
            if layer.__class__.__name__ in KERNEL_LAYERS:
                w = layer.get_weights()
                layer.set_weights([fake_quant_weights(w[0], weight_bits, per_channel), *w[1:]])
    points = [i for i, layer in enumerate(chain) if layer.__class__.__name__ not in _REARRANGING]
    x = np.asarray(calibration, np.float32)
    ranges = {-1: (min(float(x.min()), 0.0), max(float(x.max()), 0.0))}
    outputs = tf.keras.Model(model.inputs, [model.get_layer(chain[i].name).output
                                            for i in points])(x, training=False)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    for i, out in zip(points, outputs):
        out = np.asarray(out)
        ranges[i] = (min(float(out.min()), 0.0), max(float(out.max()), 0.0))

    def fq(t, i):
        if activation_bits is None:
            return t
        lo, hi = ranges[i]
        return tf.quantization.fake_quant_with_min_max_args(t, min=lo, max=hi,
                                                            num_bits=int(activation_bits))

    @tf.function(reduce_retracing=True)
    def call(t):
        t = fq(t, -1)
        for i, layer in enumerate(chain):
            t = layer(t, training=False)
            if i in ranges:
                t = fq(t, i)
        return t

    return lambda obs: call(tf.convert_to_tensor(np.asarray(obs, np.float32))).numpy()


def nbit_sweep(run_dir: Path, bits=range(2, 9), seeds=range(20), calib_size: int = 1000,
               modes=("weights+activations", "weights"), per_channel: bool = False) -> list[dict]:
    """QuaRL's n-bit sweep of a run: greedy return (and agreement with fp32 on the states fp32
    visits) on test `seeds` for each bit width and mode; the first row is fp32."""

    unknown = [m for m in modes if m not in SWEEP_MODES]
    if unknown:     # before any episode is played
        raise QuarlError(f"unknown sweep mode {unknown[0]!r}; known: {', '.join(SWEEP_MODES)}")
    run_dir = Path(run_dir)
    env_id = load_run(run_dir)["env"]
    space = make_gym(env_id).action_space
    model = load_keras(run_dir)
    try:
        layers = mlp_layers(model)
    except QuarlError:   # a CNN: TensorFlow runs it (keras_fake_quant_forward)
        layers = None
    calibration = collect_calibration(run_dir, calib_size, seed=0)
    seeds = list(seeds)
    ref = keras_call(model) if layers is None else (lambda x: mlp_forward(layers, x))

    ref_returns, states = play_batched(env_id, ref, seeds, record=True)
    rows = [{"mode": "fp32", "bits": 32, "mean_return": float(np.mean(ref_returns)),
             "std_return": float(np.std(ref_returns)), "agreement": 1.0}]
    ref_out = ref(states)
    for mode in modes:
        for n in bits:
            wb, ab = None if mode == "activations" else n, None if mode == "weights" else n
            f = (keras_fake_quant_forward(model, calibration, wb, ab, per_channel)
                 if layers is None else fake_quant_forward(layers, calibration, wb, ab,
                                                           per_channel))
            returns, _ = play_batched(env_id, f, seeds)
            row = {"mode": mode, "bits": int(n), "mean_return": float(np.mean(returns)),
                   "std_return": float(np.std(returns))}
            row.update(compare_outputs(ref_out, f(states), space))
            rows.append(row)
    return rows

