"""validate: run inputs through a model on the board and compare with TF Lite Micro on the host."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import BoardReset, QuarlError
from ..link.runner import RESET_REPLAYS, latency_summary
from ..link.session import BoardSession
from ..targets.boards import Board
from .compare import (CLASSES, FAILING, MISMATCH, REFERENCE_UNDEFINED, input_quantize, libm_ops,
                      output_metrics, row_class, saturated_inputs, undefined_inputs)
from .reference import has_state, host_reference


def input_range(model_path: Path) -> tuple[float, float] | None:
    """The float range the model's first QUANTIZE op can represent (None for float models)."""
    q = input_quantize(model_path)
    return q.range if q else None


def output_name(model_path: Path) -> str:
    from ..converters.tflite_model import load
    return load(model_path).output_tensors()[0].name


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
    # A model with state (an LSTM's, variable tensors) sees the rows in order, as the reference
    # does from a zero state: the board is RESET first (it may have run before: --port), and a
    # board reset mid-way (its state lost) starts the rows again from the first.
    stateful = has_state(model_path)
    with BoardSession(model_path, board, out_dir, port=port, flasher=flasher, drive=drive) as s:
        for restart in range(RESET_REPLAYS + 1 if stateful else 1):
            try:
                if stateful:
                    board_out, costs = [], []
                    s.link.reset_state()
                for x in xs:
                    for replay in range(RESET_REPLAYS + 1):   # an INFER a board reset lost: again
                        try:
                            (y,), cost = s.link.infer([x.reshape(in_shape)])
                            break
                        except BoardReset:
                            if stateful or replay == RESET_REPLAYS:
                                raise
                    board_out.append(y)
                    costs.append(cost)
                break
            except BoardReset:
                if restart == RESET_REPLAYS or not stateful:
                    raise
        memory = s.memory()
        unit = s.info.cost_unit
        link = s.link.report()

    # Each differing row is classed (measure/compare.py): only `mismatch` is ours and fails.
    quantize, libm = input_quantize(model_path), libm_ops(model_path)
    counts = dict.fromkeys(CLASSES, 0)
    refs, max_diff, max_rel = [], 0.0, 0.0
    for x, y in zip(xs, board_out):
        (r,) = ref.run([x.reshape(in_shape)])
        r = r.reshape(y.shape)
        cls = row_class(y, r, bool(libm))
        if cls == MISMATCH and quantize is not None:
            undefined = undefined_inputs(x, quantize)
            if undefined.any():          # what TFLM gives on the input the board quantized
                (r_sat,) = ref.run([saturated_inputs(x, quantize, undefined).reshape(in_shape)])
                r_sat = r_sat.reshape(y.shape)
                if row_class(y, r_sat, bool(libm)) != MISMATCH:
                    cls, r = REFERENCE_UNDEFINED, r_sat   # compared with that from here on
        if cls is not None:
            counts[cls] += 1
        refs.append(r)
        yf, rf = y.astype(np.float64), r.astype(np.float64)
        same = (yf == rf) | (np.isnan(yf) & np.isnan(rf))
        diff = np.where(same, 0.0, np.abs(yf - rf))
        max_diff = max(max_diff, float(np.nanmax(diff)) if diff.size else 0.0)
        rel = np.where(same, 0.0, diff / np.maximum(np.abs(rf), np.finfo(np.float32).tiny))
        max_rel = max(max_rel, float(np.nanmax(rel)) if rel.size else 0.0)
    shape = board_out[0].shape                   # the output tensor's; one row less its batch of 1
    rows = (len(xs), *(shape[1:] if shape[:1] == (1,) else shape))
    metrics = output_metrics(np.stack(board_out).reshape(rows), np.stack(refs).reshape(rows),
                             out_d, output_name(model_path))

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
        # bit-exact wherever TFLM is defined and the C libraries agree: no row is a `mismatch`
        "bit_exact": not any(counts[c] for c in FAILING),
        "mismatches": counts[MISMATCH],                 # rows that fail
        "differing": sum(counts.values()),              # rows whose bits differ, for any reason
        "classes": counts,                              # rows per class
        "libm_ops": libm,
        "max_abs_diff": max_diff,
        # float outputs through libm (expf, tanhf) may differ by an ulp between the board's C
        # library and the host's; integer outputs never may
        "max_rel_diff": max_rel,
        "outputs": [metrics],                           # per output tensor (compare.output_metrics)
        "latency": latency_summary(costs, unit),
        "memory": {k: memory.get(k) for k in ("flash_bytes", "ram_bytes", "stack_bytes", "arena_bytes")},
        "link": link,      # what the link survived: retries, resyncs, bad frames, resets
    }
