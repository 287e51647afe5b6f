"""Our statically planned arena against TF Lite Micro's, and the generated code size.

    .venv/bin/python benchmarks/arena_vs_tflm.py [MODEL.tflite ...]

Without arguments it converts a fixed set of policy-shaped models (and uses the shipped
examples/cartpole_dqn models). Per model it prints:

- ours: the activation arena cgen planned (bytes, 16-byte aligned; RESHAPE aliases, in-place
  element-wise ops, liveness sharing);
- tflm head: the non-persistent arena section TFLM's greedy planner uses for the same tensors
  (RecordingMicroAllocator, `Interpreter.print_allocations`); tflm total adds TFLM's persistent
  bookkeeping (tensor/node structs, op data), which generated code keeps in flash as const data;
- model.c .text+.rodata compiled with gcc -Os (host) and arm-none-eabi-gcc -Os -mcpu=cortex-m4
  -mthumb: weights, parameters, tables and the schedule. The kernels are a fixed cost, printed
  once at the end (all kernel files; a linker with --gc-sections keeps only the ones used).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from helpers_models import CORE, convert, random_cnn, random_mlp, tflm_arena  # noqa: E402

ARM = ["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb"]


def default_models(tmp: Path) -> list[Path]:
    calib = np.random.default_rng(0).standard_normal((128, 8))
    specs = [
        ("dqn_64x64_int8", random_mlp(1, 4, [64, 64, 2], ["relu", "relu", "none"]), "int8"),
        ("dqn_64x64_fp32", random_mlp(1, 4, [64, 64, 2], ["relu", "relu", "none"]), "float"),
        ("dqn_64x64_int16x8", random_mlp(1, 4, [64, 64, 2], ["relu", "relu", "none"]), "int16x8"),
        ("ppo_tanh_64x64_int8", random_mlp(2, 8, [64, 64, 2], ["tanh", "tanh", "tanh"]), "int8"),
        ("ppo_tanh_64x64_int8_io", random_mlp(2, 8, [64, 64, 2], ["tanh", "tanh", "tanh"]), "int8_io"),
        ("ppo_tanh_64x64_fp32", random_mlp(2, 8, [64, 64, 2], ["tanh", "tanh", "tanh"]), "float"),
        ("sac_256x256_int8", random_mlp(3, 17, [256, 256, 6], ["relu", "relu", "tanh"]), "int8"),
        ("cnn_16x16x2_maxpool_int8", random_cnn(1, pool="max"), "int8"),
        ("cnn_16x16x2_maxpool_int8_io", random_cnn(1, pool="max"), "int8_io"),
        ("cnn_16x16x2_gap_fp32", random_cnn(1, pool="gap"), "float"),
    ]
    paths = []
    for name, model, mode in specs:
        c = calib if tuple(model.input_shape[1:]) == (8,) else np.random.default_rng(0).standard_normal(
            (128, *model.input_shape[1:]))
        p = tmp / f"{name}.tflite"
        p.write_bytes(convert(model, mode, c))
        paths.append(p)
    for scheme in ("int8", "fp32"):
        ex = ROOT / "examples" / "cartpole_dqn" / "models" / f"{scheme}.tflite"
        if ex.is_file():
            paths.append(ex)
    return paths


def text_rodata(obj: Path, size_tool: str) -> int:
    out = subprocess.run([size_tool, "-A", str(obj)], capture_output=True, text=True, check=True).stdout
    total = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and (parts[0].startswith(".text") or parts[0].startswith(".rodata")):
            total += int(parts[1])
    return total


def code_size(sources: list[Path], work: Path, arm: bool) -> int | None:
    cc = ARM if arm else ["gcc"]
    if shutil.which(cc[0]) is None:
        return None
    size_tool = "arm-none-eabi-size" if arm else "size"
    total = 0
    for k, src in enumerate(sources):
        obj = work / f"{'arm' if arm else 'host'}_{k}.o"
        subprocess.run([*cc, "-std=c99", "-Os", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
                        f"-I{CORE}", "-c", str(src), "-o", str(obj)], check=True)
        total += text_rodata(obj, size_tool)
    return total


def main(argv: list[str]) -> int:
    from quarl_edge.converters import cgen
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        models = [Path(a) for a in argv] or default_models(tmp)
        hdr = (f"{'model':28s} {'ops':>4s} {'ours':>7s} {'tflm head':>10s} {'tflm total':>11s} "
               f"{'model.c gcc -Os':>16s} {'model.c M4 -Os':>15s}")
        print(hdr)
        print("-" * len(hdr))
        for k, path in enumerate(models):
            gen = tmp / f"gen{k}"
            gm = cgen.generate(path, gen)
            tflm = tflm_arena(path.read_bytes())
            host = code_size([gm.c_path], gen, arm=False)
            m4 = code_size([gm.c_path], gen, arm=True)
            label = path.stem if path.parent.name != "models" else f"cartpole_{path.stem}"
            print(f"{label:28s} {len(gm.ops):4d} {gm.arena_bytes:7d} {tflm['head']:10d} "
                  f"{tflm['total']:11d} {host if host is not None else '-':>16} "
                  f"{m4 if m4 is not None else '-':>15}")
        kernels = [CORE / "requant.c"] + sorted((CORE / "kernels").glob("*.c"))
        print(f"\nkernels + requant (all {len(kernels) - 1} kernel files, fixed cost): "
              f"gcc -Os {code_size(kernels, tmp, arm=False)} B, "
              f"cortex-m4 -Os {code_size(kernels, tmp, arm=True)} B (.text+.rodata)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
