"""validate: run inputs through a model on the board and compare with TF Lite Micro on the host."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import BoardReset, ModelError, QuarlError
from ..link.runner import RESET_REPLAYS, latency_summary
from ..link.session import BoardSession
from ..targets.boards import Board
from .compare import (CLASSES, FAILING, MISMATCH, REFERENCE_UNDEFINED, input_quantize, libm_ops,
                      output_metrics, row_class, saturated_inputs, undefined_inputs, worst_class)
from ..core.files import write_npy
from .reference import has_state, host_reference
from ..converters.tflite_model import load
from ..converters.cgen import check


def input_range(model_path: Path, index: int = 0) -> tuple[float, float] | None:
    """The float range the QUANTIZE op of input `index` can represent (None: not quantized)."""
    q = input_quantize(model_path, index)
    return q.range if q else None


def tensor_names(model_path: Path) -> tuple[list[str], list[str]]:
    """The names of the model's input and output tensors, in the subgraph's order (the order of
    the board's tensors and of the reference interpreter's)."""
    model = load(model_path)
    return [model.tensors[i].name for i in model.inputs], [t.name for t in model.output_tensors()]


def _refuse_fp16(model_path: Path) -> None:
    """An fp16 model gets the refusal `build` gives (docs/pipeline.md, generate), not TF Lite Micro's raw error."""
    if any(t.dtype == "float16" for t in load(model_path).tensors):
        raise ModelError(f"{model_path}: float16 weights (an fp16-quantized model) are not "
                         "deployable: TF Lite Micro cannot run it, so there is nothing to be "
                         "bit-exact with; use the fp32 or a full-integer model")


def output_name(model_path: Path) -> str:
    return tensor_names(model_path)[1][0]


def random_inputs(model_path: Path, shape: tuple[int, ...], dtype, n: int, seed: int,
                  index: int = 0) -> np.ndarray:
    """Random inputs that cover the representable range of input `index` and, on purpose,
    saturate beyond it."""
    rng = np.random.default_rng(seed if index == 0 else [seed, index])
    shape = (n, *shape[1:]) if tuple(shape[:1]) == (1,) else (n, *shape)   # rows, or samples
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    rng_range = input_range(model_path, index)
    lo, hi = rng_range if rng_range else (-4.0, 4.0)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    x = mid + half * rng.uniform(-1.5, 1.5, size=shape)          # 1/3 of values saturate
    return x.astype(dtype)


def _short(name: str) -> str:
    """A Keras input's own name inside its TFLite tensor name: serving_default_pos:0 -> pos."""
    name = name.split(":")[0]
    return name[len("serving_default_"):] if name.startswith("serving_default_") else name


def _forms(shape: tuple[int, ...]) -> str:
    """The accepted array shapes for an input of `shape` (the input-file rule, in --help)."""
    full = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    forms = [f"({full}) for one sample"]
    if shape[:1] == (1,):
        forms.insert(0, f"(n, {', '.join(map(str, shape[1:]))}) for n rows (the batch axis "
                        "dropped)")
    forms.append(f"(n, {full.rstrip(',')}) with --samples")
    return "; ".join(forms)


def _check_array(x: np.ndarray, what: str, shape: tuple[int, ...], dtype,
                 samples: bool = False) -> tuple[np.ndarray, bool]:
    """The input's samples from array `x`, each reshapable to the input's full `shape`, and
    whether `x` was one sample (then used for every row of the other inputs). The forms: a
    stack of whole samples (n, *shape) with `samples`; else exactly one sample (shape); else,
    for an input with a batch axis of 1, rows (n, *shape[1:])."""
    shape = tuple(int(v) for v in shape)
    if x.dtype != np.dtype(dtype):
        raise QuarlError(f"{what} holds {x.dtype} {x.shape}; the model needs {np.dtype(dtype)} "
                         f"of shape {shape}: {_forms(shape)}")
    if samples:
        if tuple(x.shape[1:]) != shape:
            raise QuarlError(f"{what} holds {x.dtype} {x.shape}; with --samples each array is "
                             f"a stack of whole samples: ({', '.join(['n', *map(str, shape)])})")
        one = False
    elif tuple(x.shape) == shape:
        x, one = x[None], True
    elif shape[:1] == (1,) and x.ndim >= 1 and tuple(x.shape[1:]) == shape[1:]:
        one = False
    else:
        raise QuarlError(f"{what} holds {x.dtype} {x.shape}; the model's input is "
                         f"{np.dtype(dtype)} of shape {shape}: {_forms(shape)}")
    if x.ndim == 0 or len(x) == 0:
        raise QuarlError(f"{what} holds no inputs (shape {x.shape}): nothing to validate")
    return x, one


# The most inputs one validate runs (--random N, or an inputs file's rows): each is a round trip
# to the board, and all of them and their outputs are held in memory.
MAX_INPUTS = 100_000


def _check_npy_sizes(path: Path) -> None:
    """Refuse an .npy (or an .npz's member) whose header claims more data than the file holds,
    before numpy allocates it (a 100-byte file can claim 29 TiB)."""
    import zipfile
    from numpy.lib import format as npformat

    def check(f, size: int, what: str) -> None:
        try:
            version = npformat.read_magic(f)
            # numpy's public header readers (its private _read_array_header is gone in
            # numpy 2); format 3.0 (utf-8 field names) has none: np.load checks that one
            reader = {(1, 0): npformat.read_array_header_1_0,
                      (2, 0): npformat.read_array_header_2_0}.get(version)
            if reader is None:
                return
            shape, _, dtype = reader(f)
        except (ValueError, OSError, EOFError):
            return                                # not an .npy: np.load says what it is
        need = f.tell() + int(np.prod(shape, dtype=object)) * dtype.itemsize
        if need > size:
            raise QuarlError(f"{what}: its header claims an array of shape {tuple(shape)} "
                             f"({need:,} bytes) but it holds {size:,} bytes")

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    with z.open(info) as f:
                        check(f, info.file_size, f"{path}['{info.filename}']")
        else:
            with open(path, "rb") as f:
                check(f, path.stat().st_size, str(path))
    except (OSError, zipfile.BadZipFile) as e:
        raise QuarlError(f"cannot read inputs {path}: {e}") from None


def check_output_file(path: Path, what: str) -> Path:
    """A file to be written: not a directory, in a directory that exists."""
    path = Path(path)
    if path.is_dir():
        raise QuarlError(f"{what} {path} is a directory, not a file")
    if not path.parent.is_dir():
        raise QuarlError(f"{what} {path}: the directory {path.parent} does not exist")
    return path


def load_inputs(path: Path, shape: tuple[int, ...], dtype, samples: bool = False) -> np.ndarray:
    """The samples of a one-input model from an .npy file (the forms: _check_array)."""
    return load_input_arrays(path, [{"shape": shape, "dtype": dtype}], ["input"], samples)[0]


def load_input_arrays(path: Path, details: list[dict], names: list[str],
                      samples: bool = False) -> list[np.ndarray]:
    """One array of samples per model input: from an .npy file for a one-input model, from an
    .npz archive with one array per input for any model. An .npz array is found by the input's
    tensor name (serving_default_pos:0), its Keras name (pos), or its position (arr_0,
    numpy.savez's name for positional arrays, or input_0), or is the archive's only array for a
    one-input model; every input needs one. Each array is rows, one sample or (`samples`) a
    stack of samples (_check_array); an input given as one sample is used with every row of
    the others (a bias, a shape tensor), and the others must have the same number of rows."""
    _check_npy_sizes(Path(path))
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise QuarlError(f"cannot read inputs {path}: {e}") from None
    if isinstance(data, np.ndarray):
        if len(details) != 1:
            listed = ", ".join(_short(n) for n in names)
            raise QuarlError(f"the model has {len(details)} inputs ({listed}); pass an .npz "
                             f"archive with one array per input (numpy.savez(PATH, "
                             f"{', '.join(f'{_short(n)}=...' for n in names)}))")
        return [_check_array(data, str(path), details[0]["shape"], details[0]["dtype"],
                             samples)[0]]
    with data:
        try:
            arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError) as e:
            raise QuarlError(f"cannot read inputs {path}: {e}") from None
    out, ones, used = [], [], set()
    for k, (d, name) in enumerate(zip(details, names)):
        keys = [key for key in (name, _short(name), f"arr_{k}", f"input_{k}") if key in arrays]
        if not keys and len(details) == 1 and len(arrays) == 1:
            keys = list(arrays)
        if not keys:
            raise QuarlError(f"{path} has no array for the model's input {k} '{_short(name)}' "
                             f"(tensor {name}); it has {', '.join(sorted(arrays)) or 'none'}: "
                             f"name it {_short(name)!r} or {f'arr_{k}'!r}")
        used.add(keys[0])
        x, one = _check_array(arrays[keys[0]], f"{path}['{keys[0]}'] (input {k} "
                              f"'{_short(name)}')", d["shape"], d["dtype"], samples)
        out.append(x)
        ones.append(one)
    extra = sorted(set(arrays) - used)
    if extra:
        raise QuarlError(f"{path} has arrays that are no input of the model: {', '.join(extra)} "
                         f"(its inputs: {', '.join(_short(n) for n in names)})")
    rows = {len(x) for x, one in zip(out, ones) if not one} or {1}
    if len(rows) != 1:
        raise QuarlError(f"{path}: the inputs' arrays have different numbers of rows "
                         f"({', '.join(f'{_short(n)} {len(x)}' for n, x in zip(names, out))}); "
                         "an input given as one sample is used with every row")
    n = rows.pop()           # one sample beside rows: the same tensor with every row
    return [np.repeat(x, n, axis=0) if one and n > 1 else x for x, one in zip(out, ones)]


def validate(model_path: Path, board: Board, out_dir: Path, inputs: Path | None = None,
             random_n: int | None = None, save_outputs: Path | None = None, port: str | None = None,
             seed: int = 0, flasher: str | None = None, drive: str | None = None,
             samples: bool = False) -> dict:
    """Run inputs on the board and compare with the host reference, output by output. A model
    with several inputs takes its rows from an .npz with one array per input (load_input_arrays);
    one with several outputs saves them (save_outputs) as an .npz, one array per output.
    flasher/drive: how a real board is flashed (quarl_edge/targets/flash.py)."""
    model_path = Path(model_path)
    if random_n is not None and (not isinstance(random_n, int) or random_n < 1):
        raise QuarlError(f"the number of random inputs must be an integer >= 1, got {random_n!r}")
    if random_n is not None and random_n > MAX_INPUTS:
        raise QuarlError(f"--random {random_n}: at most {MAX_INPUTS:,} inputs per validate")
    if save_outputs is not None:
        save_outputs = check_output_file(save_outputs, "--save-outputs")
    _refuse_fp16(model_path)
    ref = _micro_reference(model_path)
    in_names, out_names = tensor_names(model_path)
    if save_outputs is not None and len(ref.outputs) > 1 and Path(save_outputs).suffix != ".npz":
        raise QuarlError(f"the model has {len(ref.outputs)} outputs: save them to an .npz "
                         f"(one array per output), not {save_outputs}")
    shapes = [tuple(int(v) for v in d["shape"]) for d in ref.inputs]
    xs = _input_rows(model_path, ref, in_names, shapes, inputs, random_n, seed, samples)
    board_out, costs, memory, unit, link = _run_on_board(model_path, board, out_dir, xs, port,
                                                         flasher, drive)

    # Each differing row is classed (measure/compare.py): only `mismatch` is ours and fails. A
    # row of several outputs takes the worst of their classes.
    quantizes = [input_quantize(model_path, k) for k in range(len(shapes))]
    libm = libm_ops(model_path)
    counts, refs, max_diff, max_rel = _compare_rows(xs, board_out, ref, quantizes, libm)
    metrics, per_output = _output_metrics(xs, board_out, refs, ref, out_names)
    if save_outputs is not None:
        _save_outputs(save_outputs, per_output, out_names)
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
        "outputs": metrics,                             # per output tensor (compare.output_metrics)
        "latency": latency_summary(costs, unit),
        "memory": {k: memory.get(k) for k in ("flash_bytes", "ram_bytes", "stack_bytes", "arena_bytes")},
        "link": link,      # what the link survived: retries, resyncs, bad frames, resets
    }


def _micro_reference(model_path: Path):
    """TF Lite Micro on the host, running the model (int8-acc: its head readout)."""
    try:
        return host_reference(model_path, micro=True)
    except ModelError:
        # what TF Lite Micro cannot run, our firmware cannot either: say it as build says it
        # (every op named, e.g. a hybrid model's float-input FULLY_CONNECTED) when it does
        check(model_path)
        raise


def _input_rows(model_path: Path, ref, in_names: list[str], shapes: list[tuple[int, ...]],
                inputs: Path | None, random_n: int | None, seed: int,
                samples: bool) -> list[list[np.ndarray]]:
    """The rows to run, each a list of one array per input in the input's full shape: from the
    inputs file, else `random_n` (default 100) random rows."""
    if inputs is not None:
        columns = load_input_arrays(inputs, ref.inputs, in_names, samples)
    else:
        columns = [random_inputs(model_path, shape, d["dtype"], random_n or 100, seed, index=k)
                   for k, (shape, d) in enumerate(zip(shapes, ref.inputs))]
    return [[c[i].reshape(shape) for c, shape in zip(columns, shapes)]
            for i in range(len(columns[0]))]


def _run_on_board(model_path: Path, board: Board, out_dir: Path, xs: list, port: str | None,
                  flasher: str | None, drive: str | None) -> tuple[list, list, dict, str, dict]:
    """Every row through the board -> (outputs per row, cost per row, the board's memory, its
    cost unit, the link's report)."""
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
                            ys, cost = s.link.infer(x)
                            break
                        except BoardReset:
                            if stateful or replay == RESET_REPLAYS:
                                raise
                    board_out.append(ys)
                    costs.append(cost)
                break
            except BoardReset:
                if restart == RESET_REPLAYS or not stateful:
                    raise
        return board_out, costs, s.memory(), s.info.cost_unit, s.link.report()


def _compare_rows(xs: list, board_out: list, ref, quantizes: list, libm: list
                  ) -> tuple[dict, list, float, float]:
    """The board's rows against the reference's -> (rows per class, the reference outputs each
    row was compared with, the largest absolute and relative difference)."""
    counts = dict.fromkeys(CLASSES, 0)
    refs, max_diff, max_rel = [], 0.0, 0.0
    for x, ys in zip(xs, board_out):
        cls, rs = _row_class(x, ys, ref, quantizes, libm)
        if cls is not None:
            counts[cls] += 1
        refs.append(rs)
        for y, r in zip(ys, rs):
            yf, rf = y.astype(np.float64), r.astype(np.float64)
            same = (yf == rf) | (np.isnan(yf) & np.isnan(rf))
            diff = np.where(same, 0.0, np.abs(yf - rf))
            max_diff = max(max_diff, float(np.nanmax(diff)) if diff.size else 0.0)
            rel = np.where(same, 0.0, diff / np.maximum(np.abs(rf), np.finfo(np.float32).tiny))
            max_rel = max(max_rel, float(np.nanmax(rel)) if rel.size else 0.0)
    return counts, refs, max_diff, max_rel


def _row_class(x: list, ys: list, ref, quantizes: list, libm: list) -> tuple[str | None, list]:
    """One row's class (None: its bits equal the reference's) and the reference outputs it is
    compared with: TF Lite Micro's on `x`, or, for a row TFLM's QUANTIZE leaves undefined, on
    the inputs the board quantized (saturated)."""
    rs = [r.reshape(y.shape) for r, y in zip(ref.run(x), ys)]
    cls = worst_class(row_class(y, r, bool(libm)) for y, r in zip(ys, rs))
    if cls == MISMATCH:
        undefined = [None if q is None else undefined_inputs(xk, q)
                     for xk, q in zip(x, quantizes)]
        if any(u is not None and u.any() for u in undefined):
            # what TFLM gives on the inputs the board quantized (saturated)
            x_sat = [xk if u is None or not u.any() else saturated_inputs(xk, q, u)
                     for xk, q, u in zip(x, quantizes, undefined)]
            rs_sat = [r.reshape(y.shape) for r, y in zip(ref.run(x_sat), ys)]
            if worst_class(row_class(y, r, bool(libm)) for y, r in zip(ys, rs_sat)) \
                    != MISMATCH:
                cls, rs = REFERENCE_UNDEFINED, rs_sat   # compared with that from here on
    return cls, rs


def _output_metrics(xs: list, board_out: list, refs: list, ref, out_names: list[str]
                    ) -> tuple[list[dict], list[np.ndarray]]:
    """Per output tensor: its metrics against the reference (compare.output_metrics) and the
    board's values of every row, stacked, in the output's dtype."""
    metrics, per_output = [], []
    for j, (d, name) in enumerate(zip(ref.outputs, out_names)):
        shape = board_out[0][j].shape            # the output tensor's; a row less its batch of 1
        rows = (len(xs), *(shape[1:] if shape[:1] == (1,) else shape))
        ys_j = np.stack([ys[j] for ys in board_out]).reshape(rows)
        metrics.append(output_metrics(ys_j, np.stack([rs[j] for rs in refs]).reshape(rows),
                                      d, name))
        per_output.append(ys_j.astype(d["dtype"]))
    return metrics, per_output


def _save_outputs(path: Path, per_output: list[np.ndarray], out_names: list[str]) -> None:
    """The board's outputs to `path`: an .npy of the one output, else an .npz of one array per
    output, written through a temporary file: a failed write keeps the old one."""
    if len(per_output) == 1:
        write_npy(path, per_output[0])
    else:
        keys = [_short(n) for n in out_names]   # the full names where those repeat
        keys = keys if len(set(keys)) == len(keys) else out_names
        write_npy(path, **dict(zip(keys, per_output)))
