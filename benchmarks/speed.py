"""Instructions per op and per multiply-accumulate on emulated boards (QEMU -icount: exact,
repeatable counts; on AVR boards CPU cycles, simavr being cycle-accurate), with our reference
kernels and with the board's optimized variant, side by side in one run; flash and RAM of both
firmwares; and the firmware build time with a cold and a warm object cache.

    .venv/bin/python benchmarks/speed.py [--boards mps2-an386] [--models cnn,cartpole] [--md FILE]
    .venv/bin/python benchmarks/speed.py --render --md FILE [--before OLD.jsonl]

With --md FILE the raw rows go to FILE's .jsonl beside it (one JSON object a line: a model on a
board, its per-op counts for both kernel sets; or a board's build times), merged with the rows
already there (a row of the same board and model is replaced, others kept, so the boards can be
run one command at a time), and FILE is rendered from all of them: the text above the marker line
(RENDER_MARKER; hand-written) is kept, everything below it is the tables. --render renders FILE
from its .jsonl alone, running nothing. With --before OLD.jsonl (an earlier run's rows, e.g. of
the commit before a kernel change) FILE opens with a table of instructions per MAC, before and
after, per board and model (total and each FULLY_CONNECTED / convolution), beside TF Lite
Micro's (and + CMSIS-NN's) where results/bench/vs_tflm.jsonl has the model on the board.

Per-op costs are measured, not estimated: for a model of n ops the firmware is built n + 1 times
with its schedule (qe_model_invoke in the generated model.c) cut after the first k ops, k = 0..n,
and op k costs count(k + 1) - count(k) instructions (every count is one BENCH of the same
observation, min == max checked). The cut firmwares differ from the real one only in the calls
left out; the total is the uncut firmware's count. With the object cache each cut build compiles
only its model.c.

Models: "cnn" is a 16x16x2 int8 CNN policy (float I/O) of the shapes issue 13 measured: conv 3x3
stride 2 (8 filters), depthwise 3x3, conv 1x1 (12 filters), max pool 2x2, FC 192 -> 5, 20,928
MACs; "cartpole" is the shipped examples/cartpole_dqn int8 policy (4 -> 64 -> 64 -> 2);
"mlp32", "mlp64" (any "mlpN") are int8 MLP policies 8 -> N -> N -> 4 with ReLU and random
weights; "minatar" is the MinAtar DQN's shape (10x10x4, conv 3x3 x 16, FC 1,024 -> 128 -> 6) with
random weights. "SMLAD bound" (DSP cores) is 0.5 instructions per MAC: two multiply-accumulates per
instruction and nothing else. On AVR ("avr" variant) the floor of the MAC loop is given instead:
per input of a four-row pass LD (2 cycles) and per row LPM (3), MULS (2), ADD + ADC (2), 7.5
cycles per MAC.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from quarl_edge.converters.cgen import generate  # noqa: E402
from quarl_edge.converters.tflite_model import load  # noqa: E402
from quarl_edge.link.runner import BoardLink  # noqa: E402
from quarl_edge.targets import build as B  # noqa: E402
from quarl_edge.targets.boards import get_board  # noqa: E402
from quarl_edge.targets.launch import start  # noqa: E402


def cnn_model(path: Path) -> Path:
    from helpers_models import convert, random_cnn
    calib = np.random.default_rng(0).standard_normal((64, 16, 16, 2)).astype(np.float32)
    model = random_cnn(1, (16, 16, 2), pool="max", n_actions=5, head=None, filters=8,
                       pointwise=12, hidden=0)
    path.write_bytes(convert(model, "int8", calib))
    return path


def mlp_model(path: Path, width: int) -> Path:
    """An int8 MLP policy (float I/O) 8 -> width -> width -> 4, ReLU, random weights."""
    from helpers_models import convert, random_mlp
    rng = np.random.default_rng(width)
    model = random_mlp(width, 8, [width, width, 4], ["relu", "relu", "none"], 2.0)
    path.write_bytes(convert(model, "int8", rng.standard_normal((64, 8)).astype(np.float32)))
    return path


def minatar_model(path: Path) -> Path:
    """The MinAtar DQN's shape (quarl_edge/rl/defaults.py; tests/test_conv_rows.py's minatar_cnn,
    the same seed): 10x10x4 -> conv 16 3x3 VALID ReLU -> flatten (1,024) -> dense 128 ReLU ->
    dense 6, random weights, int8 (calibrated on sparse 0/1 frames, as MinAtar's)."""
    from helpers_models import convert, minatar_keras
    model, calib = minatar_keras()
    path.write_bytes(convert(model, "int8", calib))
    return path


def macs_per_op(model_path: Path) -> list[int]:
    """Multiply-accumulates of each op: FULLY_CONNECTED out x depth, CONV_2D out x k_h x k_w x
    in_c, DEPTHWISE_CONV_2D out x k_h x k_w; 0 for the others."""
    m = load(model_path)
    out = []
    for op in m.operators:
        if op.opcode in ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"):
            y, w = m.tensors[op.outputs[0]], m.tensors[op.inputs[1]]
            taps = int(np.prod(w.shape[1:])) if op.opcode != "DEPTHWISE_CONV_2D" else w.shape[1] * w.shape[2]
            out.append(int(y.size) * int(taps))
        else:
            out.append(0)
    return out


def cut_schedule(model_c: str, keep: int) -> str:
    """model.c with qe_model_invoke calling only its first `keep` ops (the comments stay)."""
    head, rest = model_c.split("void qe_model_invoke(void)\n{\n", 1)
    body, tail = rest.split("\n}\n", 1)
    lines, out = body.split("\n"), []
    for ln in lines:
        m = re.match(r"    /\* op (\d+):", ln)
        if m:
            current = int(m.group(1))
        elif ln.strip() and current >= keep:
            ln = "    if (0) { " + ln.strip() + " }   /* cut: compiled away, its constants still used */"
        out.append(ln)
    return head + "void qe_model_invoke(void)\n{\n" + "\n".join(out) + "\n}\n" + tail


def count(board, elf: Path, x: np.ndarray, spec) -> int:
    """One BENCH of the firmware; a launch that does not answer HELLO (the emulator starved on a
    loaded machine) is retried once, and said so on stderr."""
    from quarl_edge.core.errors import BoardError
    try:
        return _count(board, elf, x, spec)
    except BoardError as e:
        print(f"{elf}: {e}; retrying once", file=sys.stderr, flush=True)
        return _count(board, elf, x, spec)


def _count(board, elf: Path, x: np.ndarray, spec) -> int:
    with start(board, elf) as running:
        link = BoardLink(running.url, alive=running.alive)
        try:
            link.hello(40.0)
            link.infer([x.reshape(spec.shape).astype(spec.dtype)])
            stats = link.bench(3)
        finally:
            link.close()
    if stats.min != stats.max and VARYING_OK:
        print(f"{elf}: BENCH counts vary ({stats.min}..{stats.max}): the minimum taken",
              file=sys.stderr, flush=True)
    else:
        assert stats.min == stats.max, f"{board.id}: counts vary ({stats.min}..{stats.max})"
    return int(stats.min)


# --varying-ok: a firmware whose BENCH counts are not all equal gives its minimum (said on
# stderr) instead of stopping the run. MinAtar's model on microbit and hifive1 does that from its
# CONV_2D on, with the reference kernels too (the cut firmware of QUANTIZE alone does not): one
# BENCH costs up to ~34,000 instructions more than the minimum; not investigated here.
VARYING_OK = False


def per_op(model_path: Path, board, work: Path, x: np.ndarray) -> dict:
    gen = work / "gen"
    gm = generate(model_path, gen, name=model_path.stem, kernels=board.kernels)
    full = (gen / "model.c").read_text()
    info = json.loads((gen / "model.json").read_text())
    flags = (f"-DQE_INPUT_COPY_BYTES={max(sum(int(t['bytes']) for t in info['inputs']), 1)}u",)
    spec = gm.inputs[0]
    counts, memory = [], None
    for k in range(len(gm.ops) + 1):
        d = work / f"cut{k}"
        d.mkdir()
        (d / "model.c").write_text(full if k == len(gm.ops) else cut_schedule(full, k))
        B.compile_firmware(board, B.firmware_sources(board) + [d / "model.c"], d / "firmware.elf",
                           model_defines=flags)
        counts.append(count(board, d / "firmware.elf", x, spec))
        if k == len(gm.ops):
            memory = B.elf_memory(d / "firmware.elf")
    calls = re.findall(r"    (qe_\w+)\(", full.split("void qe_model_invoke(void)", 1)[1])
    return dict(ops=gm.ops, costs=[b - a for a, b in zip(counts, counts[1:])], total=counts[-1],
                base=counts[0], flash=memory[0], ram=memory[1], arena=gm.arena_bytes, calls=calls,
                kernels_called=_kernel_per_op(full))


def _kernel_per_op(model_c: str) -> list[str]:
    body = model_c.split("void qe_model_invoke(void)\n{\n", 1)[1].split("\n}\n", 1)[0]
    out, cur = [], None
    for ln in body.split("\n"):
        if re.match(r"    /\* op \d+:", ln):
            if cur is not None:
                out.append(cur)
            cur = "-"
        elif ln.strip().startswith("qe_"):
            cur = ln.strip().split("(", 1)[0]
    out.append(cur)
    return out


def build_times(board, model_paths: list[Path], work: Path) -> tuple[float, float]:
    """(seconds for a build with an empty object cache, for the next model's build after it)."""
    import os
    old = os.environ.get(B.CACHE_ENV)
    os.environ[B.CACHE_ENV] = str(work / "fresh-cache")
    try:
        times = []
        for k, m in enumerate(model_paths[:2]):
            t = time.perf_counter()
            B.build(m, board, work / f"time{k}")
            times.append(time.perf_counter() - t)
        return times[0], times[1]
    finally:
        if old is None:
            os.environ.pop(B.CACHE_ENV)
        else:
            os.environ[B.CACHE_ENV] = old


RENDER_MARKER = ("<!-- below: rendered by benchmarks/speed.py from the .jsonl beside this file "
                 "(--render); edit above this line only -->")


def table(name: str, board_id: str, cpu: str, cost_unit: str, macs: list[int], ref: dict,
          opt: dict, variant: str) -> str:
    unit = "cycles" if cost_unit == "cycles" else "instr"
    L = [f"### {name} on {board_id} ({cpu})", "",
         f"| op | kind | MACs | reference: kernel | {unit} | /MAC | {variant}: kernel | {unit} | /MAC | ref/opt |",
         "|---|---|---:|---|---:|---:|---|---:|---:|---:|"]
    for i, op in enumerate(ref["ops"]):
        r, o = ref["costs"][i], opt["costs"][i]
        per = lambda c: f"{c / macs[i]:.2f}" if macs[i] else ""  # noqa: E731
        L.append(f"| {i} | {op} | {macs[i]:,} | {ref['kernels_called'][i]} | {r:,} | {per(r)} | "
                 f"{opt['kernels_called'][i]} | {o:,} | {per(o)} | "
                 f"{f'{r / o:.2f}x' if o else ''} |")
    total = sum(macs)
    L.append(f"| | **total** (inference) | {total:,} | | **{ref['total']:,}** | "
             f"**{ref['total'] / total:.2f}** | | **{opt['total']:,}** | **{opt['total'] / total:.2f}** | "
             f"{ref['total'] / opt['total']:.2f}x |")
    L.append("")
    bound = (f"SMLAD bound: {0.5 * total:,.0f} instructions (0.5 / MAC). "
             if variant == "cortex-m-dsp" else
             f"MAC-loop floor of the avr layout: {7.5 * total:,.0f} cycles (7.5 / MAC). "
             if variant == "avr" else "")
    L.append(f"{bound}Harness outside the ops "
             f"(BENCH with an empty schedule): reference {ref['base']:,}, {variant} {opt['base']:,}. "
             f"Flash / RAM: reference {ref['flash']:,} B / {ref['ram']:,} B, {variant} "
             f"{opt['flash']:,} B / {opt['ram']:,} B (arena {ref['arena']:,} B / {opt['arena']:,} B).")
    L.append("")
    return "\n".join(L)


def model_row(board, name: str, path: Path, macs: list[int], res: dict, variant: str) -> dict:
    return {"kind": "model", "board": board.id, "cpu": board.cpu, "cost_unit": board.cost_unit,
            "variant": variant, "model": name, "file": path.name, "macs": macs,
            "reference": res["reference"], "optimized": res[variant]}


def render_row(r: dict) -> str:
    if r["kind"] == "build_time":
        return (f"Build time on {r['board']} (host, this machine): {r['cold_s']:.2f} s with an "
                f"empty object cache, {r['warm_s']:.2f} s for the next model (its model.c "
                f"compiled, and harness.c when the input size differs).\n")
    return table(f"{r['model']} ({r['file']})", r["board"], r["cpu"], r["cost_unit"], r["macs"],
                 r["reference"], r["optimized"], r["variant"])


def _key(r: dict) -> tuple:
    return (r["kind"], r["board"], r.get("model"))


def merge_rows(old: list[dict], new: list[dict]) -> list[dict]:
    """old's rows in their order, each replaced by new's row of the same key; new's other rows
    after the last old row of their board (a board's tables stay together), else at the end."""
    fresh = {_key(r): r for r in new}
    out = [fresh.pop(_key(r), r) for r in old]
    for r in new:
        if _key(r) not in fresh:
            continue
        fresh.pop(_key(r))
        at = max((i for i, o in enumerate(out) if o["board"] == r["board"] and o["kind"] == "model"),
                 default=len(out) - 1) + 1
        if r["kind"] == "build_time":
            at = len(out) if not any(o["board"] == r["board"] for o in out) else \
                max(i for i, o in enumerate(out) if o["board"] == r["board"]) + 1
        out.insert(at, r)
    return out


def read_rows(jsonl: Path) -> list[dict]:
    if not jsonl.exists():
        return []
    return [json.loads(ln) for ln in jsonl.read_text().splitlines() if ln.strip()]


def _tflm_counts(board: str, file: str) -> dict[str, int]:
    """TF Lite Micro's instructions for a model on a board from vs_tflm.jsonl (benchmarks/
    vs_tflm.py's rows, same counter), by build ("tflm", "tflm+cmsis-nn"); {} where it has none."""
    rows = read_rows(ROOT / "results" / "bench" / "vs_tflm.jsonl")
    return {r["build"]: r["instructions"] for r in rows
            if r.get("board") == board and r.get("file") == file and r.get("outputs_equal")
            and r.get("build", "").startswith("tflm")}


def before_after(rows: list[dict], before: list[dict]) -> str:
    """Instructions per MAC per board and model: the variant's total and its FULLY_CONNECTED
    ops, in `before`'s rows (an earlier run's .jsonl) and in `rows`, beside TF Lite Micro's on
    the same board where vs_tflm.jsonl has the model."""
    old = {_key(r): r for r in before}
    L = ["### Instructions per MAC, before and after", "",
         "| board | model | MACs | op (MACs) | before | after | TFLM | TFLM + CMSIS-NN |",
         "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        if r["kind"] != "model" or _key(r) not in old:
            continue
        b, macs, total = old[_key(r)]["optimized"], r["macs"], sum(r["macs"])
        tf = _tflm_counts(r["board"], r["file"])
        per = lambda c: f"{c / total:.2f}" if c else ""  # noqa: E731
        L.append(f"| {r['board']} ({r['variant']}) | {r['model']} | {total:,} | **total** | "
                 f"**{b['total'] / total:.2f}** | **{r['optimized']['total'] / total:.2f}** | "
                 f"{per(tf.get('tflm'))} | {per(tf.get('tflm+cmsis-nn'))} |")
        for i, op in enumerate(r["reference"]["ops"]):
            if macs[i]:
                L.append(f"| | | | {i} {op} ({macs[i]:,}) | {b['costs'][i] / macs[i]:.2f} | "
                         f"{r['optimized']['costs'][i] / macs[i]:.2f} | | |")
    return "\n".join(L) + "\n"


def write_md(md: Path, rows: list[dict], before: list[dict] | None = None) -> None:
    """md: its hand-written text above RENDER_MARKER kept (all of an old file without the
    marker), the tables of `rows` below it (with `before`: the before/after table first)."""
    head = md.read_text().split(RENDER_MARKER, 1)[0].rstrip("\n") + "\n\n" if md.exists() else ""
    md.parent.mkdir(parents=True, exist_ok=True)
    first = before_after(rows, before) + "\n" if before else ""
    md.write_text(head + RENDER_MARKER + "\n\n" + first + "\n".join(render_row(r) for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", default="mps2-an386")
    ap.add_argument("--models", default="cnn,cartpole")
    ap.add_argument("--md", type=Path, help="also write the rows to its .jsonl and render it")
    ap.add_argument("--render", action="store_true",
                    help="only render --md from the .jsonl beside it")
    ap.add_argument("--before", type=Path,
                    help="an earlier run's .jsonl: --md also gets a before/after table of "
                         "instructions per MAC (with TF Lite Micro's from vs_tflm.jsonl)")
    ap.add_argument("--varying-ok", action="store_true",
                    help="take BENCH's minimum where its counts vary (said on stderr)")
    ap.add_argument("--no-build-times", action="store_true",
                    help="skip the cold / warm build-time rows (they rebuild every source)")
    a = ap.parse_args()
    global VARYING_OK
    VARYING_OK = a.varying_ok
    before = read_rows(a.before) if a.before else None
    if a.render:
        if a.md is None:
            ap.error("--render needs --md FILE")
        rows = read_rows(a.md.with_suffix(".jsonl"))
        if not rows:
            ap.error(f"no rows in {a.md.with_suffix('.jsonl')}")
        write_md(a.md, rows, before)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="qe-speed-") as tmp:
        tmp = Path(tmp)
        paths = {}
        for name in a.models.split(","):
            if name == "cnn":
                paths[name] = cnn_model(tmp / "cnn_16x16x2_int8.tflite")
            elif name == "minatar":
                paths[name] = minatar_model(tmp / "minatar_dqn_int8.tflite")
            elif name.startswith("mlp"):
                paths[name] = mlp_model(tmp / f"{name}_int8.tflite", int(name[3:]))
            else:
                paths[name] = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"
        rng = np.random.default_rng(0)
        for bid in a.boards.split(","):
            board = get_board(bid)
            variant = board.kernels
            for name, path in paths.items():
                x = (rng.standard_normal(16 * 16 * 2) if name == "cnn"
                     else rng.standard_normal(8) if name.startswith("mlp")
                     else (rng.random(10 * 10 * 4) > 0.8) if name == "minatar"
                     else np.load(ROOT / "examples" / "cartpole_dqn" / "calibration.npy")[0])
                res = {}
                for kset in ("reference", variant):
                    w = tmp / f"{bid}-{name}-{kset}"
                    w.mkdir()
                    res[kset] = per_op(path, dataclasses.replace(board, kernels=kset), w,
                                       np.asarray(x, np.float32))
                rows.append(model_row(board, name, path, macs_per_op(path), res, variant))
                print(render_row(rows[-1]), flush=True)
            if a.no_build_times:
                continue
            cold, warm = build_times(board, list(paths.values()) * 2, tmp)
            rows.append({"kind": "build_time", "board": bid, "cold_s": cold, "warm_s": warm})
            print(render_row(rows[-1]), flush=True)
    if a.md:
        jsonl = a.md.with_suffix(".jsonl")
        rows = merge_rows(read_rows(jsonl), rows)
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
        write_md(a.md, rows, before)


if __name__ == "__main__":
    main()
