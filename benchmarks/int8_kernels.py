"""Instructions per inference on the emulated Cortex-M boards with an FPU and the DSP extension,
measured side by side in one run: the float32 model, and the int8 model with our reference
kernels and with the optimized variant (firmware/core/kernels/optimized/). Costs are QEMU
instruction counts (-icount: exact and repeatable), on the same board, same model, same
observation; only the kernel files differ (the board's `[build] kernels`, overridden here).

    .venv/bin/python benchmarks/int8_kernels.py [RUN_DIR] [--boards mps2-an386,...] [--variant V]
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from quarl_edge.targets.boards import get_board
from quarl_edge import pipeline
from quarl_edge.core.run import Run

ROOT = Path(__file__).resolve().parents[1]
DSP_BOARDS = ("mps2-an386", "mps2-an500", "mps2-an505", "netduinoplus2")


def cost(model: Path, board, obs: np.ndarray, n: int) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp, pipeline.session_for(model, board, Path(tmp)) as s:
        spec = s.info.inputs[0]
        s.link.infer([obs.reshape(spec.shape).astype(spec.dtype)])
        stats = s.link.bench(n)
        assert stats.min == stats.max, f"{board.id}: instruction counts vary ({stats.min}..{stats.max})"
        return stats.mean, s.memory()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=ROOT / "examples" / "cartpole_dqn", type=Path)
    ap.add_argument("--boards", default=",".join(DSP_BOARDS))
    ap.add_argument("--variant", default="cortex-m-dsp")
    ap.add_argument("--n", type=int, default=10)
    a = ap.parse_args()
    run = Run(a.run)
    obs = run.load_calibration()[0]
    print(f"{'board':14s} {'cpu':10s} {'fp32':>8s} {'int8 ref':>9s} {'int8 ' + a.variant:>18s} "
          f"{'ref/opt':>8s} {'fp32/ref':>9s} {'fp32/opt':>9s} {'flash ref':>10s} {'flash opt':>10s}")
    for bid in a.boards.split(","):
        board = get_board(bid)
        ref_board = dataclasses.replace(board, kernels="reference")
        opt_board = dataclasses.replace(board, kernels=a.variant)
        fp32, _ = cost(run.tflite("fp32"), ref_board, obs, a.n)
        ref, ref_mem = cost(run.tflite("int8"), ref_board, obs, a.n)
        opt, opt_mem = cost(run.tflite("int8"), opt_board, obs, a.n)
        print(f"{bid:14s} {board.cpu:10s} {fp32:>8,.0f} {ref:>9,.0f} {opt:>18,.0f} "
              f"{ref / opt:>7.2f}x {fp32 / ref:>8.2f}x {fp32 / opt:>8.2f}x "
              f"{ref_mem.get('flash_bytes'):>10} {opt_mem.get('flash_bytes'):>10}", flush=True)


if __name__ == "__main__":
    main()
