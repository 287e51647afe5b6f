"""validate: run inputs through a model on the board and compare with TF Lite Micro on the host."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import BoardReset, ModelError, QuarlError
from ..link.runner import RESET_REPLAYS, latency_summary
from ..link.session import BoardSession
from ..targets.boards import Board
from .reference import TFLiteRuntime, host_reference


def input_range(model_path: Path) -> tuple[float, float] | None:
    """The float range the model's first QUANTIZE op can represent (None for float models)."""
    rt = TFLiteRuntime(model_path)
    idx = rt.inputs[0]["index"]
    try:
        tensors = {t["index"]: t for t in rt.interp.get_tensor_details()}
        for op in rt.interp._get_ops_details():
            if op["op_name"] == "QUANTIZE" and idx in list(op["inputs"]):
                t = tensors[op["outputs"][0]]
                scale, zp = t["quantization"]
                info = np.iinfo(t["dtype"])
                return scale * (info.min - zp), scale * (info.max - zp)
    except (KeyError, IndexError, ValueError) as e:    # a corrupt graph tflite-runtime loaded
        raise ModelError(f"{model_path} is not a valid TFLite model (its QUANTIZE input op: "
                         f"{type(e).__name__}: {e})") from None
    return None


def random_inputs(model_path: Path, shape: tuple[int, ...], dtype, n: int, seed: int) -> np.ndarray:
    """Random inputs that cover the representable range and, on purpose, saturate beyond it."""
    rng = np.random.default_rng(seed)
    shape = (n, *shape[1:])
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    rng_range = input_range(model_path)
    lo, hi = rng_range if rng_range else (-4.0, 4.0)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    x = mid + half * rng.uniform(-1.5, 1.5, size=shape)          # 1/3 of values saturate
    return x.astype(dtype)


def load_inputs(path: Path, shape: tuple[int, ...], dtype) -> np.ndarray:
    try:
        x = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise QuarlError(f"cannot read inputs {path}: {e}") from None
    if not isinstance(x, np.ndarray):      # np.load gives an NpzFile for .npz archives
        x.close()
        raise QuarlError(f"{path} is an .npz archive; inputs are one array in an .npy file "
                         "(numpy.save)")
    want = tuple(shape[1:])
    if x.dtype != np.dtype(dtype) or tuple(x.shape[1:]) != want:
        raise QuarlError(f"{path} holds {x.dtype} {x.shape}; the model needs "
                         f"{np.dtype(dtype)} with shape (n, {', '.join(map(str, want))})")
    if x.ndim == 0 or len(x) == 0:
        raise QuarlError(f"{path} holds no inputs (shape {x.shape}): nothing to validate")
    return x


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def validate(model_path: Path, board: Board, out_dir: Path, inputs: Path | None = None,
             random_n: int | None = None, save_outputs: Path | None = None, port: str | None = None,
             seed: int = 0, flasher: str | None = None, drive: str | None = None) -> dict:
    """Run inputs on the board and compare with the host reference. flasher/drive: how a real
    board is flashed (quarl_edge/targets/flash.py)."""
    model_path = Path(model_path)
    if random_n is not None and (not isinstance(random_n, int) or random_n < 1):
        raise QuarlError(f"the number of random inputs must be an integer >= 1, got {random_n!r}")
    ref = host_reference(model_path, micro=True)   # TF Lite Micro (int8-acc: its head readout)
    if len(ref.inputs) != 1 or len(ref.outputs) != 1:
        raise QuarlError("validate supports models with one input and one output")
    in_d, out_d = ref.inputs[0], ref.outputs[0]
    in_shape = tuple(int(v) for v in in_d["shape"])
    if inputs is not None:
        xs = load_inputs(inputs, in_shape, in_d["dtype"])
    else:
        xs = random_inputs(model_path, in_shape, in_d["dtype"], random_n or 100, seed)

    board_out, costs = [], []
    with BoardSession(model_path, board, out_dir, port=port, flasher=flasher, drive=drive) as s:
        for x in xs:
            for replay in range(RESET_REPLAYS + 1):   # an INFER a board reset lost: again
                try:
                    (y,), cost = s.link.infer([x.reshape(in_shape)])
                    break
                except BoardReset:
                    if replay == RESET_REPLAYS:
                        raise
            board_out.append(y)
            costs.append(cost)
        memory = s.memory()
        unit = s.info.cost_unit
        link = s.link.report()

    exact, max_diff, max_rel, mismatches = True, 0.0, 0.0, 0
    for x, y in zip(xs, board_out):
        (r,) = ref.run([x.reshape(in_shape)])
        r = r.reshape(y.shape)
        if not same_bits(y, r):
            exact = False
            mismatches += 1
        yf, rf = y.astype(np.float64), r.astype(np.float64)
        same = (yf == rf) | (np.isnan(yf) & np.isnan(rf))
        diff = np.where(same, 0.0, np.abs(yf - rf))
        max_diff = max(max_diff, float(np.nanmax(diff)) if diff.size else 0.0)
        rel = np.where(same, 0.0, diff / np.maximum(np.abs(rf), np.finfo(np.float32).tiny))
        max_rel = max(max_rel, float(np.nanmax(rel)) if rel.size else 0.0)

    if save_outputs is not None:   # through a temporary file: a failed write keeps the old one
        save_outputs = Path(save_outputs)
        tmp = save_outputs.with_name(save_outputs.name + ".tmp")
        with tmp.open("wb") as f:
            np.save(f, np.stack(board_out).reshape(len(xs), *y.shape[1:]).astype(out_d["dtype"]))
        tmp.replace(save_outputs)
    return {
        "board": board.id,
        "model": str(model_path),
        "n": int(len(xs)),
        "bit_exact": exact,
        "mismatches": mismatches,
        "max_abs_diff": max_diff,
        # float outputs through libm (expf, tanhf) may differ by an ulp between the board's C
        # library and the host's; integer outputs never may
        "max_rel_diff": max_rel,
        "latency": latency_summary(costs, unit),
        "memory": {k: memory.get(k) for k in ("flash_bytes", "ram_bytes", "stack_bytes", "arena_bytes")},
        "link": link,      # what the link survived: retries, resyncs, bad frames, resets
    }
