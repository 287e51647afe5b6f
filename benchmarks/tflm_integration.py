"""TF Lite Micro's own integration tests, run through quarl-edge (issue 26).

tflite-micro's `tensorflow/lite/micro/integration_tests/seanet/` holds 127 int16 layer models of
a real audio network, one folder per op (add, conv, leaky_relu, pad, quantize, strided_slice,
sub, transpose_conv), each model NAME.tflite with its inputs NAME_input{K}_{dtype}.csv (input K
of the interpreter) and the expected output NAME_golden_{dtype}.csv. TFLM's own test accepts
an output within 1 of the golden value ("TfLite and TFLM can sometimes be off by 1").

Each model is validated here as a user would (`quarl_edge.validate`, the CSVs as one sample of
exactly the model's input tensors), on each board, and the board's output is compared with:

    TFLM        today's TF Lite Micro interpreter on the host (validate's bit-exact check)
    CSV         the committed golden CSV, exactly
    CSV +-1     the golden CSV within 1, TFLM's own criterion

A model whose CSV differs from today's TFLM where the board equals TFLM has a stale CSV: the
table names those files. A model quarl-edge refuses has the first line of its reason.

    .venv/bin/python benchmarks/tflm_integration.py --suite TFLM/tensorflow/lite/micro/integration_tests/seanet \\
        [--boards host,mps2-an386] [--ops add,sub] [--md results/tflm-integration/seanet.md]

Rows go to --jsonl (default beside --md) as each model finishes; a model already there is not
run again (--force runs all), so an interrupted run resumes.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DTYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "float32": np.float32}


def models(suite: Path, ops: list[str] | None):
    for op_dir in sorted(p for p in suite.iterdir() if p.is_dir()):
        if ops and op_dir.name not in ops:
            continue
        for m in sorted(op_dir.glob("*.tflite"), key=lambda p: (len(p.stem), p.stem)):
            yield op_dir.name, m


def csv_array(path: Path) -> np.ndarray:
    m = re.search(r"_(int8|int16|int32|float32)\.csv$", path.name)
    text = path.read_text().replace("\n", ",")
    return np.array([v for v in text.split(",") if v.strip()], dtype=DTYPES[m.group(1)])


def case_files(model: Path) -> tuple[list[Path], Path]:
    inputs = sorted(model.parent.glob(f"{model.stem}_input*_*.csv"),
                    key=lambda p: int(re.search(r"_input(\d+)_", p.name).group(1)))
    golden = next(model.parent.glob(f"{model.stem}_golden_*.csv"))
    return inputs, golden


def reason(e: Exception) -> str:
    """The refusal's first line, without the list of supported ops."""
    return str(e).splitlines()[0].split(". Supported: ")[0]


def run_one(qe, op: str, model: Path, boards: list[str], tmp: Path) -> dict:
    from quarl_edge.core.errors import QuarlError
    from quarl_edge.measure.reference import host_reference
    row = {"op": op, "model": model.name, "boards": {}}
    inputs, golden_csv = case_files(model)
    golden = csv_array(golden_csv)
    try:
        ref = host_reference(model, micro=True)
        arrays = {f"arr_{k}": csv_array(f).reshape(d["shape"])
                  for k, (f, d) in enumerate(zip(inputs, ref.inputs))}
    except (QuarlError, ValueError) as e:
        row["refused"] = reason(e)
        return row
    npz = tmp / f"{model.stem}.npz"
    np.savez(npz, **arrays)
    for board in boards:
        y_path = tmp / f"{model.stem}-{board}.npy"
        t0 = time.time()
        try:
            res = qe.validate(model, board, inputs=npz, save_outputs=y_path,
                              out=tmp / "build" / board / model.stem)
        except QuarlError as e:
            row["refused"] = reason(e)
            return row
        y = np.load(y_path).reshape(-1)
        diff = np.abs(y.astype(np.int64) - golden.astype(np.int64)) if y.size == golden.size \
            else None
        row["boards"][board] = {
            "equals_tflm": bool(res.bit_exact),
            "equals_csv": diff is not None and int(diff.max()) == 0,
            "within_1_of_csv": diff is not None and int(diff.max()) <= 1,
            "csv_max_diff": None if diff is None else int(diff.max()),
            "csv_values_off": None if diff is None else int((diff > 0).sum()),
            "cost": res.latency.median, "cost_unit": res.latency.unit,
            "seconds": round(time.time() - t0, 1)}
    return row


def table(rows: list[dict], boards: list[str], header: str) -> str:
    by_op = defaultdict(list)
    for r in rows:
        by_op[r["op"]].append(r)
    head = ["op", "models", "refused", *(f"= TFLM on {b}" for b in boards), "= CSV", "CSV +-1"]
    out = [header, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total = defaultdict(int)
    for op, rs in sorted(by_op.items()):
        ran = [r for r in rs if "refused" not in r]
        cells = [op, len(rs), len(rs) - len(ran)]
        cells += [sum(r["boards"][b]["equals_tflm"] for r in ran) for b in boards]
        first = boards[0]
        cells += [sum(r["boards"][first]["equals_csv"] for r in ran),
                  sum(r["boards"][first]["within_1_of_csv"] for r in ran)]
        for k, v in zip(head[1:], cells[1:]):
            total[k] += v
        out.append("| " + " | ".join(map(str, cells)) + " |")
    out.append("| **all** | " + " | ".join(str(total[k]) for k in head[1:]) + " |")
    stale = [r for r in rows if "refused" not in r
             and all(r["boards"][b]["equals_tflm"] for b in boards)
             and not r["boards"][boards[0]]["equals_csv"]]
    out += ["", f"Stale golden CSVs (the board equals today's TFLM, the committed CSV does not): "
            f"{len(stale)}", ""]
    out += [f"- `{r['op']}/{r['model']}`: {r['boards'][boards[0]]['csv_values_off']} values "
            f"off, at most {r['boards'][boards[0]]['csv_max_diff']}" for r in stale]
    refused = [r for r in rows if "refused" in r]
    out += ["", f"Refused: {len(refused)}", ""]
    out += [f"- `{r['op']}/{r['model']}`: {r['refused']}" for r in refused]
    not_tflm = [r for r in rows if "refused" not in r
                and not all(r["boards"][b]["equals_tflm"] for b in boards)]
    out += ["", f"Not equal to TFLM: {len(not_tflm)}", ""]
    out += [f"- `{r['op']}/{r['model']}`: " + ", ".join(
        b for b in boards if not r["boards"][b]["equals_tflm"]) for r in not_tflm]
    return "\n".join(out) + "\n"


def suite_commit(suite: Path) -> str:
    p = subprocess.run(["git", "-C", str(suite), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else "unknown"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", type=Path, required=True,
                   help="tflite-micro's tensorflow/lite/micro/integration_tests/seanet")
    p.add_argument("--boards", default="host,mps2-an386")
    p.add_argument("--ops", default=None, help="only these op folders (comma-separated)")
    p.add_argument("--commit", default=None, help="the tflite-micro commit (default: git's)")
    p.add_argument("--md", type=Path, default=ROOT / "results" / "tflm-integration" / "seanet.md")
    p.add_argument("--jsonl", type=Path, default=None)
    p.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    if not a.suite.is_dir():
        p.error(f"--suite {a.suite}: no such directory")
    import quarl_edge as qe
    boards = [b for b in a.boards.split(",") if b]
    jsonl = a.jsonl or a.md.with_suffix(".jsonl")
    done = {} if a.force or not jsonl.is_file() else {
        (r["op"], r["model"]): r for r in map(json.loads, jsonl.read_text().splitlines())}
    rows = []
    ops = a.ops.split(",") if a.ops else None
    with tempfile.TemporaryDirectory() as tmp:
        for op, model in models(a.suite, ops):
            key = (op, model.name)
            if key in done and ("refused" in done[key] or set(done[key]["boards"]) >= set(boards)):
                rows.append(done[key])
                continue
            row = run_one(qe, op, model, boards, Path(tmp))
            rows.append(row)
            done[key] = row
            write(jsonl, "".join(json.dumps(r) + "\n" for r in done.values()))
            state = row.get("refused") or " ".join(
                f"{b}:{'=' if v['equals_tflm'] else 'DIFF'}" for b, v in row["boards"].items())
            print(f"{op}/{model.name}: {state}", file=sys.stderr)
    commit = a.commit or suite_commit(a.suite)
    header = (f"TF Lite Micro's seanet integration tests (tflite-micro {commit}, "
              f"{len(rows)} models) through `quarl-edge validate` on {', '.join(boards)}, made by "
              f"`python benchmarks/tflm_integration.py --suite .../integration_tests/seanet "
              f"--boards {','.join(boards)}` on {time.strftime('%Y-%m-%d')}. = TFLM: the board's "
              f"output equals today's TF Lite Micro interpreter bit for bit; = CSV: equals the "
              f"committed golden CSV; CSV +-1: within 1 of it (TFLM's own test's tolerance).")
    text = table(rows, boards, header)
    print(text)
    write(a.md, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
