"""Generate readable C99 for a .tflite model: the contract in firmware/core/qe_model.h.

    generate("policy.tflite", "build/policy") -> GeneratedModel
    python -m quarl_edge.converters.cgen policy.tflite build/policy [--name NAME]

writes `model.c` (const weights and kernel parameters, the planned arena, `qe_model_invoke()` as a
straight-line schedule, `qe_model_info`) and `model.json` (the same facts for the host). All
validation happens in the generator, before anything is written: an op, type or quantization
the kernels cannot run raises `UnsupportedOpError` naming it; the generated code trusts its
parameters. Every zero point that reaches the C (an op's offsets, tables and clamps, a graph
input's or output's spec) is checked to lie in its tensor's type's range (int8 [-128, 127],
int16 [-32768, 32767]; ops/common.py: per_tensor, weight_quantization): an int8 offset, the
zero point or its negation, lies in [-128, 128], and the int16 kernels require zero point 0.

This file is the driver: validate and lower every op, plan the arena, emit. The rest:
quarl_edge/converters/ops/__init__.py, the op table (how to add an op); quarl_edge/converters/ops/<op>.py, one
lowering per kernel family, with that op's limits; quarl_edge/converters/ops/common.py, their shared
checks; quarl_edge/converters/head.py, the int8-acc head rewrite; quarl_edge/converters/emit.py, the C and JSON
writers; quarl_edge/converters/spec.py, GeneratedModel; quarl_edge/converters/tensor.py, the graph I/O specs (TensorSpec).

Supported: what the lowerings' own SUPPORTED say (ops/__init__.py: supported_list, printed by
`--help` below and copied into docs/pipeline.md); each op's limits are in the docstring of its
quarl_edge/converters/ops/<op>.py, the optimized variants' layouts in quarl_edge/converters/ops/optimized/<variant>/.
Everything else is refused by name, with the op's index and types. An LSTM's or SVDF's state is
in variable tensors: see "State" below.

Memory plan: one arena, tensors placed by liveness (quarl_edge/converters/planner.py); reshapes alias, and
an element-wise op writes over its input when that input dies there and is not a graph
input/output. On every model compared so far the arena is at most TFLM's activation arena for
the same model (asserted in tests/test_arena_vs_tflm.py; printed by benchmarks/arena_vs_tflm.py).

State: variable tensors (TFLite's isVariable, e.g. an LSTM's hidden and cell state) keep their
values from one qe_model_invoke() to the next. They live for the whole run (the planner never
gives their bytes to another tensor), and a model with any gets a generated
`qe_model_reset_state()` (qe_model.h) that zeros them (an int8 one: fills it with its zero
point), as TFLM's MicroInterpreter::Reset; its
first invoke calls it. Models without state keep their exact model.c (firmware/core's
qe_model_state.c has a weak no-op default for them).

Dynamic-range (hybrid: float activations, int8 weights) and float16-weight models are refused,
with a message saying to use the fp32 or a full-integer model. Expanding their weights to
float32 here would run, but the result would be an fp32 model in disguise: its flash cost is
the fp32 model's, and it could not be validated against TF Lite Micro, which cannot run either
kind (its host interpreter rejects them), so "bit-exact with TFLM" would have no reference.
Users who want float run the fp32 model; users who want small weights run full int8.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ..core.errors import ModelError, QuarlError, UnsupportedOpError
from ..core.files import write_atomic

from . import emit, planner
from .head import apply_accumulator_readout
from .ops import (KERNEL_HEADERS, LOWERINGS, SUPPORTED, UNPACKED_LOWERINGS, VARIANT_LOWERINGS, Kernel,
                  supported_list)
from .ops.common import unsupported, zero_point_error
from .spec import IO_DTYPES, QE_MAX_DIMS, GeneratedModel
from .tensor import TensorSpec
from .tflite_model import Tensor, TFLiteModel, load
from .perop import slots_json

__all__ = ["GeneratedModel", "TensorSpec", "SUPPORTED", "generate", "main"]


# ------------------------------------------------------------------------------ generate
def _model_name(name: str | None, path: Path) -> str:
    raw = name if name is not None else path.stem
    s = re.sub(r"[^0-9A-Za-z_.-]+", "_", raw).strip("_")[:63]
    if not s:
        raise ModelError(f"model name {raw!r} has no usable characters")
    return s


def _io_spec(t: Tensor, what: str) -> TensorSpec:
    if t.dtype not in IO_DTYPES:
        raise UnsupportedOpError(f"graph {what} '{t.name}' has type {t.dtype}; "
                                 f"supported: {', '.join(IO_DTYPES)}")
    if len(t.shape) > QE_MAX_DIMS or any(d > 0xFFFF for d in t.shape):
        raise UnsupportedOpError(f"graph {what} '{t.name}' has shape {list(t.shape)}; at most "
                                 f"{QE_MAX_DIMS} dimensions of at most 65535")
    if t.is_constant:
        raise UnsupportedOpError(f"graph {what} '{t.name}' is a constant")
    if t.dtype in ("int8", "int16"):
        if t.quantization is None or t.quantization.per_channel:
            raise UnsupportedOpError(f"graph {what} '{t.name}' is {t.dtype} without per-tensor quantization")
        why = zero_point_error(t, t.quantization.zero_point, f"graph {what}")
        if why is not None:
            raise UnsupportedOpError(why)
        return TensorSpec(t.dtype, tuple(t.shape), float(t.scale), int(t.zero_point))
    return TensorSpec(t.dtype, tuple(t.shape), 0.0, 0)


def _refusal(refused: list[UnsupportedOpError], n_ops: int) -> UnsupportedOpError:
    """One error for every op the lowerings refused, with the list of what is supported."""
    listed = any(getattr(e, "lists_supported", False) for e in refused)
    supported = f". Supported: {'; '.join(SUPPORTED)}" if listed else ""
    if len(refused) == 1:
        return UnsupportedOpError(f"{refused[0]}{supported}")
    ops = "\n".join(f"  - {e}" for e in refused)
    return UnsupportedOpError(f"{len(refused)} of the model's {n_ops} ops cannot run on the "
                              f"firmware:\n{ops}\n{supported.removeprefix('. ')}".rstrip())


def _lowerings(kernels: str, pack_weights: bool) -> dict:
    variant = dict(VARIANT_LOWERINGS.get(kernels, {}))
    if not pack_weights:
        variant.pop("FULLY_CONNECTED", None)
        variant.update(UNPACKED_LOWERINGS.get(kernels, {}))
    return {**LOWERINGS, **variant}


def _lower_all(model: TFLiteModel, path: Path, lowerings: dict) -> list[Kernel]:
    """Validate and lower every op: nothing is written for a model we cannot run. Every op is
    tried, so that a model with several ops we cannot run names all of them."""
    if model.n_subgraphs != 1:
        raise UnsupportedOpError(f"the model has {model.n_subgraphs} subgraphs (control flow); "
                                 "only single-graph models are supported")
    if not model.inputs or not model.outputs:
        raise ModelError(f"{path}: the graph has no inputs or no outputs")
    kernels, refused = [], []
    for op in model.operators:
        lower = lowerings.get(op.opcode)
        try:
            if lower is None:
                raise unsupported(op, model)
            kernels.append(lower(op, model, f"op{op.index}_params"))
        except UnsupportedOpError as e:
            refused.append(e)
    if refused:
        raise _refusal(refused, len(model.operators))
    return kernels


def check(tflite_path, kernels: str = "reference") -> None:
    """Raise what generate() would refuse the model for (every op it cannot run, named), and
    write nothing."""
    path = Path(tflite_path)
    _lower_all(apply_accumulator_readout(load(path)), path, _lowerings(kernels, True))


def generate(tflite_path, out_dir, name: str | None = None,
             kernels: str = "reference", pack_weights: bool = True,
             per_op: bool = False) -> GeneratedModel:
    """Generate out_dir/model.c and out_dir/model.json for a .tflite model. `kernels` is the
    board's kernel set (`[build] kernels`): with an optimized variant, ops/optimized/__init__.py's
    VARIANT_LOWERINGS[kernels] replace some lowerings (e.g. a 1x1 CONV_2D becomes a
    FULLY_CONNECTED, an int8 FULLY_CONNECTED gets the packed weight layout). pack_weights=False
    keeps the reference weight layout (the variants run it too: the build falls back to it when
    the packed weights do not fit the board's flash). per_op=True: a per-op build's model.c
    (each kernel call timed, qe_model.h) and out_dir/perop.json, its slots (quarl_edge/converters/perop.py)."""
    path = Path(tflite_path)
    model = apply_accumulator_readout(load(path))
    mname = _model_name(name, path)
    kernels = _lower_all(model, path, _lowerings(kernels, pack_weights))
    inputs = [_io_spec(t, "input") for t in model.input_tensors()]
    outputs = [_io_spec(t, "output") for t in model.output_tensors()]
    first, last, state = _lifetimes(model, path)
    act_ids, offset, scratch, arena_bytes = _plan_arena(model, kernels, first, last, state)

    gm = GeneratedModel(
        name=mname, hash=model.hash8, inputs=inputs, outputs=outputs, arena_bytes=arena_bytes,
        ops=[op.opcode for op in model.operators], weight_bytes=sum(k.const_bytes for k in kernels),
        layout_extra_bytes=sum(k.layout_extra_bytes for k in kernels),
        input_names=[t.name for t in model.input_tensors()],
        output_names=[t.name for t in model.output_tensors()],
        input_offsets=[offset[i] for i in model.inputs],
        output_offsets=[offset[i] for i in model.outputs],
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gm.c_path = out / "model.c"
    gm.json_path = out / "model.json"
    # every model.c includes KERNEL_HEADERS; an op's own extra headers (Kernel.headers) only
    # when the model uses it, so that models without those ops keep their exact bytes
    extra = sorted({h for k in kernels for h in k.headers} - set(KERNEL_HEADERS))
    write_atomic(gm.c_path, emit.model_c(model, gm, kernels, act_ids, offset, path,
                                         KERNEL_HEADERS + tuple(extra), state=state,
                                         scratch=scratch, per_op=per_op))
    write_atomic(gm.json_path, emit.model_json(gm, model, path))
    if per_op:
        write_atomic(out / "perop.json", slots_json(model, kernels))
    return gm


def _lifetimes(model: TFLiteModel, path: Path) -> tuple[dict[int, int], dict[int, int], list[int]]:
    """Activation tensors and their lifetimes (op indices): (first, last, state). Graph inputs
    live from before op 0, graph outputs until after the last op, since the harness reads and
    writes around invoke; variable tensors (`state`, an LSTM's) persist across invocations:
    alive for the whole run, so no other tensor ever shares their bytes."""
    n_ops = len(model.operators)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i in model.inputs:
        first[i] = -1
        last[i] = -1
    state = sorted({i for op in model.operators for i in op.inputs
                    if i >= 0 and model.tensors[i].is_variable and not model.tensors[i].is_constant})
    is_state = set(state)
    for i in state:
        first[i] = -1
        last[i] = n_ops
    for op in model.operators:
        for i in op.inputs:
            if i >= 0 and not model.tensors[i].is_constant:
                if i not in first:
                    raise ModelError(f"{path}: op {op.index} {op.opcode} reads tensor "
                                     f"'{model.tensors[i].name}' before anything writes it")
                last[i] = max(last[i], op.index) if i not in is_state else n_ops
        for i in op.outputs:
            if i in first or model.tensors[i].is_variable:
                raise ModelError(f"{path}: tensor '{model.tensors[i].name}' is written twice")
            first[i] = last[i] = op.index
    for i in model.outputs:
        if i not in first:
            raise ModelError(f"{path}: graph output '{model.tensors[i].name}' is never written")
        last[i] = n_ops
    return first, last, state


def _plan_arena(model: TFLiteModel, kernels: list[Kernel], first: dict[int, int],
                last: dict[int, int], state: list[int]):
    """One buffer per group of tensors sharing bytes (_alias_roots) and one per kernel scratch
    (arena bytes live during its op only), placed by the planner: (the activation tensors, their
    arena offsets, the scratch offsets per op index, the arena's size)."""
    act_ids = sorted(first)
    root = _alias_roots(model, kernels, first, last, set(state))
    groups: dict[int, list[int]] = {}
    for i in act_ids:
        groups.setdefault(root[i], []).append(i)
    roots = sorted(groups)
    bufs = []
    for r in roots:
        group = groups[r]
        bufs.append(planner.Buffer(max(model.tensors[i].nbytes for i in group),
                                   min(first[i] for i in group), max(last[i] for i in group)))
    scratch_ops = [k.op.index for k in kernels if k.scratch_bytes]
    for k in kernels:
        if k.scratch_bytes:
            bufs.append(planner.Buffer(k.scratch_bytes, k.op.index, k.op.index))
    mem = planner.plan(bufs, alignment=16)
    planner.check(bufs, mem, alignment=16)
    root_offset = {r: mem.offsets[k] for k, r in enumerate(roots)}
    offset = {i: root_offset[root[i]] for i in act_ids}
    scratch = {j: mem.offsets[len(roots) + n] for n, j in enumerate(scratch_ops)}
    return act_ids, offset, scratch, max(mem.arena_bytes, 16)


def _alias_roots(model: TFLiteModel, kernels: list[Kernel], first: dict[int, int],
                 last: dict[int, int], state: set[int] = frozenset()) -> dict[int, int]:
    """Which activation tensors share one buffer: tensor -> the tensor whose buffer it uses.

    A RESHAPE-like op's output always shares its input's bytes (no code runs; the bytes are
    read-only views of each other). An element-wise op (lookup table, float activation) writes
    its output over its input when that is safe: the input and everything sharing its buffer
    are used for the last time by this op, and none of them is a graph input or output (the
    harness reads those around qe_model_invoke) or a variable tensor (`state`: kept across
    invocations)."""
    root = {i: i for i in first}
    io = set(model.inputs) | set(model.outputs) | set(state)
    # per buffer (by its root): the last use of any tensor in it, and whether one is in `io`
    group_last = dict(last)
    group_io = {i: i in io for i in first}
    for k in kernels:
        if not (k.alias or k.inplace):
            continue
        src, dst = k.op.inputs[0], k.op.outputs[0]
        r = root[src]
        if k.inplace:
            if (group_last[r] > k.op.index or group_io[r] or dst in io
                    or model.tensors[dst].nbytes != model.tensors[src].nbytes):
                continue
        root[dst] = r
        group_last[r] = max(group_last[r], last[dst])
        group_io[r] = group_io[r] or dst in io
    return root


# ---------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarl_edge.converters.cgen",
                                 description="Generate model.c and model.json from a .tflite model.",
                                 epilog="supported ops:\n" + supported_list(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="the .tflite file")
    ap.add_argument("out_dir", help="directory to write model.c and model.json into")
    ap.add_argument("--name", help="model name reported by the board (default: file stem)")
    args = ap.parse_args(argv)
    try:
        gm = generate(args.model, args.out_dir, name=args.name)
    except QuarlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{gm.c_path}: {gm.name} ({gm.hash.hex()}), ops {' '.join(gm.ops)}, "
          f"{gm.weight_bytes} B weights, {gm.arena_bytes} B arena")
    return 0


if __name__ == "__main__":
    sys.exit(main())
