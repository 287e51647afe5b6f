"""`quarl-edge export`: a run's policy as a C library for the user's own firmware.

    export_library(Path("runs/lander"), "int8", board, "lander", Path("lib/lander"))

writes one folder, at once a plain C99 source tree (src/lander.h, src/*.c), an Arduino library,
a PlatformIO library, a CMake target (an ESP-IDF component under ESP_PLATFORM) and a Zephyr
module (quarl_edge/converters/library_pkg.py), with a README. The C is the generator's model.c and the
kernels it calls, prefixed (quarl_edge/converters/library.py), behind the policy API
(quarl_edge/converters/library_api.py): observation in, action out, as `hil` maps TF Lite Micro's outputs.
Its test vectors (NAME_selftest) are observations of an episode of the env played by TF Lite
Micro itself, with TFLM's outputs.

It lives beside hil because it is hil's policy: the same model, env, action space and action head
(hil_policy), and the same reference (TFLM). The folder is written beside --out and renamed into
place: an error leaves nothing half-written, and an --out that exists must be an earlier export
(its quarl-edge-export.json) unless --force."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError, UnsupportedOpError
from ..core.resources import firmware_dir
from ..core.envs import make_gym, outputs_to_actions
from ..targets.boards import Board
from ..targets.build import expand_flag, kernel_sources
from .hil import hil_policy
from .reference import host_reference
from ..converters.library_api import API_HEADER, Policy, header, wrapper
from ..converters.cgen import generate
from ..converters.library import check_name, library_sources, prefixed
from ..converters.tflite_model import load
from ..converters.library_pkg import package_files

MARKER = "quarl-edge-export.json"
N_VECTORS = 8


def check_out(out: Path, force: bool) -> None:
    """--out may be new, an earlier export, or anything with --force (then replaced whole)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise QuarlError(f"--out {out} exists and is not a folder; choose another --out")
    if out.is_dir() and not (out / MARKER).is_file() and not force:
        raise QuarlError(f"--out {out} exists and is not an earlier export (no {MARKER}); "
                         "choose another --out, or replace it with --force")


def _policy(t, n_out: int):
    space = t.space
    if hasattr(space, "n"):
        return Policy("argmax", int(space.n), start=int(space.start))
    if not hasattr(space, "low") or len(space.shape) == 0:
        raise QuarlError(f"{t.env_id}'s action space {space} is neither Discrete nor Box")
    meta = t.meta or {}
    if t.meta is not None and not meta.get("action_head") and not meta.get("action_space"):
        raise QuarlError(f"{t.home}/run.json records neither action_head nor action_space: "
                         f"which of identity or scale maps the outputs to {t.env_id}'s Box "
                         "actions is unknown; re-import or re-train the run")
    low = np.asarray(space.low, np.float32).reshape(-1)
    high = np.asarray(space.high, np.float32).reshape(-1)
    if low.size != n_out:
        raise QuarlError(f"{t.model} gives {n_out} outputs; {t.env_id} has {low.size} actions")
    return Policy(t.action_head, n_out, low=low.tolist(), high=high.tolist())


def quantized(x: np.ndarray, spec) -> np.ndarray:
    """An observation as the model's input `spec` (TensorSpec) takes it: measure/reference.py's
    _quantized (round half to even of x / scale, plus the zero point, saturated) for an integer
    input, what NAME_act computes in C."""
    x = np.asarray(x, np.float32).reshape(spec.shape)
    if spec.dtype == "float32":
        return x
    info = np.iinfo(np.dtype(spec.np_dtype))
    return np.clip(np.round(x / spec.scale) + spec.zero_point, info.min,
                   info.max).astype(spec.np_dtype)


def dequantized(y: np.ndarray, spec) -> np.ndarray:
    """A model output as float32: (q - zero point) * scale for an integer one."""
    if spec.dtype == "float32":
        return np.asarray(y, np.float32)
    return (np.asarray(y).astype(np.float32) - spec.zero_point) * spec.scale


def test_vectors(t, ins, outs, n: int = N_VECTORS) -> list[tuple[bytes, bytes]]:
    """(input bytes, TFLM's output bytes) for the first `n` observations of an episode (seed 0)
    that TF Lite Micro plays with hil's mapping; a recurrent model's state carries over, as
    NAME_selftest runs them in order from a reset. `ins`, `outs`: the generated model's input
    and output specs."""
    ref = host_reference(t.model, micro=True)
    if hasattr(ref, "reset"):
        ref.reset()
    env = make_gym(t.env_id)
    obs, _ = env.reset(seed=0)
    out = []
    try:
        for _ in range(n):
            x = quantized(obs, ins)
            y = np.asarray(ref.run([x])[0], dtype=outs.np_dtype)
            out.append((x.tobytes(), y.tobytes()))
            a = outputs_to_actions(dequantized(y, outs).reshape(1, -1), t.space, t.action_head)[0]
            obs, _, term, trunc, _ = env.step(a.item() if np.ndim(a) == 0 else a)
            if term or trunc:
                obs, _ = env.reset()
    finally:
        env.close()
    return out


def footprint(board: Board, src: Path, name: str) -> dict | None:
    """What the library alone takes on `board`: its sources compiled with the board's compiler
    and flags (-ffunction-sections -fdata-sections) and linked with --gc-sections from the three
    API functions (no start files, no main): text, data and bss of that image, as the board's
    `size` tool reports them. None when the compiler or its size tool is not installed."""
    cc = shutil.which(board.cc)
    size = shutil.which(board.cc[:-3] + "size") if board.cc.endswith("gcc") else None
    if cc is None or size is None:
        return None
    flags = [expand_flag(board, f) for f in board.cflags if not f.startswith("-D")]
    flags += ["-ffunction-sections", "-fdata-sections", "-ffp-contract=off"]
    roots = [f"-Wl,-u,{name}_{f}" for f in ("reset", "selftest")]
    with tempfile.TemporaryDirectory() as tmp:
        elf = Path(tmp) / "lib.elf"
        proc = subprocess.run([cc, "-std=gnu99", *flags, *map(str, sorted(src.glob("*.c"))),
                               "-nostartfiles", "-Wl,--gc-sections", f"-Wl,-e,{name}_act",
                               *roots, "-o", str(elf), "-lm"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise QuarlError(f"the library does not build for {board.id}: "
                             f"{' / '.join(proc.stderr.strip().splitlines()[-3:])}")
        proc = subprocess.run([size, str(elf)], capture_output=True, text=True, check=True)
    text, data, bss = (int(v) for v in proc.stdout.strip().splitlines()[-1].split()[:3])
    return {"board": board.id, "compiler": Path(cc).name, "text": text, "data": data,
            "bss": bss}


def _library_files(t, board: Board, name: str, tmp: Path) -> tuple[dict[str, str], dict]:
    """{relative path: text} of the src/ folder, and the facts the README and marker need."""
    _check_kind(t.model)
    try:
        gm = generate(t.model, tmp / "gen", name=name, kernels=board.kernels)
    except UnsupportedOpError as e:      # one line: the ops, without the supported list
        lines = [ln.strip(" -") for ln in str(e).splitlines() if not ln.startswith("Supported")]
        raise UnsupportedOpError(f"{board.id} cannot run {t.model.name}: "
                                 f"{'; '.join(lines).split('. Supported: ')[0]}") from None
    if len(gm.inputs) != 1 or len(gm.outputs) != 1:
        raise QuarlError(f"{t.model} has {len(gm.inputs)} inputs and {len(gm.outputs)} outputs;"
                         " export takes a policy of one input (the observation) and one output")
    if gm.inputs[0].dtype not in ("float32", "int8", "int16"):
        raise QuarlError(f"{t.model}: its input is {gm.inputs[0].dtype}; export takes float32, "
                         "int8 or int16 observations")
    n_out = int(np.prod(gm.outputs[0].shape))
    policy = _policy(t, n_out)
    vectors = test_vectors(t, gm.inputs[0], gm.outputs[0])
    if any(len(x) != gm.inputs[0].nbytes or len(y) != gm.outputs[0].nbytes for x, y in vectors):
        raise QuarlError(f"{t.model}: TF Lite Micro's tensors differ from the generated model's")
    fw = firmware_dir()
    units = [fw / "core" / "requant.c", *kernel_sources(board.kernels)]
    files = library_sources((tmp / "gen" / "model.c").read_text(), units, fw / "core", name)
    obs_size = int(np.prod(gm.inputs[0].shape))
    doc = f"{t.model.name} for {t.env_id}, board {board.id}"
    files[f"{name}.h"] = prefixed(header(name, obs_size, policy, doc), name)
    files[f"{name}.c"] = prefixed(wrapper(name, gm, policy, t.stateful, vectors),
                                  name).replace(API_HEADER, f"{name}.h")
    facts = {"name": name, "model": str(t.model), "sha256": gm.hash.hex(), "env": t.env_id,
             "board": board.id, "kernels": board.kernels, "action_head": policy.action_head,
             "obs_size": obs_size, "action_size": policy.action_size,
             "recurrent": bool(t.stateful), "arena_bytes": gm.arena_bytes,
             "weight_bytes": gm.weight_bytes, "input": _spec(gm.inputs[0]),
             "output": _spec(gm.outputs[0]), "ops": gm.ops, "test_vectors": len(vectors),
             "low": policy.low, "high": policy.high, "start": policy.start,
             "n_actions": policy.n_actions}
    return files, facts


def _check_kind(model: Path) -> None:
    """fp16 and dynamic-range (int8 weights, float activations) models: refused by name."""
    tensors = load(model).tensors
    if any(t.dtype == "float16" for t in tensors):
        raise QuarlError(f"{model.name} is a float16-weight model: export takes fp32, int8 or "
                         "int16x8 models (TF Lite Micro, the reference, cannot run fp16)")
    consts = {t.dtype for t in tensors if t.is_constant}
    acts = {t.dtype for t in tensors if not t.is_constant}
    if "int8" in consts and not acts & {"int8", "int16"}:
        raise QuarlError(f"{model.name} is a dynamic-range model (int8 weights, float "
                         "activations): export takes fp32, int8 or int16x8 models")


def _spec(s) -> dict:
    return {"dtype": s.dtype, "shape": list(s.shape), "scale": s.scale,
            "zero_point": s.zero_point}


def export_library(target: Path, scheme: str, board: Board, name: str, out: Path,
                   env_id: str | None = None, force: bool = False, command: str = "") -> dict:
    """Write the library folder `out` (see the module docstring); its facts as a dict."""
    check_name(name)
    out = Path(out)
    check_out(out, force)
    t = hil_policy(Path(target), scheme, env_id, None)
    with tempfile.TemporaryDirectory() as work:
        # made whole in a temporary folder: nothing at --out (not even its parents) on an error
        src, facts = _library_files(t, board, name, Path(work))
        lib = Path(work) / "lib"
        (lib / "src").mkdir(parents=True)
        for fname, text in src.items():
            (lib / "src" / fname).write_text(text)
        facts["footprint"] = footprint(board, lib / "src", name)
        facts["command"] = command
        for rel, text in package_files(facts, sorted(src)).items():
            (lib / rel).parent.mkdir(parents=True, exist_ok=True)
            (lib / rel).write_text(text)
        (lib / MARKER).write_text(json.dumps(facts, indent=2) + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        try:           # copied beside --out (the same file system), then renamed into place
            shutil.copytree(lib, tmp / "lib")
            _replace(tmp / "lib", out, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return facts


def _replace(lib: Path, out: Path, tmp: Path) -> None:
    """Rename the finished folder into place; an earlier one is moved aside first, then removed."""
    old = tmp / "old"
    if out.exists():
        os.replace(out, old)
    os.replace(lib, out)
