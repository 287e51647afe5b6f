"""Convert a trained run's Q-network (RUN/qnet.keras) to TFLite, one file per scheme.

    RUN/models/<scheme>.tflite
    RUN/calibration.npy          observations used to calibrate the integer schemes

Schemes (SCHEMES maps each name to its converter):
  fp32  plain float32 conversion
  fp16  float16 weights (dequantized to float32 at load time), float32 compute and I/O
  int8  full integer: every op int8 with float32 input/output, so the graph is
        QUANTIZE -> FULLY_CONNECTED... -> DEQUANTIZE; weights int8 per-tensor, biases int32
  dyn-int8  dynamic range: int8 weights, float32 activations and I/O; FULLY_CONNECTED quantizes
        its input on the fly (hybrid kernels; no calibration)
  int16x8  int16 activations, int8 weights, int64 biases (the converter's
        EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8), calibrated, float32 I/O
  int8x4  int8 activations, int4 weights per tensor (packed two per byte), float32 I/O:
        litert-quantizer on the fp32 model, calibrated as int8 (quarl_edge/quant/lowbit.py)
  qat-int8  quantization-aware training (quarl_edge/rl/qat.py): the network is fine-tuned with
        fake quantization in the RL loop, then converted to full int8 with float32 I/O
        (QUANTIZE -> FULLY_CONNECTED... -> DEQUANTIZE), ranges learned in training; DQN only
  qat-int8x4  qat-int8 with the Dense kernels fake-quantized to 4 bits (rl/qat_lowbit.py), then
        converted by the TFLite converter with its low-bit QAT flag: int4 weights per tensor,
        int8 activations, float32 I/O; DQN only
  qat-distill-int8  quantization-aware training by on-policy distillation (quarl_edge/rl/qat.py,
        qat_distill): the same fake-quantized copy, fitted to the fp32 network's outputs on the
        states its own greedy policy visits (DAgger); every algorithm; converted as qat-int8
  qat-distill-int8x4  qat-distill-int8 with the Dense kernels fake-quantized to 4 bits, converted
        as qat-int8x4: the 4-bit QAT for every algorithm (the RL-loop one is DQN's only)
  int8-centred  int8, after folding advantage-style centring into the last layer (Q - mean_a Q;
        argmax unchanged): a remedy for int8 ties of argmax heads (quarl_edge/quant/remedies.py);
        discrete-action policies only
  int8-acc  the int8 model tagged (metadata "quarl_edge.head" = "accumulators") so that its
        greedy action is the argmax of the last layer's int32 accumulators: tflite-runtime runs it
        as plain int8, the generated firmware and the host references read the accumulators
        (quarl_edge/quant/remedies.py); discrete-action policies only
  int8-centred-acc  both: centring folded into the last layer, then the accumulator readout

The network is RUN/qnet.keras (DQN) or RUN/policy.keras (the deterministic actor of the other
algorithms); run.json's "model_file" names it.

A recurrent run (`ppo --net lstm`: RUN/policy.keras is a one-step model with a stateful LSTM,
rl/recurrent.py) converts with RECURRENT_SCHEMES only, from a concrete function of its fixed
shape [1, 1, *obs]: one UNIDIRECTIONAL_SEQUENCE_LSTM whose hidden and cell state are variable
tensors (the state a board keeps in its arena between INFERs). Its calibration rollouts keep the
recurrent policy's state and the observations' order (calibration.recurrent_calibration).

Calibration data are observations from rollouts of the run's own greedy policy with a little
epsilon (for coverage of states just off the greedy path), on seeds CALIBRATION_SEED_BASE + k,
which are distinct from the test seeds 0..N and the training validation seeds 10_000 + k.
"""
from __future__ import annotations
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..core.errors import ModelError, QuarlError
from ..core.noise import captured_stderr, tail
from ..core.run import Run, load_keras, load_run
from ..core.tfcompat import configure_converter
from .calibration import CALIBRATION_EPSILON, collect_calibration, recurrent_calibration
from .lowbit import int4_weights
from .remedies import centre_head, is_argmax_head, tag_accumulator_readout
from ..rl.recurrent import convert_one_step, is_one_step, layers_from_keras
from ..rl.qat import qat_distill, qat_finetune


@dataclass(frozen=True)
class Scheme:
    convert: Callable  # (tf.lite.TFLiteConverter, calibration: np.ndarray | None) -> None
    needs_calibration: bool
    description: str
    prepare: Callable | None = None   # Keras model -> Keras model before conversion
    finish: Callable | None = None    # .tflite bytes -> .tflite bytes after conversion
    argmax_head_only: bool = False    # only for discrete-action policies (argmax of the outputs)
    requantize: Callable | None = None  # (fp32 .tflite bytes, calibration) -> .tflite bytes


def _fp32(converter, calibration) -> None:
    pass


def _fp16(converter, calibration) -> None:
    import tensorflow as tf
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]


def _int8(converter, calibration) -> None:
    import tensorflow as tf
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([x[None]] for x in calibration)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.float32   # keep float I/O: QUANTIZE/DEQUANTIZE at the edges
    converter.inference_output_type = tf.float32


def _dyn_int8(converter, calibration) -> None:
    import tensorflow as tf
    converter.optimizations = [tf.lite.Optimize.DEFAULT]


def _int16x8(converter, calibration) -> None:
    import tensorflow as tf
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([x[None]] for x in calibration)
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    converter.inference_input_type = tf.float32
    converter.inference_output_type = tf.float32


def _qat_int8x4(converter, calibration) -> None:
    """A tfmot model with 4-bit fake-quantized Dense kernels (rl/qat_lowbit.py): the converter's
    low-bit QAT flag writes those kernels as INT4 tensors (per tensor); float32 I/O."""
    _qat_int8(converter, calibration)
    converter._experimental_low_bit_qat = True


def _int4_weights(flatbuffer: bytes, calibration) -> bytes:
    return int4_weights(flatbuffer, calibration)


def _centre(model):
    return centre_head(model)


def _tag_accumulators(flatbuffer: bytes) -> bytes:
    return tag_accumulator_readout(flatbuffer)


def _qat_int8(converter, calibration) -> None:
    """For a fake-quantized (tfmot) model: its ranges are learned, so no representative data;
    Optimize.DEFAULT and the inference types only (supported_ops=INT8 would demand a dataset)."""
    import tensorflow as tf
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.inference_input_type = tf.float32
    converter.inference_output_type = tf.float32


SCHEMES: dict[str, Scheme] = {
    "fp32": Scheme(_fp32, False, "float32"),
    "fp16": Scheme(_fp16, False, "float16 weights, float32 compute"),
    "int8": Scheme(_int8, True, "full integer int8, float32 I/O"),
    "dyn-int8": Scheme(_dyn_int8, False, "int8 weights, float32 activations (dynamic range)"),
    "int16x8": Scheme(_int16x8, True, "int16 activations, int8 weights, float32 I/O"),
    "int8x4": Scheme(_fp32, True, "int8 activations, int4 weights (per tensor, packed), "
                                  "float32 I/O; litert-quantizer", requantize=_int4_weights),
    "qat-int8": Scheme(_qat_int8, True, "quantization-aware fine-tuning in the RL loop, "
                                        "then full integer int8, float32 I/O"),
    "qat-int8x4": Scheme(_qat_int8x4, True, "quantization-aware fine-tuning in the RL loop "
                                            "with 4-bit weights, then int8 activations x int4 "
                                            "weights, float32 I/O"),
    "qat-distill-int8": Scheme(_qat_int8, True, "quantization-aware training by on-policy "
                                                "distillation from the fp32 network, then full "
                                                "integer int8, float32 I/O"),
    "qat-distill-int8x4": Scheme(_qat_int8x4, True, "quantization-aware training by on-policy "
                                                    "distillation with 4-bit weights, then int8 "
                                                    "activations x int4 weights, float32 I/O"),
    "int8-centred": Scheme(_int8, True, "int8 after centring the outputs over actions "
                                        "(argmax heads only)", prepare=_centre, argmax_head_only=True),
    "int8-acc": Scheme(_int8, True, "int8; greedy action from the head's int32 accumulators "
                                    "(argmax heads only)", finish=_tag_accumulators,
                       argmax_head_only=True),
    "int8-centred-acc": Scheme(_int8, True, "int8-centred with the accumulator readout of int8-acc "
                                            "(argmax heads only)", prepare=_centre,
                               finish=_tag_accumulators, argmax_head_only=True),
}


# What a one-step recurrent model converts with: float32, and full integer (int8 activations,
# int16 cell state: the converter's integer LSTM) with float I/O.
RECURRENT_SCHEMES = ("fp32", "int8")


def scheme_names() -> list[str]:
    return list(SCHEMES)


# ------------------------------------------------------------------------------- conversion
def quantize(run_dir: Path, scheme: str, calib_size: int = 1000, calib_episodes: int = 10,
             seed: int = 0, progress: bool = False, qat: dict | None = None,
             distill: dict | None = None) -> Path:
    """Convert the run's network with `scheme`; returns the path of RUN/models/<scheme>.tflite
    (written through a temporary name). Prints nothing; `progress` shows the QAT schemes'
    fine-tuning bars on stderr.

    `qat`: options of qat.QATConfig for the qat-int8 scheme (e.g. {"steps": 2000});
    `distill`: options of qat.DistillConfig for qat-distill-int8 and qat-distill-int8x4."""
    if scheme not in SCHEMES:
        raise QuarlError(f"unknown quantization scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    run_dir = Path(run_dir)
    Run(run_dir).check_models_dir()      # said before the conversion, not after it
    spec = SCHEMES[scheme]
    if spec.argmax_head_only:
        env_id = load_run(run_dir)["env"]
        if not is_argmax_head(env_id):
            raise QuarlError(f"scheme {scheme} applies to discrete-action policies (argmax of "
                             f"the outputs); {env_id} has continuous actions")
    model = load_keras(run_dir)
    if is_one_step(model):
        return _quantize_recurrent(run_dir, model, scheme, calib_size, calib_episodes, seed)
    if spec.prepare is not None:
        model = spec.prepare(model)
    calibration = None
    if spec.needs_calibration:
        calibration = collect_calibration(run_dir, calib_size, calib_episodes, seed)
        _save_calibration(run_dir, calibration)
    if scheme in ("qat-int8", "qat-int8x4"):
        bits = {"weight_bits": 4} if scheme == "qat-int8x4" else {}
        model = qat_finetune(run_dir, calibration, seed=seed, progress=progress,
                             **{**(qat or {}), **bits})
    elif scheme in ("qat-distill-int8", "qat-distill-int8x4"):
        bits = {"weight_bits": 4} if scheme == "qat-distill-int8x4" else {}
        model = qat_distill(run_dir, calibration, seed=seed, progress=progress,
                            **{**(distill or {}), **bits})

    flatbuffer = convert_keras(model, scheme, calibration)
    if spec.requantize is not None:
        flatbuffer = spec.requantize(flatbuffer, calibration)
    if spec.finish is not None:
        flatbuffer = spec.finish(flatbuffer)

    return Run(run_dir).write_model(scheme, flatbuffer)


def _quantize_recurrent(run_dir: Path, model, scheme: str, calib_size: int, calib_episodes: int,
                        seed: int) -> Path:
    """quantize() for a recurrent run's one-step model (see the module's docstring)."""
    if scheme not in RECURRENT_SCHEMES:
        raise QuarlError(f"scheme {scheme} does not apply to a recurrent (LSTM) policy; its "
                         f"schemes: {', '.join(RECURRENT_SCHEMES)}")
    calibration = None
    if SCHEMES[scheme].needs_calibration:
        calibration = recurrent_calibration(load_run(run_dir)["env"], layers_from_keras(model),
                                            calib_size, calib_episodes, seed, CALIBRATION_EPSILON)
        _save_calibration(run_dir, calibration)
        calibration = calibration[:, None]            # one time step: x[None] is [1, 1, *obs]
    with captured_stderr() as log:
        try:
            flatbuffer = convert_one_step(
                model, lambda c: SCHEMES[scheme].convert(c, calibration))
        except Exception as e:
            last = tail(log)
            raise ModelError(f"TFLite conversion ({scheme}) failed: {str(e).splitlines()[0]}"
                             + ("\n  " + "\n  ".join(last) if last else "")) from e
    return Run(run_dir).write_model(scheme, flatbuffer)


def _save_calibration(run_dir: Path, calibration: np.ndarray) -> None:
    """RUN/calibration.npy, written whole (a full disk keeps the previous one)."""
    Run(run_dir).save_calibration(calibration)


def convert_keras(model, scheme: str, calibration: np.ndarray | None = None) -> bytes:
    """One Keras model -> .tflite bytes with `scheme` (calibration for the integer schemes)."""
    import tensorflow as tf
    converter = configure_converter(tf.lite.TFLiteConverter.from_keras_model(model))
    SCHEMES[scheme].convert(converter, calibration)
    # the converter's C++ side prints pages of MLIR statistics to fd 2: shown only on failure
    with captured_stderr() as log:
        try:
            return converter.convert()
        except Exception as e:  # the converter's errors are long; keep the first line
            last = tail(log)
            raise ModelError(f"TFLite conversion ({scheme}) failed: {str(e).splitlines()[0]}"
                             + ("\n  " + "\n  ".join(last) if last else "")) from e

