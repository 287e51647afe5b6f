"""Golden references on the host: TF Lite Micro's interpreter (the `tflite-micro` package) for
bit-exactness, tflite-runtime for policy evaluation."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import ModelError, QuarlError


def io_counts(model_path: Path) -> tuple[int, int]:
    """Number of inputs and outputs of the model's main subgraph (from the flatbuffer)."""
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    try:
        model = schema.Model.GetRootAs(Path(model_path).read_bytes(), 0)
        sub = model.Subgraphs(0)
        return sub.InputsLength(), sub.OutputsLength()
    except Exception as e:
        raise ModelError(f"{model_path} is not a valid .tflite model: {e}") from None


class TFLMReference:
    """Runs a .tflite with TF Lite Micro's reference kernels, one sample at a time."""

    def __init__(self, model_path: Path):
        from tflite_micro.python.tflite_micro import runtime
        try:
            self.interp = runtime.Interpreter.from_bytes(Path(model_path).read_bytes())
        except Exception as e:  # the wrapper raises RuntimeError / ValueError with TFLM's words
            raise ModelError(f"TF Lite Micro cannot load {model_path}: {e}") from None
        n_in, n_out = io_counts(model_path)
        self.inputs = [self.interp.get_input_details(i) for i in range(n_in)]
        self.outputs = [self.interp.get_output_details(i) for i in range(n_out)]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for i, (x, d) in enumerate(zip(inputs, self.inputs)):
            self.interp.set_input(np.asarray(x, dtype=d["dtype"]).reshape(d["shape"]), i)
        self.interp.invoke()
        return [np.array(self.interp.get_output(i)) for i in range(len(self.outputs))]


def tflite_runtime_interpreter(model_path: Path):
    """A tflite-runtime Interpreter with its builtin kernels only (no XNNPACK delegate, so the
    ops that run are the model's own), tensors allocated."""
    from tflite_runtime.interpreter import Interpreter, OpResolverType
    model_path = Path(model_path)
    if not model_path.is_file():
        raise QuarlError(f"no model at {model_path}")
    try:
        interpreter = Interpreter(
            model_path=str(model_path),
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        raise ModelError(f"tflite-runtime cannot load {model_path}: {e}") from None
    return interpreter


class TFLiteRuntime:
    """Runs a .tflite with tflite-runtime (the interpreter an embedded Linux board would use)."""

    def __init__(self, model_path: Path):
        self.interp = tflite_runtime_interpreter(model_path)
        self.inputs = self.interp.get_input_details()
        self.outputs = self.interp.get_output_details()

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for x, d in zip(inputs, self.inputs):
            self.interp.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]).reshape(d["shape"]))
        self.interp.invoke()
        return [self.interp.get_tensor(d["index"]).copy() for d in self.outputs]
