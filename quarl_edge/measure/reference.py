"""Golden references on the host: TF Lite Micro's interpreter (the `tflite-micro` package) for
bit-exactness, tflite-runtime for policy evaluation, and the reference a board's outputs are
compared with (`host_reference`: either of them, or an int8-acc model's accumulator readout)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..core.errors import ModelError, QuarlError
from ..converters.tflite_model import load
from ..core.noise import captured_stderr, tail
from ..core import tflite_host
from ..quant.remedies import READOUT_ACCUMULATORS, AccumulatorReadoutReference, readout_metadata


def check_model_file(model_path: Path) -> None:
    """Read the .tflite with our own flatbuffer reader (pure Python, quarl_edge/converters/tflite_model.py)
    before a native interpreter gets it: tflite-runtime and TF Lite Micro trust the file, and a
    corrupt one crashes them (segmentation fault) or fails deep inside (UnicodeDecodeError);
    the reader refuses it with a ModelError naming the file."""
    load(model_path)


def check_env_fits_model(env_id: str, model_path: Path, where) -> None:
    """The environment's observations fit the model's one input (the same number of values),
    checked before a board is built or started: a run.json whose env is not the model's."""
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except (gym.error.Error, ImportError) as e:   # an unknown id, a missing box2d or mujoco
        raise QuarlError(f"{where}: env {env_id!r} cannot be made: {e}") from None
    shape = tuple(env.observation_space.shape or ())
    env.close()
    inputs = load(model_path).input_tensors()
    if len(inputs) != 1:
        raise ModelError(f"{model_path} has {len(inputs)} inputs; an observation is one")
    values, want = int(np.prod(shape)), int(np.prod(inputs[0].shape))
    if values != want:
        raise QuarlError(f"{where}: {env_id} observes shape {shape} ({values} values), but "
                         f"{model_path} takes input {list(inputs[0].shape)} ({want} values): "
                         "the env does not fit the model")


def io_counts(model_path: Path) -> tuple[int, int]:
    """Number of inputs and outputs of the model's main subgraph (from the flatbuffer)."""
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    try:
        model = schema.Model.GetRootAs(Path(model_path).read_bytes(), 0)
        sub = model.Subgraphs(0)
        return sub.InputsLength(), sub.OutputsLength()
    except Exception as e:
        raise ModelError(f"{model_path} is not a valid .tflite model: {e}") from None


# tflite-micro's Python interpreter gives a model an arena of 10x its file size by default,
# which a model with large activations and few weights outgrows (a 2.4 kB int8 CONV_2D +
# MAX_POOL_2D on 48x48x8 needs 37 kB): the arena is doubled until the model loads, up to
# TFLM_MAX_ARENA, so that "cannot load" means TF Lite Micro cannot run the model at all.
TFLM_MAX_ARENA = 256 << 20


def tflm_interpreter(data: bytes, what: str):
    """A tflite-micro Interpreter for the model bytes `data`, with the smallest arena of the
    default, 20x, 40x, ... the file size that it allocates in; ModelError with TF Lite Micro's
    words when none up to TFLM_MAX_ARENA does (or the model is refused for another reason)."""
    from tflite_micro.python.tflite_micro import runtime

    arena = None                    # the wrapper's default first: 10x the file size
    while True:
        with captured_stderr() as log:   # TFLM prints each failed allocation on fd 2
            try:
                return runtime.Interpreter.from_bytes(data, arena_size=arena)
            except Exception as e:  # RuntimeError / ValueError with TFLM's words
                error, said = e, tail(log, 3)
        arena = 20 * len(data) if arena is None else 2 * arena
        allocation = "allocate" in str(error) or any("Requested" in ln for ln in said)
        if not allocation or arena > TFLM_MAX_ARENA:
            raise ModelError(f"TF Lite Micro cannot load {what}: {error}"
                             + ("; " + " / ".join(said) if said else "")) from None


class TFLMReference:
    """Runs a .tflite with TF Lite Micro's reference kernels, one sample at a time."""

    def __init__(self, model_path: Path):
        check_model_file(model_path)
        self.interp = tflm_interpreter(Path(model_path).read_bytes(), str(model_path))
        n_in, n_out = io_counts(model_path)
        self.inputs = [self.interp.get_input_details(i) for i in range(n_in)]
        self.outputs = [self.interp.get_output_details(i) for i in range(n_out)]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for i, (x, d) in enumerate(zip(inputs, self.inputs)):
            self.interp.set_input(np.asarray(x, dtype=d["dtype"]).reshape(d["shape"]), i)
        self.interp.invoke()
        return [np.array(self.interp.get_output(i)) for i in range(len(self.outputs))]

    def reset(self) -> None:
        """Zero the model's variable tensors (an LSTM's state), as a board's RESET does."""
        self.interp.reset()


# tflite-runtime has two sets of builtin kernels. "optimized" (its default, what an embedded Linux
# board runs) computes int8 FULLY_CONNECTED through its GEMM backends and int8 TANH/LOGISTIC
# from lookup tables: they round differently from the reference arithmetic, and which backend
# runs depends on the host CPU. "reference" (OpResolverType.BUILTIN_REF) is TFLite's reference
# kernels: the integer arithmetic of TF Lite Micro's kernels (which the firmware is bit-exact
# with) but for the FULLY_CONNECTED multiplier, which tflite-runtime 2.14 takes from the float32
# product of the input and filter scales and TFLM from their double product
# (tests/test_qmath.py): their outputs differ where an accumulator lies that near a rounding
# boundary. For int16x8 they differ more often: TFLM requantizes a FULLY_CONNECTED's int64
# accumulator with a 15-bit multiplier, tflite-runtime 2.14 in 32 bits (one output step).
TFLITE_KERNELS = ("optimized", "reference")


def tflite_runtime_interpreter(model_path: Path, kernels: str = "optimized"):
    """A tflite-runtime Interpreter with its builtin kernels only (no XNNPACK delegate, so the
    ops that run are the model's own), tensors allocated. `kernels`: "optimized" (the default
    kernels) or "reference" (TFLite's reference kernels, see TFLITE_KERNELS)."""
    if kernels not in TFLITE_KERNELS:
        raise ValueError(f"kernels must be one of {TFLITE_KERNELS}, not {kernels!r}")
    model_path = Path(model_path)
    if not model_path.is_file():
        raise QuarlError(f"no model at {model_path}")
    check_model_file(model_path)
    try:
        return _open_interpreter(model_path, kernels, None)
    except (ValueError, RuntimeError, MemoryError) as e:
        error = e
        # an op version tflite-runtime 2.14 does not know (qat-int8x4's int4 FULLY_CONNECTED):
        # the same model on LiteRT
        newer = tflite_host.newer_runtime(e)
    if newer is not None:
        try:
            return _open_interpreter(model_path, kernels, newer)
        except (ValueError, RuntimeError, MemoryError) as e:
            error = e
    raise ModelError(f"{model_path} is not a valid TFLite model "
                     f"({tflite_host.runtime_name()}: {type(error).__name__}: {error})") from None


def _open_interpreter(model_path: Path, kernels: str, runtime: str | None):
    """The interpreter of `runtime` (None: the chosen one) on the model, tensors allocated and
    their names decoded (a corrupt one is a UnicodeDecodeError, a ValueError)."""
    interpreter = tflite_host.Interpreter(
        model_path=str(model_path), runtime=runtime,
        experimental_op_resolver_type=tflite_host.resolver(kernels, runtime))
    interpreter.allocate_tensors()
    for details in (interpreter.get_tensor_details, interpreter.get_input_details,
                    interpreter.get_output_details):
        details()
    return interpreter


class TFLiteRuntime:
    """Runs a .tflite with tflite-runtime (the interpreter an embedded Linux board would use),
    with its optimized kernels or its reference kernels (`kernels`, see TFLITE_KERNELS)."""

    def __init__(self, model_path: Path, kernels: str = "optimized"):
        self.interp = tflite_runtime_interpreter(model_path, kernels)
        self.inputs = self.interp.get_input_details()
        self.outputs = self.interp.get_output_details()

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for x, d in zip(inputs, self.inputs):
            self.interp.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]).reshape(d["shape"]))
        self.interp.invoke()
        return [self.interp.get_tensor(d["index"]).copy() for d in self.outputs]

    def reset(self) -> None:
        """Zero the model's variable tensors (an LSTM's state), as a board's RESET does."""
        self.interp.reset_all_variables()


def has_state(model_path: Path) -> bool:
    """Whether the model keeps state from one invoke to the next: a variable tensor (TFLite's
    isVariable, e.g. an LSTM's hidden and cell state). Such a model's episodes start with its
    state zeroed: RESET on a board, reset() on the host references."""
    return any(t.is_variable for t in load(model_path).tensors)


def micro_reference(model_path: Path):
    """TF Lite Micro's reference for `model_path` (what the firmware is bit-exact with), or None
    when TFLM cannot run the model (fp16 and hybrid models). tflite-runtime's own int8 kernels
    differ from TFLM's in places (int8 TANH and LOGISTIC round differently), so a board's
    returns are checked against this one."""
    try:
        return host_reference(model_path, micro=True)
    except QuarlError:
        return None


def host_reference(model_path: Path, micro: bool = False, kernels: str = "optimized"):
    """The reference a board's outputs are compared with: TF Lite Micro (micro=True) or
    tflite-runtime (with its `kernels`) for a plain model, the accumulator readout for an
    int8-acc model."""
    if readout_metadata(model_path) == READOUT_ACCUMULATORS:
        return AccumulatorReadoutReference(model_path, kernels="micro" if micro else kernels)
    return TFLMReference(model_path) if micro else TFLiteRuntime(model_path, kernels)


# ---------------------------------------------------------------------------------- running
def _interpreter(model_path: Path):
    return tflite_runtime_interpreter(model_path)


def model_ops(model_path: Path) -> list[str]:
    """Builtin op names of a .tflite model, in execution order."""
    return [op["op_name"] for op in _interpreter(model_path)._get_ops_details()]


def model_tensors(model_path: Path) -> list[dict]:
    """tflite-runtime tensor details (name, dtype, shape, quantization_parameters, ...)."""
    return _interpreter(model_path).get_tensor_details()


def _quantized(x: np.ndarray, detail: dict) -> np.ndarray:
    """float32 `x` as the interpreter tensor `detail` takes it: an integer tensor gets
    round(x / scale) + zero point, saturated to its type."""
    dtype = np.dtype(detail["dtype"])
    if not np.issubdtype(dtype, np.integer):
        return x
    scale, zero = detail["quantization"]
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(dtype)


def _dequantized(y: np.ndarray, detail: dict) -> np.ndarray:
    """An interpreter output as float32: an integer tensor is (y - zero point) * scale."""
    if np.issubdtype(np.dtype(detail["dtype"]), np.integer):
        scale, zero = detail["quantization"]
        y = (y.astype(np.float32) - zero) * scale
    return y.astype(np.float32)


def tflite_runner(model_path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """A callable observation (float32 [*obs_shape]) -> model output (float32 [n_out]).

    Runs the model with tflite_runtime; an integer input is quantized and an integer output
    dequantized with the tensors' scale and zero point."""
    interpreter = _interpreter(model_path)
    inp = interpreter.get_input_details()[0]
    outp = interpreter.get_output_details()[0]
    in_shape = tuple(inp["shape"])

    def run(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(in_shape)
        interpreter.set_tensor(inp["index"], _quantized(x, inp))
        interpreter.invoke()
        return _dequantized(interpreter.get_tensor(outp["index"])[0], outp)

    run.input_details, run.output_details = inp, outp
    return run


def tflite_batch_runner(model_path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """`tflite_runner` for a batch: observations [k, *obs_shape] -> outputs [k, n_out], in one
    invoke (the input resized to k rows when k changes). For a model whose batch axis is free
    (a converted Keras model's is); each row is computed as it would be alone."""
    interpreter = _interpreter(model_path)
    inp = interpreter.get_input_details()[0]
    outp = interpreter.get_output_details()[0]
    row = tuple(int(d) for d in inp["shape"][1:])
    rows = [int(inp["shape"][0])]

    def run(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape((-1, *row))
        if len(x) != rows[0]:
            interpreter.resize_tensor_input(inp["index"], [len(x), *row])
            interpreter.allocate_tensors()
            rows[0] = len(x)
        interpreter.set_tensor(inp["index"], _quantized(x, inp))
        interpreter.invoke()
        return _dequantized(interpreter.get_tensor(outp["index"]), outp).reshape(len(x), -1)

    return run
