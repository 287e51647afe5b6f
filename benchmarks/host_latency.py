"""Latency per inference on the host, measured side by side in one run: our generated firmware
(BENCH on the `host` board, nanoseconds on the board's own clock) vs the TF Lite Micro interpreter
and tflite-runtime (timed around invoke() from Python, so they carry some Python overhead; the
ratio is an upper bound on our advantage over them).

    .venv/bin/python benchmarks/host_latency.py [RUN_DIR] [--n 20000]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


from quarl_edge.targets.boards import get_board
from quarl_edge import pipeline
from quarl_edge.core.run import Run
from quarl_edge.measure.reference import TFLiteRuntime, TFLMReference

ROOT = Path(__file__).resolve().parents[1]


def time_invoke(run_one, x, n: int) -> float:
    run_one([x])                                   # warm up
    t0 = time.perf_counter_ns()
    for _ in range(n):
        run_one([x])
    return (time.perf_counter_ns() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=ROOT / "examples" / "cartpole_dqn", type=Path)
    ap.add_argument("--n", type=int, default=20_000)
    a = ap.parse_args()
    board = get_board("host")
    obs = Run(a.run).load_calibration()[:1]
    print(f"{'model':6s} {'ours (board BENCH)':>20s} {'TFLM interpreter':>18s} {'tflite-runtime':>16s} "
          f"{'TFLM/ours':>10s} {'tflite-rt/ours':>15s}")
    for scheme in ("fp32", "int8"):
        model = Run(a.run).tflite(scheme)
        with tempfile.TemporaryDirectory() as tmp, pipeline.session_for(model, board, Path(tmp)) as s:
            s.link.infer([obs.reshape(s.info.inputs[0].shape)])
            ours = s.link.bench(min(a.n, 65535)).mean
        tflm = time_invoke(TFLMReference(model).run, obs, a.n)
        rt = time_invoke(TFLiteRuntime(model).run, obs, a.n)
        print(f"{scheme:6s} {ours:>17,.0f} ns {tflm:>15,.0f} ns {rt:>13,.0f} ns {tflm / ours:>9.1f}x "
              f"{rt / ours:>14.1f}x")


if __name__ == "__main__":
    main()
