"""SB3's forward re-done in numpy float64 from a zip's tensors (the import's reference, the way
SB3's policy classes compute it, without torch), and SB3's NatureCNN as Keras layers on the
env's HWC images. See sb3.py."""
from __future__ import annotations

import numpy as np


ACT = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh, "linear": lambda x: x}


def _conv_nchw(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    """torch.nn.Conv2d (no padding) in numpy float64: x [n, c, h, w], w [o, c, kh, kw]."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride][:, :, :oh, :ow]           # [n, c, oh, ow, kh, kw]
    return np.einsum("ncxykl,ockl->noxy", win, w.astype(np.float64)) + \
        b.astype(np.float64)[None, :, None, None]


def numpy_reference(layers, norm: dict | None, cnn=None, scale_images: bool = True):
    """SB3's forward in numpy float64 from the unfolded tensors: for a CnnPolicy the
    channel-first transpose SB3 applies to HWC images (VecTransposeImage), /255, NatureCNN in
    NCHW and its Flatten; VecNormalize (with the clip); the layers. It gives what the
    imported network gives, a Gaussian policy's mean unclipped: the clip to the bounds that
    predict() applies is the action head's, on both sides of the fidelity check (clipping
    here alone made run.json's max_abs_error_outputs the distance from the mean to the
    bounds)."""
    def run(obs):
        x = np.asarray(obs, np.float64)
        if cnn is not None:
            x = x.transpose(0, 3, 1, 2) / (255.0 if scale_images else 1.0)
            for w, b, stride in cnn[0]:
                x = np.maximum(_conv_nchw(x, w, b, stride), 0.0)
            k, b = cnn[1]
            x = np.maximum(x.reshape(len(x), -1) @ k.astype(np.float64) + b, 0.0)
        x = x.reshape(len(obs), -1)
        if norm:
            x = np.clip((x - norm["mean"].reshape(-1)) / np.sqrt(norm["var"].reshape(-1)
                                                                + norm["epsilon"]),
                        -norm["clip_obs"], norm["clip_obs"])
        for k, b, act in layers:
            x = x @ k.astype(np.float64) + b.astype(np.float64)
            x = np.tanh(np.clip(x, -act[1], act[1])) if isinstance(act, tuple) else ACT[act](x)
        return x
    return run


def keras_nature_cnn(obs_shape, cnn, layers, scale_images: bool, name: str):
    """NatureCNN as Keras layers on the env's HWC images (what the board receives), then the
    dense layers. SB3's /255 is folded into the first convolution's weights, and the Flatten's
    order is fixed in the Linear layer after it: torch flattens [C, H, W], Keras [H, W, C]."""
    import tensorflow as tf   # heavy: only when a CnnPolicy is built
    inp = tf.keras.Input(shape=tuple(obs_shape), dtype=tf.float32, name="observation")
    x, shape = inp, None
    for i, (w, b, stride) in enumerate(cnn[0]):
        k = w.transpose(2, 3, 1, 0).astype(np.float64)           # [kh, kw, in, out]
        if i == 0 and scale_images:
            k = k / 255.0
        conv = tf.keras.layers.Conv2D(w.shape[0], w.shape[2:], strides=stride, padding="valid",
                                      activation="relu", name=f"conv_{i}")
        x = conv(x)
        conv.set_weights([k.astype(np.float32), b.astype(np.float32)])
        shape = tuple(int(d) for d in x.shape[1:])              # (H', W', C')
    x = tf.keras.layers.Flatten()(x)
    kernel, bias = cnn[1]                                       # rows in torch's C, H, W order
    h, w_, c = shape
    kernel = kernel.reshape(c, h, w_, -1).transpose(1, 2, 0, 3).reshape(h * w_ * c, -1)
    for i, (k, b, act) in enumerate([(kernel, bias, "relu"), *layers]):
        dense = tf.keras.layers.Dense(k.shape[1], activation=act, name=f"dense_{i}")
        x = dense(x)
        dense.set_weights([np.asarray(k, np.float32), np.asarray(b, np.float32)])
    return tf.keras.Model(inp, x, name=name)
