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
  qat-int8  quantization-aware training (quarl_edge/qat.py): the network is fine-tuned with
        fake quantization in the RL loop, then converted to full int8 with float32 I/O
        (QUANTIZE -> FULLY_CONNECTED... -> DEQUANTIZE), ranges learned in training; DQN only
  qat-distill-int8  quantization-aware training by on-policy distillation (quarl_edge/qat.py,
        qat_distill): the same fake-quantized copy, fitted to the fp32 network's outputs on the
        states its own greedy policy visits (DAgger); every algorithm; converted as qat-int8
  int8-centred  int8, after folding advantage-style centring into the last layer (Q - mean_a Q;
        argmax unchanged): a remedy for int8 ties of argmax heads (quarl_edge/remedies.py);
        discrete-action policies only
  int8-acc  the int8 model tagged (metadata "quarl_edge.head" = "accumulators") so that its
        greedy action is the argmax of the last layer's int32 accumulators: tflite-runtime runs it
        as plain int8, the generated firmware and the host references read the accumulators
        (quarl_edge/remedies.py); discrete-action policies only
  int8-centred-acc  both: centring folded into the last layer, then the accumulator head

The network is RUN/qnet.keras (DQN) or RUN/policy.keras (the deterministic actor of the other
algorithms); run.json's "model_file" names it.

Calibration data are observations from rollouts of the run's own greedy policy with a little
epsilon (for coverage of states just off the greedy path), on seeds CALIBRATION_SEED_BASE + k,
which are distinct from the test seeds 0..N and the training validation seeds 10_000 + k.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import ModelError, QuarlError

CALIBRATION_SEED_BASE = 20_000
CALIBRATION_EPSILON = 0.05


@dataclass(frozen=True)
class Scheme:
    convert: Callable  # (tf.lite.TFLiteConverter, calibration: np.ndarray | None) -> None
    needs_calibration: bool
    description: str
    prepare: Callable | None = None   # Keras model -> Keras model before conversion
    finish: Callable | None = None    # .tflite bytes -> .tflite bytes after conversion
    argmax_head_only: bool = False    # only for discrete-action policies (argmax of the outputs)


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


def _centre(model):
    from .remedies import centre_head
    return centre_head(model)


def _tag_accumulators(flatbuffer: bytes) -> bytes:
    from .remedies import tag_head
    return tag_head(flatbuffer)


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
    "qat-int8": Scheme(_qat_int8, True, "quantization-aware fine-tuning in the RL loop, "
                                        "then full integer int8, float32 I/O"),
    "qat-distill-int8": Scheme(_qat_int8, True, "quantization-aware training by on-policy "
                                                "distillation from the fp32 network, then full "
                                                "integer int8, float32 I/O"),
    "int8-centred": Scheme(_int8, True, "int8 after centring the outputs over actions "
                                        "(argmax heads only)", prepare=_centre, argmax_head_only=True),
    "int8-acc": Scheme(_int8, True, "int8; greedy action from the head's int32 accumulators "
                                    "(argmax heads only)", finish=_tag_accumulators,
                       argmax_head_only=True),
    "int8-centred-acc": Scheme(_int8, True, "int8-centred with the accumulator head of int8-acc "
                                            "(argmax heads only)", prepare=_centre,
                               finish=_tag_accumulators, argmax_head_only=True),
}


def scheme_names() -> list[str]:
    return list(SCHEMES)


# ------------------------------------------------------------------------------ calibration
def collect_calibration(run_dir: Path, size: int = 1000, episodes: int = 10, seed: int = 0,
                        epsilon: float = CALIBRATION_EPSILON) -> np.ndarray:
    """`size` observations from epsilon-greedy rollouts of the run's Q-network (see
    rollout_observations)."""
    from .train import load_keras, load_run, mlp_forward, mlp_layers

    run = load_run(run_dir)
    layers = mlp_layers(load_keras(run_dir))
    return rollout_observations(run["env"], lambda x: mlp_forward(layers, x), run.get("n_actions"),
                                size, episodes, seed, epsilon)


def rollout_observations(env_id: str, weights, n_actions: int | None = None, size: int = 1000,
                         episodes: int = 10, seed: int = 0,
                         epsilon: float = CALIBRATION_EPSILON) -> np.ndarray:
    """`size` observations from epsilon-greedy rollouts of a policy network.

    `weights`: the [W1, b1, ...] of a relu MLP Q-network, or any callable observation batch ->
    network outputs (Q-values, logits or a deterministic actor's actions; see
    envs.output_to_action). With probability `epsilon` a uniformly random action is taken
    instead. Runs at least `episodes` episodes (more if they give fewer than `size`
    observations), on seeds CALIBRATION_SEED_BASE + 1000 * seed + k, then subsamples `size`."""
    from .envs import make_env, output_to_action, run_episode
    from .train import mlp_q_values

    if size <= 0 or episodes <= 0:
        raise QuarlError(f"calibration needs positive size and episodes, got {size} and {episodes}")
    forward = weights if callable(weights) else (lambda x: mlp_q_values(weights, x))
    rng = np.random.default_rng(seed)
    env = make_env(env_id)
    space = env.gym_env.action_space

    def act(obs: np.ndarray):
        if rng.random() < epsilon:
            if hasattr(space, "n"):
                return int(space.start) + int(rng.integers(int(space.n)))
            return rng.uniform(space.low, space.high).astype(space.dtype)
        return output_to_action(forward(obs[None])[0], space)

    chunks, count, k = [], 0, 0
    while k < episodes or count < size:
        _, obs = run_episode(env, act, CALIBRATION_SEED_BASE + 1000 * seed + k)
        chunks.append(obs)
        count += len(obs)
        k += 1
    env.close()
    observations = np.concatenate(chunks).astype(np.float32)
    pick = np.sort(rng.choice(len(observations), size=size, replace=False))
    return observations[pick]


# ------------------------------------------------------------------------------- conversion
def quantize(run_dir: Path, scheme: str, calib_size: int = 1000, calib_episodes: int = 10,
             seed: int = 0, verbose: bool = True, qat: dict | None = None,
             distill: dict | None = None) -> Path:
    """Convert the run's network with `scheme`; returns the path of RUN/models/<scheme>.tflite.

    `qat`: options of qat.QATConfig for the qat-int8 scheme (e.g. {"steps": 2000});
    `distill`: options of qat.DistillConfig for qat-distill-int8."""
    if scheme not in SCHEMES:
        raise QuarlError(f"unknown quantization scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    from .train import load_keras, load_run

    run_dir = Path(run_dir)
    spec = SCHEMES[scheme]
    if spec.argmax_head_only:
        from .remedies import is_argmax_head
        env_id = load_run(run_dir)["env"]
        if not is_argmax_head(env_id):
            raise QuarlError(f"scheme {scheme} applies to discrete-action policies (argmax of "
                             f"the outputs); {env_id} has continuous actions")
    model = load_keras(run_dir)
    if spec.prepare is not None:
        model = spec.prepare(model)
    calibration = None
    if spec.needs_calibration:
        calibration = collect_calibration(run_dir, calib_size, calib_episodes, seed)
        np.save(run_dir / "calibration.npy", calibration)
    if scheme == "qat-int8":
        from .qat import qat_finetune
        model = qat_finetune(run_dir, calibration, seed=seed, progress=verbose, **(qat or {}))
    elif scheme == "qat-distill-int8":
        from .qat import qat_distill
        model = qat_distill(run_dir, calibration, seed=seed, progress=verbose, **(distill or {}))

    flatbuffer = convert_keras(model, scheme, calibration)
    if spec.finish is not None:
        flatbuffer = spec.finish(flatbuffer)

    out = run_dir / "models" / f"{scheme}.tflite"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(flatbuffer)
    if verbose:
        print(f"{scheme:>6}: {out} {len(flatbuffer):,} B")
    return out


@contextlib.contextmanager
def _converter_log():
    """The converter's C++ side prints pages of MLIR statistics straight to fd 2: send them to a
    temporary file, and show its tail only if the conversion fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield log
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def convert_keras(model, scheme: str, calibration: np.ndarray | None = None) -> bytes:
    """One Keras model -> .tflite bytes with `scheme` (calibration for the integer schemes)."""
    import tensorflow as tf
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    SCHEMES[scheme].convert(converter, calibration)
    with _converter_log() as log:
        try:
            return converter.convert()
        except Exception as e:  # the converter's errors are long; keep the first line
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
            raise ModelError(f"TFLite conversion ({scheme}) failed: {str(e).splitlines()[0]}"
                             + ("\n  " + "\n  ".join(tail) if tail else "")) from e


# ---------------------------------------------------------------------------------- running
def _interpreter(model_path: Path):
    from .reference import tflite_runtime_interpreter
    return tflite_runtime_interpreter(model_path)


def model_ops(model_path: Path) -> list[str]:
    """Builtin op names of a .tflite model, in execution order."""
    return [op["op_name"] for op in _interpreter(model_path)._get_ops_details()]


def model_tensors(model_path: Path) -> list[dict]:
    """tflite-runtime tensor details (name, dtype, shape, quantization_parameters, ...)."""
    return _interpreter(model_path).get_tensor_details()


def tflite_runner(model_path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """A callable observation (float32 [*obs_shape]) -> model output (float32 [n_out]).

    Runs the model with tflite_runtime; an integer input is quantized and an integer output
    dequantized with the tensors' scale and zero point."""
    interpreter = _interpreter(model_path)
    inp = interpreter.get_input_details()[0]
    outp = interpreter.get_output_details()[0]
    in_dtype, out_dtype = np.dtype(inp["dtype"]), np.dtype(outp["dtype"])
    in_scale, in_zero = inp["quantization"]
    out_scale, out_zero = outp["quantization"]
    in_shape = tuple(inp["shape"])

    def run(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(in_shape)
        if np.issubdtype(in_dtype, np.integer):
            info = np.iinfo(in_dtype)
            x = np.clip(np.round(x / in_scale) + in_zero, info.min, info.max).astype(in_dtype)
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        y = interpreter.get_tensor(outp["index"])[0]
        if np.issubdtype(out_dtype, np.integer):
            y = (y.astype(np.float32) - out_zero) * out_scale
        return y.astype(np.float32)

    run.input_details, run.output_details = inp, outp
    return run


# ------------------------------------------------------------------ n-bit fake quantization
# QuaRL's sweep: weights and activations fake-quantized to n bits (2..8) with min/max ranges,
# the number of levels really restricted to 2**n. Computed in numpy, bit-for-bit the arithmetic
# of tf.quantization.fake_quant_with_min_max_vars (narrow_range=False): the range is nudged so
# that 0 is exactly representable, values are clamped to it and rounded half up.
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
    """A kernel [in, out] fake-quantized with its own min/max (per output channel if asked)."""
    w = np.asarray(w, np.float32)
    if per_channel:
        return fake_quant(w, bits, np.minimum(w.min(axis=0, keepdims=True), 0),
                          np.maximum(w.max(axis=0, keepdims=True), 0))
    return fake_quant(w, bits, min(float(w.min()), 0.0), max(float(w.max()), 0.0))


def activation_ranges(layers, calibration: np.ndarray) -> list[tuple[float, float]]:
    """(min, max) of the input and of each layer's output on `calibration` (float network),
    widened to hold 0 as TFLite and tfmot do (else TF's nudging would shift the whole grid:
    Q-values in [62, 114] would be clamped to [0, 52])."""
    from .train import mlp_forward
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
    from .train import ACTIVATIONS
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


def nbit_sweep(run_dir: Path, bits=range(2, 9), seeds=range(20), calib_size: int = 1000,
               modes=("weights+activations", "weights"), per_channel: bool = False) -> list[dict]:
    """QuaRL's n-bit sweep of a run: greedy return (and agreement with fp32 on the states fp32
    visits) on test `seeds` for each bit width and mode; the first row is fp32."""
    from .analysis import compare_outputs
    from .envs import make_gym, play_batched
    from .train import load_keras, load_run, mlp_forward, mlp_layers

    run_dir = Path(run_dir)
    env_id = load_run(run_dir)["env"]
    space = make_gym(env_id).action_space
    layers = mlp_layers(load_keras(run_dir))
    calibration = collect_calibration(run_dir, calib_size, seed=0)
    seeds = list(seeds)

    def ref(x):
        return mlp_forward(layers, x)

    ref_returns, states = play_batched(env_id, ref, seeds, record=True)
    rows = [{"mode": "fp32", "bits": 32, "mean_return": float(np.mean(ref_returns)),
             "std_return": float(np.std(ref_returns)), "agreement": 1.0}]
    ref_out = ref(states)
    for mode in modes:
        if mode not in ("weights+activations", "weights", "activations"):
            raise QuarlError(f"unknown sweep mode {mode!r}; known: weights+activations, weights, "
                             "activations")
        for n in bits:
            f = fake_quant_forward(layers, calibration, None if mode == "activations" else n,
                                   None if mode == "weights" else n, per_channel)
            returns, _ = play_batched(env_id, f, seeds)
            row = {"mode": mode, "bits": int(n), "mean_return": float(np.mean(returns)),
                   "std_return": float(np.std(returns))}
            row.update(compare_outputs(ref_out, f(states), space))
            rows.append(row)
    return rows
