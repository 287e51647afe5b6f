"""Shared test helpers: build/convert small models, generate C, compile and run it, run TFLM.

    model = random_mlp(seed, input_dim, widths, activations, weight_scale)
    tfl = convert(model, "int8")              # "float", "int8", "int8_io", "dynamic", "fp16"
    exe = build_generated(tfl_path, tmp_dir)  # cgen + gcc -> (GeneratedModel, driver path)
    out = run_driver(exe, records)            # raw bytes in, raw bytes out
    ref = tflm_run(tfl_bytes, inputs)         # golden outputs from the tflite-micro interpreter

`fc_model(...)` / `affine_model(...)` / `op_model(...)` write tiny .tflite files directly with the
flatbuffers schema, for exact control over scales, zero points and shapes (helpers_tflite.py,
re-exported here).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from quarl_edge.core.tfcompat import configure_converter  # noqa: E402

# the hand-built flatbuffers, re-exported: the tests import them from here
from helpers_tflite import (affine_model, build_tflite, fc_model, op_model,  # noqa: E402,F401
                            quant, schema, tensor, unary_model)

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "firmware" / "core"
EXAMPLE_RUN = ROOT / "examples" / "cartpole_dqn"


def cli(*args, expect: int = 0) -> subprocess.CompletedProcess:
    """`quarl-edge ARGS...` in a subprocess; asserts its exit code (stderr tail on failure)."""
    import sys
    proc = subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == expect, proc.stderr[-3000:]
    return proc


def cli_json(*args):
    """`quarl-edge ARGS... --json`, parsed."""
    import json
    return json.loads(cli(*args, "--json").stdout)


def copy_example_tree(dest: Path) -> Path:
    """The whole shipped example run (models, calibration; not its build/ or results/) at dest."""
    shutil.copytree(EXAMPLE_RUN, dest, ignore=shutil.ignore_patterns("build", "results"))
    return dest


def copy_example_run(dest: Path) -> Path:
    """`dest` made a run directory holding a copy of the shipped example run's trained network
    (run.json, qnet.keras): tests quantize and fine-tune there, never in examples/."""
    assert (EXAMPLE_RUN / "qnet.keras").is_file(), "the shipped example run is missing"
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("run.json", "qnet.keras"):
        shutil.copy(EXAMPLE_RUN / name, dest / name)
    return dest
def cached_example_study(out: Path, boards: list[str], name: str = "farm",
                         schemes=("fp32", "int8", "int16x8")) -> Path:
    """OUT/runs/dqn-CartPole-v1-s0 = the example run, marked as trained by this study (its
    hyperparameters are the task's options, so nothing is retrained); returns the TOML."""
    import json
    schemes = list(schemes)
    run = out / "runs" / "dqn-CartPole-v1-s0"
    shutil.copytree(EXAMPLE_RUN, run, ignore=shutil.ignore_patterns("build", "results"))
    hp = json.loads((run / "run.json").read_text())["hyperparameters"]
    options = {k: v for k, v in hp.items() if k != "steps" and v is not None}
    (run / "study-train.json").write_text(json.dumps(
        {"algo": "dqn", "env": "CartPole-v1", "seed": 0, "steps": hp["steps"],
         "options": options}) + "\n")
    toml = (f'[study]\nname = "{name}"\nseeds = [0]\nschemes = {json.dumps(schemes)}\n'
            f"episodes = 3\ncalib_size = 100\nboards = {json.dumps(boards)}\nbench_n = 20\n"
            f'validate_n = 32\n\n[[task]]\nalgo = "dqn"\nenv = "CartPole-v1"\n'
            f"steps = {hp['steps']}\n[task.options]\n"
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))
    cfg = out.parent / f"{name}.toml"
    cfg.write_text(toml)
    return cfg


DRIVER = ROOT / "tests" / "c" / "run_model.c"
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", f"-I{CORE}"]


def gcc() -> str:
    cc = shutil.which("gcc")
    if cc is None:
        import pytest
        pytest.skip("gcc is not installed")
    return cc


def core_sources() -> list[Path]:
    return [CORE / "requant.c", CORE / "qe_model_state.c"] + sorted((CORE / "kernels").glob("*.c"))


def compile_c(sources, out: Path, extra: list[str] | None = None) -> Path:
    cmd = [gcc(), *CFLAGS, *(extra or []), *map(str, sources), "-o", str(out), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise AssertionError(f"gcc failed:\n{' '.join(cmd)}\n{res.stderr}")
    return out


_KERNEL_OBJECTS: dict[str, list[Path]] = {}


def kernel_objects() -> list[Path]:
    """The core kernels compiled once per test process (keyed by their sources' contents), so
    each generated model only compiles its own model.c and the driver."""
    import hashlib
    import tempfile
    srcs = core_sources()
    h = hashlib.sha256(" ".join(CFLAGS).encode())
    for src in srcs + sorted(CORE.glob("*.h")) + sorted((CORE / "kernels").glob("*.h")):
        h.update(src.name.encode() + src.read_bytes())
    key = h.hexdigest()[:16]
    if key not in _KERNEL_OBJECTS:
        d = Path(tempfile.mkdtemp(prefix=f"qe-kernels-{key}-"))
        objs = []
        for src in srcs:
            obj = d / (src.stem + ".o")
            cmd = [gcc(), *CFLAGS, "-c", str(src), "-o", str(obj)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise AssertionError(f"gcc failed:\n{' '.join(cmd)}\n{res.stderr}")
            objs.append(obj)
        _KERNEL_OBJECTS[key] = objs
    return _KERNEL_OBJECTS[key]


def compile_driver(model_dir: Path, exe: Path | None = None) -> Path:
    """gcc the generated model.c + core kernels + tests/c/run_model.c into a driver binary."""
    model_dir = Path(model_dir)
    return compile_c([model_dir / "model.c", DRIVER, *kernel_objects()], exe or model_dir / "run_model")


def build_generated(tflite_path, out_dir, name: str | None = None):
    """Generate C for a .tflite and compile the batch driver: (GeneratedModel, exe path)."""
    from quarl_edge.converters import cgen
    gm = cgen.generate(tflite_path, out_dir, name=name)
    return gm, compile_driver(Path(out_dir))


def run_driver(exe: Path, records: bytes, reset_every: int = 0) -> bytes:
    """Run the batch driver; reset_every > 0: qe_model_reset_state() before every N-th record."""
    args = ["--reset-every", str(reset_every)] if reset_every else []
    res = subprocess.run([str(exe), *args], input=records, capture_output=True, timeout=60)
    if res.returncode != 0:
        raise AssertionError(f"{exe} exited {res.returncode}: {res.stderr.decode(errors='replace')}")
    return res.stdout


def tflm_run(model_bytes: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Golden outputs: each record (the array for input 0) through the tflite-micro host
    interpreter; returns the first output of each record."""
    from tflite_micro.python.tflite_micro import runtime
    it = runtime.Interpreter.from_bytes(bytes(model_bytes))
    outs = []
    for x in inputs:
        it.set_input(x, 0)
        it.invoke()
        outs.append(np.array(it.get_output(0), copy=True))
    return outs


# ------------------------------------------------------------------- Keras models
def random_mlp(seed: int, input_dim: int, widths: list[int], activations: list[str],
               weight_scale: float = 1.0, use_bias: list[bool] | None = None):
    """A Sequential MLP with deterministic random weights scaled by `weight_scale`."""
    import tensorflow as tf
    tf.keras.backend.clear_session()     # layer names (input_1, dense ...) independent of test order
    tf.keras.utils.set_random_seed(seed)
    use_bias = use_bias or [True] * len(widths)
    layers = [tf.keras.Input((input_dim,))]
    for w, a, b in zip(widths, activations, use_bias):
        layers.append(tf.keras.layers.Dense(w, activation=None if a == "none" else a, use_bias=b))
    model = tf.keras.Sequential(layers)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        ws = layer.get_weights()
        new = [rng.standard_normal(ws[0].shape).astype(np.float32) * weight_scale / np.sqrt(ws[0].shape[0])]
        if len(ws) > 1:
            new.append(rng.standard_normal(ws[1].shape).astype(np.float32) * 0.5)
        layer.set_weights(new)
    return model


def convert(model, mode: str, calib: np.ndarray | None = None) -> bytes:
    """Convert a Keras model with the real TFLite converter.

    mode: "float" (no quantization), "int8" (full int8, float I/O), "int8_io" (full int8, int8
    I/O), "int16x8" (int16 activations, int8 weights, int64 bias, float I/O), "dynamic" (dynamic-range: int8 weights, float activations), "fp16" (float16 weights).
    `calib` is the representative dataset (rows of the input) for the int8 modes.
    """
    import tensorflow as tf
    c = configure_converter(tf.lite.TFLiteConverter.from_keras_model(model))
    if mode != "float":
        c.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode in ("int8", "int8_io", "int16x8"):
        if calib is None:
            calib = np.random.default_rng(0).standard_normal((64, *model.input_shape[1:]))
        calib = np.asarray(calib, np.float32)

        def rep():
            for row in calib:
                yield [row[None, :]]
        c.representative_dataset = rep
        c.target_spec.supported_ops = [
            tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
            if mode == "int16x8" else tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if mode == "int8_io":
            c.inference_input_type = tf.int8
            c.inference_output_type = tf.int8
    elif mode == "fp16":
        c.target_spec.supported_types = [tf.float16]
    elif mode not in ("float", "dynamic"):
        raise ValueError(mode)
    return c.convert()


def tflm_arena(model_bytes: bytes, input_arrays=None) -> dict:
    """TF Lite Micro's own arena use for a model, from the RecordingMicroAllocator report
    (`Interpreter.print_allocations`, written to stderr by C++: captured through fd 2).

    Returns {"head": ..., "tail": ..., "total": ...} in bytes. `head` is the non-persistent
    section, where TFLM's greedy planner places activation tensors and scratch buffers: the
    figure comparable to our planned arena. `tail` holds TFLM's persistent bookkeeping
    (tensor structs, node structs, kernel op data) that generated code keeps in flash instead."""
    import re
    import sys
    import tempfile

    from tflite_micro.python.tflite_micro import runtime
    it = runtime.Interpreter.from_bytes(bytes(model_bytes))
    for k, d in enumerate(it.get_input_details(i) for i in range(1)):
        x = np.zeros(d["shape"], d["dtype"]) if input_arrays is None else input_arrays[k]
        it.set_input(x, k)
    it.invoke()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            it.print_allocations()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out = {}
    for key in ("total", "head", "tail"):
        m = re.search(rf"Arena allocation {key} (\d+) bytes", text)
        if m is None:
            raise AssertionError(f"no 'Arena allocation {key}' in TFLM's report:\n{text}")
        out[key] = int(m.group(1))
    return out


def tflm_run_multi(model_bytes: bytes, records: list[list[np.ndarray]],
                   reset_every: int = 0) -> list[list[np.ndarray]]:
    """Like tflm_run for models with several inputs and outputs: each record is a list of the
    input arrays in graph order; returns, per record, the list of all outputs. One interpreter
    runs every record, so variable tensors (an LSTM's state) carry over from record to record,
    as in the driver; reset_every > 0: Interpreter.reset() (TFLM's MicroInterpreter::Reset,
    variables back to zero) before every N-th record."""
    from tflite_micro.python.tflite_micro import runtime
    # the interpreter's default arena (10x the model's size) is too small for hand-built models
    # with few weights and large activations
    it = runtime.Interpreter.from_bytes(bytes(model_bytes), arena_size=max(10 * len(model_bytes), 1 << 20))
    n_out = len(parse_outputs(model_bytes))
    outs = []
    for n, rec in enumerate(records):
        if reset_every and n % reset_every == 0:
            it.reset()
        for k, x in enumerate(rec):
            it.set_input(x, k)
        it.invoke()
        outs.append([np.array(it.get_output(k), copy=True) for k in range(n_out)])
    return outs


def parse_outputs(model_bytes: bytes) -> list[int]:
    from quarl_edge.converters.tflite_model import parse
    return parse(model_bytes).outputs


def compare_generated(model_bytes: bytes, inputs: list[np.ndarray], workdir, label: str,
                      float_rtol: float = 0.0, reset_every: int = 0) -> dict:
    """Generated C (through tests/c/run_model.c) against the tflite-micro interpreter for a model
    with any number of inputs/outputs. inputs: one array per graph input, each N records.
    Integer outputs must be identical; float outputs bit-identical unless float_rtol > 0."""
    import pytest
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.tflite"
    path.write_bytes(model_bytes)
    gm, exe = build_generated(path, workdir / "gen")
    assert len(inputs) == len(gm.inputs)
    arrs = [np.ascontiguousarray(x, dtype=s.np_dtype).reshape((-1, *s.shape))
            for x, s in zip(inputs, gm.inputs)]
    n = len(arrs[0])
    records = b"".join(b"".join(a[i].tobytes() for a in arrs) for i in range(n))
    raw = run_driver(exe, records, reset_every)
    per = sum(s.nbytes for s in gm.outputs)
    assert len(raw) == n * per
    ref = tflm_run_multi(model_bytes, [[a[i] for a in arrs] for i in range(n)], reset_every)
    got_all = []
    for k, s in enumerate(gm.outputs):
        off = sum(o.nbytes for o in gm.outputs[:k])
        got = np.stack([np.frombuffer(raw[i * per + off:i * per + off + s.nbytes], s.np_dtype)
                        for i in range(n)]).reshape((n, *s.shape))
        r = np.stack([x[k] for x in ref]).reshape(got.shape)
        assert r.dtype == got.dtype, (r.dtype, got.dtype)
        if s.dtype == "float32":
            both_nan = np.isnan(r) & np.isnan(got)
            if float_rtol > 0:
                close = np.isclose(got, r, rtol=float_rtol, atol=0) | both_nan | (got == r)
                bad = ~close
            else:
                bad = (r.view("<u4") != got.view("<u4")) & ~both_nan
            if bad.any():
                diff = np.abs(r.astype(np.float64) - got.astype(np.float64))[bad]
                pytest.fail(f"{label}: output {k}: {bad.sum()} of {bad.size} float outputs differ "
                            f"from TFLM, max abs diff {diff.max():.3g}; first at record "
                            f"{np.argwhere(bad)[0][0]}")
        else:
            bad = r != got
            if bad.any():
                i = np.argwhere(bad)[0][0]
                pytest.fail(f"{label}: output {k}: {bad.sum()} of {bad.size} integer outputs differ "
                            f"from TFLM; record {i}: tflm {r[i].ravel()[:32].tolist()} "
                            f"c {got[i].ravel()[:32].tolist()}")
        got_all.append(got)
    return {"gm": gm, "got": got_all}


def random_cnn(seed: int, input_shape=(16, 16, 2), pool: str = "max", n_actions: int = 4,
               depth_multiplier: int = 1, head: str = "softmax", filters: int = 8,
               pointwise: int = 0, hidden: int = 32):
    """A small CNN policy: conv 3x3 stride 2 (SAME, relu) -> depthwise 3x3 (SAME, relu6) ->
    [conv 1x1 with `pointwise` filters (relu), if pointwise] -> pool ("max", "avg": 2x2; "gap":
    global average = MEAN) -> flatten -> [dense `hidden` relu, if hidden] -> dense n_actions
    with `head` ("softmax" or None)."""
    import tensorflow as tf
    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(seed)
    inp = tf.keras.Input(tuple(input_shape))
    x = tf.keras.layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(inp)
    x = tf.keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=depth_multiplier,
                                        activation="relu6")(x)
    if pointwise:
        x = tf.keras.layers.Conv2D(pointwise, 1, activation="relu")(x)
    if pool == "max":
        x = tf.keras.layers.MaxPool2D(2)(x)
    elif pool == "avg":
        x = tf.keras.layers.AveragePooling2D(2)(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x) if pool == "gap" else tf.keras.layers.Flatten()(x)
    if hidden:
        x = tf.keras.layers.Dense(hidden, activation="relu")(x)
    out = tf.keras.layers.Dense(n_actions, activation=head)(x)
    return tf.keras.Model(inp, out)


def copy_checkout(dest: Path) -> None:
    """The checkout's tracked and untracked, not-ignored files (what tests/test_wheel.py copies)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        ignore = shutil.ignore_patterns(".git", ".venv*", "build", "runs", "*.egg-info",
                                        "__pycache__", ".pytest_cache", ".hypothesis")
        shutil.copytree(ROOT, dest, symlinks=True, dirs_exist_ok=True, ignore=ignore)
        return
    for f in filter(None, out.decode().split("\0")):
        src, dst = ROOT / f, dest / f
        if not src.is_symlink() and not src.is_file():     # deleted in the work tree
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)


def assert_import_refused(p: subprocess.CompletedProcess, words: str, out: Path,
                          marker: Path) -> None:
    """A refused `quarl-edge import ... --out OUT`: exit 2, one line on stderr naming `words`,
    no traceback, nothing at OUT nor its temporary folder beside it, and `marker` (what a
    malicious file would write) never written."""
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not out.exists() and not marker.exists()
    assert not [f for f in out.parent.iterdir() if f.name.startswith(f".{out.name}.import")]


def minatar_keras():
    """The MinAtar DQN's shape (quarl_edge/rl/defaults.py, dqn.py) with random weights (seed 4):
    10x10x4, conv 16 3x3 stride 1 VALID relu, flatten, dense 128 relu, dense 6; and 32 0/1
    calibration frames. benchmarks/speed.py and int4.py measure it (--models minatar)."""
    import tensorflow as tf
    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(4)
    inp = tf.keras.Input((10, 10, 4))
    x = tf.keras.layers.Conv2D(16, 3, strides=1, activation="relu", padding="valid")(inp)
    x = tf.keras.layers.Dense(128, activation="relu")(tf.keras.layers.Flatten()(x))
    model = tf.keras.Model(inp, tf.keras.layers.Dense(6)(x))
    calib = (np.random.default_rng(0).random((32, 10, 10, 4)) > 0.8).astype(np.float32)
    return model, calib
