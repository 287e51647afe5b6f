"""Convert a trained run's Q-network (RUN/qnet.keras) to TFLite, one file per scheme.

    RUN/models/<scheme>.tflite
    RUN/calibration.npy          observations used to calibrate the integer schemes

Schemes (SCHEMES maps each name to its converter):
  fp32  plain float32 conversion
  fp16  float16 weights (dequantized to float32 at load time), float32 compute and I/O
  int8  full integer: every op int8 with float32 input/output, so the graph is
        QUANTIZE -> FULLY_CONNECTED... -> DEQUANTIZE; weights int8 per-tensor, biases int32

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


SCHEMES: dict[str, Scheme] = {
    "fp32": Scheme(_fp32, False, "float32"),
    "fp16": Scheme(_fp16, False, "float16 weights, float32 compute"),
    "int8": Scheme(_int8, True, "full integer int8, float32 I/O"),
}


def scheme_names() -> list[str]:
    return list(SCHEMES)


# ------------------------------------------------------------------------------ calibration
def collect_calibration(run_dir: Path, size: int = 1000, episodes: int = 10, seed: int = 0,
                        epsilon: float = CALIBRATION_EPSILON) -> np.ndarray:
    """`size` observations from epsilon-greedy rollouts of the run's Q-network (see
    rollout_observations)."""
    from .train import load_keras, load_run

    run = load_run(run_dir)
    return rollout_observations(run["env"], load_keras(run_dir).get_weights(), int(run["n_actions"]),
                                size, episodes, seed, epsilon)


def rollout_observations(env_id: str, weights: list[np.ndarray], n_actions: int, size: int = 1000,
                         episodes: int = 10, seed: int = 0,
                         epsilon: float = CALIBRATION_EPSILON) -> np.ndarray:
    """`size` observations from epsilon-greedy rollouts of the MLP Q-network `weights`.

    Runs at least `episodes` episodes (more if they give fewer than `size` observations), on
    seeds CALIBRATION_SEED_BASE + 1000 * seed + k, then subsamples `size` of them."""
    from .envs import make_env, run_episode
    from .train import mlp_q_values

    if size <= 0 or episodes <= 0:
        raise QuarlError(f"calibration needs positive size and episodes, got {size} and {episodes}")
    rng = np.random.default_rng(seed)
    env = make_env(env_id)

    def act(obs: np.ndarray) -> int:
        if rng.random() < epsilon:
            return int(rng.integers(n_actions))
        return int(np.argmax(mlp_q_values(weights, obs[None])[0]))

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
             seed: int = 0, verbose: bool = True) -> Path:
    """Convert RUN/qnet.keras with `scheme`; returns the path of RUN/models/<scheme>.tflite."""
    if scheme not in SCHEMES:
        raise QuarlError(f"unknown quantization scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    from .train import load_keras

    run_dir = Path(run_dir)
    spec = SCHEMES[scheme]
    model = load_keras(run_dir)
    calibration = None
    if spec.needs_calibration:
        calibration = collect_calibration(run_dir, calib_size, calib_episodes, seed)
        np.save(run_dir / "calibration.npy", calibration)

    flatbuffer = convert_keras(model, scheme, calibration)

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
