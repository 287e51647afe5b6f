"""Remedies for the RL-specific failure of int8 policies with an argmax head (DQN Q-values, the
logits of a discrete PPO policy): Q-values share a large offset and differ by a small action
gap, so the int8 *output* quantization (one step = range / 255) collapses the best actions into
ties, and argmax then picks the first of them.

Three remedies, each evaluated in the study as its own scheme next to plain `int8`:

  int8-centred  advantage-style centring folded into the last layer before conversion:
                W' = W - mean_over_actions(W), b' = b - mean(b). The argmax and the softmax are
                unchanged in float, the output range loses the shared offset, so the int8 step
                gets finer. A real .tflite (quantize.SCHEMES), deployable as any int8 model.
  int8-acc      the int8 model, but the greedy action is the argmax of the last
                FULLY_CONNECTED's int32 accumulators (bias added, before requantization), scaled
                per output channel by input_scale * weight_scale[c]: nothing is rounded to int8
                at the head, so no tie that float did not have. A real .tflite: the int8 model
                plus a metadata entry "quarl_edge.head" = "accumulators". TFLite ignores it (its
                output stays the int8 head); our generator (quarl_edge/converters/cgen.py) reads it and
                makes the head write float32 (float)acc * scale[c] on the board, and the host's
                references (validate, hil) compute the same from the interpreter's own int8
                input to that layer (`AccumulatorReadout.readout_f32`), bit for bit.
  int8-i16head  the int8 model with its last layer's accumulators requantized to int16 instead
                of int8 (symmetric, zero point 0, scale = calibrated max |output| / 32767, as
                TFLite's 16-bit activations): 256x finer than the int8 head. TFLite has no
                FULLY_CONNECTED with int8 input and int16 output, so this one is a numpy
                emulation (real-valued rescale, round half away from zero, saturate to int16),
                not a .tflite.

  int8-centred-acc  both: centring, then the accumulator readout. Measured on the classic grid:
                the ties are a symptom, not the cause. The shared Q offset also widens the last
                layer's *weights*, so int8 rounds the small differences between action columns
                coarsely; the accumulator readout alone removes the ties but keeps that weight error
                (on some runs worse than int8's tie-to-first-action), centring removes both.

Continuous-action policies (SAC/TD3/DDPG actors, PPO on Box spaces) have no argmax head: the
remedies do not apply and the study records such cells as skipped.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..core.errors import ModelError, QuarlError
from ..core.tflite_host import Interpreter, resolver
from ..core.envs import make_gym

# Evaluation-only remedies: the int8 model with another readout of its head.
RUNNERS = ("int8-i16head",)
# All remedies (int8-centred and int8-acc are conversion schemes in quantize.SCHEMES).
NAMES = ("int8-centred", "int8-acc", "int8-centred-acc", *RUNNERS)

READOUT_METADATA = "quarl_edge.head"    # .tflite metadata name; value b"accumulators"
READOUT_ACCUMULATORS = b"accumulators"


def tag_accumulator_readout(flatbuffer: bytes, value: bytes = READOUT_ACCUMULATORS) -> bytes:
    """The .tflite `flatbuffer` with metadata READOUT_METADATA = value added (or replaced)."""
    import flatbuffers
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    buf = schema.BufferT()
    buf.data = np.frombuffer(value, dtype=np.uint8)
    model.buffers.append(buf)
    entry = schema.MetadataT()
    entry.name = READOUT_METADATA
    entry.buffer = len(model.buffers) - 1
    keep = [m for m in (model.metadata or [])
            if m.name not in (READOUT_METADATA, READOUT_METADATA.encode())]
    model.metadata = [*keep, entry]
    builder = flatbuffers.Builder(len(flatbuffer) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def readout_metadata(model_path: Path) -> bytes | None:
    """The model's READOUT_METADATA value (b"accumulators"), or None for a plain model."""
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    data = Path(model_path).read_bytes()
    try:
        model = schema.Model.GetRootAs(data, 0)
        for i in range(model.MetadataLength()):
            entry = model.Metadata(i)
            if (entry.Name() or b"").decode(errors="replace") == READOUT_METADATA:
                buf = model.Buffers(entry.Buffer())
                return bytes(buf.DataAsNumpy()) if buf is not None and buf.DataLength() else b""
    except Exception as e:   # flatbuffers raises whatever a truncated buffer makes it raise
        raise ModelError(f"{model_path} is not a valid .tflite model: {e}") from None
    return None


def centre_head(model):
    """A copy of the Keras MLP `model` whose last Dense layer outputs Q - mean_a(Q) (logits minus
    their mean): argmax and softmax are unchanged, the shared offset is gone."""
    import tensorflow as tf
    dense = [layer for layer in model.layers if layer.__class__.__name__ == "Dense"]
    if not dense:
        raise QuarlError("int8-centred: the network has no Dense layer to centre")
    last = dense[-1]
    if last.get_config()["activation"] != "linear":
        raise QuarlError(f"int8-centred: the last layer {last.name} has activation "
                         f"{last.get_config()['activation']!r}; centring needs a linear head")
    centred = tf.keras.models.clone_model(model)
    centred.set_weights(model.get_weights())
    kernel, bias = last.get_weights()
    centred.get_layer(last.name).set_weights([kernel - kernel.mean(axis=1, keepdims=True),
                                              bias - bias.mean()])
    return centred


def _micro_preserving_tensors(path: Path):
    """A TF Lite Micro interpreter of the model that keeps every tensor readable (GetTensor)."""
    from tflite_micro.python.tflite_micro import runtime
    data = Path(path).read_bytes()
    return runtime.Interpreter.from_bytes(
        data, arena_size=max(1 << 20, 64 * len(data)),
        intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors)


class AccumulatorReadout:
    """Runs an int8 .tflite and returns, per observation, the last FULLY_CONNECTED's int32
    accumulators (input . weights + bias, exact integers) and their per-channel real scale.
    The layers before the head run on the host interpreter's `kernels` ("optimized" or
    "reference": measure/reference.py, TFLITE_KERNELS), or on TF Lite Micro ("micro": what the
    board is bit-exact with; LiteRT's reference FULLY_CONNECTED requantizes otherwise than TFLM,
    so it cannot stand in for it as tflite-runtime's nearly could)."""

    def __init__(self, model_path: Path, kernels: str = "optimized"):
        # built here, not with measure.reference.tflite_runtime_interpreter: quant is upstream
        self.path = Path(model_path)
        self.interp = Interpreter(
            model_path=str(self.path), experimental_preserve_all_tensors=True,
            experimental_op_resolver_type=resolver(kernels))
        self.interp.allocate_tensors()
        fcs = [op for op in self.interp._get_ops_details() if op["op_name"] == "FULLY_CONNECTED"]
        if not fcs:
            raise ModelError(f"{self.path.name}: no FULLY_CONNECTED layer: the accumulator "
                             "readout needs one at the head")
        head = fcs[-1]
        details = {t["index"]: t for t in self.interp.get_tensor_details()}
        x_i, w_i, b_i = (list(head["inputs"]) + [-1])[:3]
        x, w = details[x_i], details[w_i]
        if np.dtype(x["dtype"]) != np.int8 or np.dtype(w["dtype"]) != np.int8:
            raise ModelError(f"{self.path.name}: the head FULLY_CONNECTED is "
                             f"{np.dtype(x['dtype']).name} x {np.dtype(w['dtype']).name}; the "
                             "accumulator readout needs an int8 x int8 layer (an int8 model)")
        self.x_index = x_i
        self.x_zero = int(x["quantization_parameters"]["zero_points"][0])
        x_scale = float(x["quantization_parameters"]["scales"][0])
        self.weights = self.interp.get_tensor(w_i).astype(np.int64)      # [out, in]
        w_zero = w["quantization_parameters"]["zero_points"]
        if np.any(w_zero != 0):
            raise ModelError(f"{self.path.name}: int8 weights with a non-zero zero point")
        w_scales = np.asarray(w["quantization_parameters"]["scales"], np.float64)
        self.bias = (self.interp.get_tensor(b_i).astype(np.int64) if b_i >= 0
                     else np.zeros(len(self.weights), np.int64))
        # Per-channel (or per-tensor, broadcast) real value of one accumulator unit; scale_f32 is
        # what the generated C multiplies by (the float32 product, computed in double).
        self.scale = (x_scale * np.broadcast_to(w_scales, (len(self.weights),))).astype(np.float64)
        self.scale_f32 = self.scale.astype(np.float32)
        self.inp = self.interp.get_input_details()[0]
        self.micro = _micro_preserving_tensors(self.path) if kernels == "micro" else None

    def accumulators(self, obs: np.ndarray) -> np.ndarray:
        """int64 [n_out] accumulators of the head for one observation."""
        inp = self.inp
        x = np.asarray(obs, dtype=np.float32).reshape(tuple(inp["shape"]))
        if np.issubdtype(np.dtype(inp["dtype"]), np.integer):
            s, z = inp["quantization"]
            info = np.iinfo(inp["dtype"])
            x = np.clip(np.round(x / s) + z, info.min, info.max).astype(inp["dtype"])
        if self.micro is not None:
            self.micro.set_input(x, 0)
            self.micro.invoke()
            head_input = np.asarray(self.micro.GetTensor(self.x_index, 0)["tensor_data"])
        else:
            self.interp.set_tensor(inp["index"], x)
            self.interp.invoke()
            head_input = self.interp.get_tensor(self.x_index)
        xq = head_input.reshape(-1).astype(np.int64) - self.x_zero
        return self.weights @ xq + self.bias


    def readout_f32(self, obs: np.ndarray) -> np.ndarray:
        """float32 [n_out]: (float)acc * scale_f32, as the board's int8-acc head computes it."""
        return self.accumulators(obs).astype(np.float32) * self.scale_f32


class AccumulatorReadoutReference:
    """The host reference for an int8-acc model, with the interface of reference.TFLiteRuntime
    (inputs, outputs, run): its output is the head's float32 accumulator readout, what the
    generated firmware returns for such a model."""

    def __init__(self, model_path: Path, kernels: str = "optimized"):
        self.head = AccumulatorReadout(model_path, kernels)
        self.inputs = self.head.interp.get_input_details()
        out = dict(self.head.interp.get_output_details()[0])
        out["dtype"], out["quantization"] = np.float32, (0.0, 0)
        self.outputs = [out]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        y = self.head.readout_f32(inputs[0])
        return [y.reshape(tuple(self.outputs[0]["shape"]))]


def accumulator_runner(model_path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """int8-acc: per observation, the head's accumulators in real units (float64)."""
    head = AccumulatorReadout(model_path)
    return lambda obs: head.accumulators(obs) * head.scale


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def int16_head_runner(model_path: Path, calibration: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """int8-i16head: the head's accumulators requantized to int16 (symmetric, scale from the
    calibration observations' largest |output|), returned dequantized."""
    head = AccumulatorReadout(model_path)
    peak = max(float(np.max(np.abs(head.accumulators(o) * head.scale))) for o in calibration)
    out_scale = max(peak, 1e-12) / 32767.0

    def run(obs: np.ndarray) -> np.ndarray:
        real = head.accumulators(obs) * head.scale
        q = np.clip(_round_half_away(real / out_scale), -32768, 32767)
        return q * out_scale

    run.out_scale = out_scale
    return run


def is_argmax_head(env_id: str) -> bool:
    """True when the policy's action is the argmax of its outputs (a discrete action space)."""
    return hasattr(make_gym(env_id).action_space, "n")
