"""How the C generator's time grows with the number of ops (issue 36: near-linear).

    .venv/bin/python benchmarks/codegen_scaling.py [N ...] [--profile N] [--compile]

For each N (default 2000 10000 20000) it builds a chain of N float32 ops, FULLY_CONNECTED and
RELU in turn (one shared 4x4 weight tensor, so the file grows with the ops only), times
`quarl_edge.converters.cgen.generate` on it and prints the wall and CPU seconds (CPU: this
process's, steadier on a shared machine), the CPU seconds per 1,000 ops and model.c's size.
--profile N prints cProfile's top functions for one N; --compile also times `gcc -std=c99 -O2
-c` of each model.c (the build step of `validate --board host`).

The reader refuses models past tflite_model.MAX_OPS (gcc's time, not the generator's, is what
that limit bounds); this script lifts it (and MAX_TENSORS) to its largest N to measure the
generator beyond it.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from helpers_tflite import build_tflite, schema, tensor  # noqa: E402


def chain_model(n_ops: int) -> bytes:
    """x -> FC(W) -> RELU -> FC(W) -> RELU ... : n_ops ops on [1, 4] float32 activations."""
    s = schema()
    w = (np.arange(16, dtype=np.float32).reshape(4, 4) - 8) / 64    # a contraction: no overflow
    tensors = [tensor("x0", [1, 4], s.TensorType.FLOAT32, 0),
               tensor("dense/kernel", [4, 4], s.TensorType.FLOAT32, 1)]
    ops = []
    prev = 0
    for k in range(n_ops):
        tensors.append(tensor(f"layer_{k}/out", [1, 4], s.TensorType.FLOAT32, 0))
        out = len(tensors) - 1
        if k % 2 == 0:
            opt = s.FullyConnectedOptionsT()
            ops.append(("FULLY_CONNECTED", [prev, 1, -1], [out], opt))
        else:
            ops.append(("RELU", [prev], [out], None))
        prev = out
    return build_tflite(tensors, [None, w.tobytes()], ops, [0], [prev])


def time_generate(n_ops: int, work: Path, profile: bool = False) -> tuple[float, float, Path]:
    from quarl_edge.converters import cgen
    path = work / f"chain{n_ops}.tflite"
    path.write_bytes(chain_model(n_ops))
    prof = cProfile.Profile() if profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    gm = cgen.generate(path, work / f"gen{n_ops}")
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return time.perf_counter() - t0, time.process_time() - c0, gm.c_path


def time_compile(c_path: Path) -> float:
    core = ROOT / "firmware" / "core"
    t0 = time.perf_counter()
    subprocess.run(["gcc", "-std=c99", "-O2", "-c", f"-I{core}", str(c_path), "-o",
                    str(c_path.with_suffix(".o"))], check=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="*", type=int, default=[2000, 10000, 20000],
                    help="numbers of ops (default 2000 10000 20000)")
    ap.add_argument("--profile", type=int, metavar="N", help="cProfile one generation of N ops")
    ap.add_argument("--compile", action="store_true", help="also time gcc -O2 -c of model.c")
    args = ap.parse_args(argv)
    from quarl_edge.converters import tflite_model
    most = max([*args.n, args.profile or 0])
    tflite_model.MAX_OPS = max(most, getattr(tflite_model, "MAX_OPS", 0))
    tflite_model.MAX_TENSORS = max(2 * most + 2, getattr(tflite_model, "MAX_TENSORS", 0))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.profile:
            time_generate(args.profile, work, profile=True)
            return 0
        print(f"{'ops':>8} {'wall s':>8} {'CPU s':>8} {'CPU s/1k ops':>13} {'model.c MB':>11}"
              + (f" {'gcc -O2 s':>10}" if args.compile else ""))
        for n in args.n:
            secs, cpu, c_path = time_generate(n, work)
            line = (f"{n:>8} {secs:>8.2f} {cpu:>8.2f} {cpu / n * 1000:>13.3f} "
                    f"{c_path.stat().st_size / 1e6:>11.2f}")
            if args.compile:
                line += f" {time_compile(c_path):>10.2f}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
