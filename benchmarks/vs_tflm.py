"""TF Lite Micro (reference kernels, and with CMSIS-NN) beside our firmware (reference kernels, and
the board's optimized variant) on the same .tflite models, the same emulated board and the same
instruction counter.

    .venv/bin/python benchmarks/vs_tflm.py --tflm-src DIR --cmsis-nn-src DIR \\
        --flatbuffers-src DIR --gemmlowp-src DIR --ruy-src DIR [--cmsis-src DIR] [--tiny-src DIR] \\
        [--models cartpole,cnn,kws] [--board mps2-an386] [--md results/bench/vs_tflm.md]

Every third-party source is a checkout the user provides (nothing is downloaded):
  --tflm-src         github.com/tensorflow/tflite-micro
  --cmsis-nn-src     github.com/ARM-software/CMSIS-NN (TFLM pins its commit in
                     tensorflow/lite/micro/tools/make/ext_libs/cmsis_nn_download.sh)
  --flatbuffers-src  github.com/google/flatbuffers at the tag TFLM pins (flatbuffers_download.sh;
                     TFLM's schema_generated.h checks the version)
  --gemmlowp-src     github.com/google/gemmlowp (its fixedpoint/ headers; third_party_downloads.inc)
  --ruy-src          github.com/google/ruy (a profiler header; third_party_downloads.inc)
  --cmsis-src        github.com/ARM-software/CMSIS_6 (optional: only put on the include path)
  --tiny-src         github.com/mlcommons/tiny (optional: the "kws" model, MLPerf Tiny's keyword
                     spotting DS-CNN, benchmark/training/keyword_spotting/trained_models/)
A TFLM C++ build also needs the C++ headers for arm-none-eabi (Debian: libstdc++-arm-none-eabi-newlib).

TF Lite Micro is compiled by this script (not by TFLM's Makefile, which downloads its
dependencies): the micro framework (tensorflow/lite/micro/*.cc, arena_allocator, memory_planner,
tflite_bridge, the shared tensorflow/lite and tensorflow/compiler sources), and of the kernels only
those the model's operators need (their .cc and *_common.cc, plus kernel_util.cc). The CMSIS-NN
build is TFLM's own recipe (ext_libs/cmsis_nn.inc): -DCMSIS_NN, each kernel that has a file in
kernels/cmsis_nn/ taken from there, and CMSIS-NN's Source/**/*.c (minus the f16/f32 files).
Compiler flags: the board file's cflags (for mps2-an386 -mcpu=cortex-m4 -mthumb -mfloat-abi=hard
-mfpu=fpv4-sp-d16 -O2 -ffunction-sections -fdata-sections) for both sides, plus -ffp-contract=off
as in our firmware, plus TFLM's release flags (-DNDEBUG -DTF_LITE_STRIP_ERROR_STRINGS
-DTF_LITE_STATIC_MEMORY, -fno-rtti -fno-exceptions -fno-threadsafe-statics
-fno-unwind-tables); linked with the board's ldflags (its linker script, nano.specs,
--gc-sections).

How it counts: the TFLM firmware is benchmarks/vs_tflm_harness.cc on the project's Cortex-M port
(start-up, UART, the SysTick instruction counter under QEMU -icount): one Invoke as a warm-up, then
Invoke between qe_port_cost_start() and qe_port_cost_stop(), the same bracket as our firmware's
BENCH around qe_model_invoke(); the input is copied in outside it. Ours: the generated firmware,
one INFER then BENCH (min == max checked). Both outputs are compared byte for byte.
Flash: text + data of the ELF (arm-none-eabi-size), each with its own harness (ours carries the
whole host protocol; TFLM's prints one line). Arena: TFLM's arena_used_bytes() (tensors plus the
interpreter's own persistent data, in the arena by design) with the firmware relinked with an arena
of exactly that size, and our planner's arena; RAM: the ELF's .data + .bss (stack excluded).
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# the builds and their measurement (TFLM compiled from the checkouts, ours, QEMU): vs_tflm_build.py
from vs_tflm_build import SetupError, Toolchain, ours_measure, tflm_measure, toolchain
from vs_tflm_library import library_measure   # the "ours library" rows: the export alone

ROOT = Path(__file__).resolve().parents[1]
TINY_KWS = "benchmark/training/keyword_spotting/trained_models/kws_ref_model.tflite"

# --option: (what it is, a file that must be in it, required)
SOURCES = {
    "tflm_src": ("github.com/tensorflow/tflite-micro", "tensorflow/lite/micro/micro_interpreter.h", True),
    "cmsis_nn_src": ("github.com/ARM-software/CMSIS-NN", "Include/arm_nnfunctions.h", True),
    "flatbuffers_src": ("github.com/google/flatbuffers (the tag TF Lite Micro pins)",
                        "include/flatbuffers/flatbuffers.h", True),
    "gemmlowp_src": ("github.com/google/gemmlowp", "fixedpoint/fixedpoint.h", True),
    "ruy_src": ("github.com/google/ruy", "ruy/profiler/instrumentation.h", True),
    "cmsis_src": ("github.com/ARM-software/CMSIS_6", "CMSIS/Core/Include/cmsis_compiler.h", False),
    "tiny_src": ("github.com/mlcommons/tiny", TINY_KWS, False),
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    for key, (what, _, required) in SOURCES.items():
        opt = "--" + key.replace("_", "-")
        ap.add_argument(opt, type=Path, metavar="DIR",
                        help=f"a checkout of {what}" + ("" if required else " (optional)"))
    ap.add_argument("--models", default="cartpole,cnn,kws",
                    help="cartpole (examples/cartpole_dqn int8), cnn (speed.py's 16x16x2 CNN), "
                         "kws (MLPerf Tiny DS-CNN; needs --tiny-src), or paths to .tflite files")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--md", type=Path, help="write the Markdown report here")
    ap.add_argument("--jsonl", type=Path, help="write one JSON line per measurement here "
                                               "(default: beside --md, .jsonl)")
    ap.add_argument("--work", type=Path, help="build directory (default: a temporary one); "
                                              "objects are cached in it across runs")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="parallel compiler processes")
    a = ap.parse_args(argv)
    missing = []
    for key, (what, marker, required) in SOURCES.items():
        opt = "--" + key.replace("_", "-")
        d = getattr(a, key)
        if d is None:
            if required:
                missing.append(f"{opt} DIR (a checkout of {what})")
            continue
        if not (d / marker).is_file():
            missing.append(f"{opt} {d}: no {marker} there; pass a checkout of {what}")
    if "kws" in a.models.split(",") and a.tiny_src is None:
        missing.append(f"--tiny-src DIR (a checkout of {SOURCES['tiny_src'][0]}) for the model "
                       "kws, or leave kws out of --models")
    if missing:
        ap.error("missing or wrong third-party sources (nothing is downloaded):\n  "
                 + "\n  ".join(missing))
    return a


# ----------------------------------------------------------------------------- sources
def commit_of(d: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(d), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=30)
    except OSError:
        return "unknown (git not found)"
    if out.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = subprocess.run(["git", "-C", str(d), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=120).stdout.strip()
    return out.stdout.strip() + (" (modified)" if dirty else "")


# ------------------------------------------------------------------------------ models
def models(a, work: Path) -> list[tuple[str, Path, object]]:
    import numpy as np
    out = []
    for name in a.models.split(","):
        if name == "cartpole":
            p = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"
            x = np.load(ROOT / "examples" / "cartpole_dqn" / "calibration.npy")[0]
        elif name == "cnn":
            sys.path.insert(0, str(ROOT / "benchmarks"))
            sys.path.insert(0, str(ROOT / "tests"))
            from speed import cnn_model   # the very model speed.py measures
            p = cnn_model(work / "cnn_16x16x2_int8.tflite")
            x = np.random.default_rng(0).standard_normal(16 * 16 * 2)   # speed.py's observation
        elif name == "kws":
            p = a.tiny_src / TINY_KWS
            x = np.random.default_rng(0).integers(-128, 128, 49 * 10)   # int8 MFCC features
        else:
            p = Path(name)
            if not p.is_file():
                raise SetupError(f"--models: {name} is neither cartpole, cnn, kws nor a file")
            x = None
        out.append((name, p, x))
    return out


def input_bytes(model: Path, x) -> tuple[bytes, object, list[str]]:
    import numpy as np
    from quarl_edge.converters.tflite_model import load
    m = load(model)
    t = m.tensors[m.inputs[0]]
    dtype = np.dtype(t.dtype)
    if x is None:
        x = np.random.default_rng(0).standard_normal(int(np.prod(t.shape)))
        if dtype != np.float32:
            x = np.clip(np.round(x * 40), np.iinfo(dtype).min, np.iinfo(dtype).max)
    arr = np.asarray(x).reshape(t.shape).astype(dtype)
    return arr.tobytes(), arr, [op.opcode for op in m.operators]


# ------------------------------------------------------------------------------ report
def fmt_table(rows: list[dict]) -> str:
    L = ["| model | build | instructions | vs TFLM | vs TFLM + CMSIS-NN | flash (text+data) B | "
         "arena B | RAM (data+bss) B |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
    by = {}
    for r in rows:
        by.setdefault(r["model"], {})[r["build"]] = r
    for model, builds in by.items():
        t = builds.get("tflm", {}).get("instructions")
        c = builds.get("tflm+cmsis-nn", {}).get("instructions")
        for b, r in builds.items():
            if "error" in r:
                L.append(f"| {model} | {b} | failed: {r['error'].splitlines()[0][:160]} | | | | | |")
                continue
            i = r["instructions"]
            L.append(f"| {model} | {b} | {i:,} | {t / i:.2f}x | {c / i:.2f}x | {r['flash']:,} | "
                     f"{r['arena']:,} | {r['ram']:,} |" if t and c else
                     f"| {model} | {b} | {i:,} | {f'{t / i:.2f}x' if t else ''} | "
                     f"{f'{c / i:.2f}x' if c else ''} | {r['flash']:,} | {r['arena']:,} | {r['ram']:,} |")
    return "\n".join(L)


def main(argv=None) -> int:
    a = parse_args(argv)
    from quarl_edge.targets.boards import get_board
    board = get_board(a.board)
    try:
        tc = toolchain(board)
        work_ctx = tempfile.TemporaryDirectory(prefix="qe-vs-tflm-") if a.work is None else None
        work = Path(work_ctx.name) if work_ctx else a.work.resolve()
        work.mkdir(parents=True, exist_ok=True)
        for key in SOURCES:
            if getattr(a, key) is not None:
                setattr(a, key, getattr(a, key).resolve())
        rows = []
        for name, path, x in models(a, work):
            xb, arr, ops = input_bytes(path, x)
            mrow = {"model": name, "file": path.name, "ops": ops}
            for build, fn in (("tflm", lambda: tflm_measure(tc, board, a, False, path, ops, xb, work)),
                              ("tflm+cmsis-nn", lambda: tflm_measure(tc, board, a, True, path, ops, xb, work)),
                              ("ours reference", lambda: ours_measure(tc, board, "reference", path, arr, work)),
                              (f"ours {board.kernels}", lambda: ours_measure(tc, board, board.kernels, path, arr, work)),
                              ("ours library", lambda: library_measure(tc, board, path, xb, work, a.jobs))):
                try:
                    r = {**mrow, "build": build, "board": board.id, **fn()}
                except SetupError:
                    raise
                except Exception as e:   # one build failing leaves the others measured
                    r = {**mrow, "build": build, "board": board.id,
                         "error": f"{type(e).__name__}: {e}"}
                    rows.append(r)
                    print(f"{name:10s} {build:22s} FAILED: {r['error']}", flush=True)
                    continue
                rows.append(r)
                print(f"{name:10s} {build:22s} {r['instructions']:>10,} instructions  flash "
                      f"{r['flash']:>8,} B  arena {r['arena']:>7,} B  ram {r['ram']:>8,} B", flush=True)
            outs = {r["build"]: r["output"] for r in rows if r["model"] == name and "output" in r}
            same = len(set(outs.values())) == 1
            for r in rows:
                if r["model"] == name:
                    r["outputs_equal"] = same
            if not same:
                print(f"{name}: outputs differ: {outs}", flush=True)
    except SetupError as e:
        print(f"vs_tflm: {e}", file=sys.stderr)
        return 2
    report = render(a, board, tc, rows)
    print(report)
    if a.md:
        a.md.parent.mkdir(parents=True, exist_ok=True)
        a.md.write_text(report)
        jl = a.jsonl or a.md.with_suffix(".jsonl")
        subst = [(str(getattr(a, k)), "$" + k.replace("_src", "").upper()) for k in SOURCES
                 if getattr(a, k) is not None] + [(str(ROOT), ".")]
        lines = []
        for r in rows:
            line = json.dumps({k: v for k, v in r.items() if k != "elf"})
            for path, name in subst:
                line = line.replace(path, name)
            lines.append(line + "\n")
        jl.write_text("".join(lines))
    return 0


def library_verdicts(rows: list[dict]) -> list[str]:
    """Issue 37's target per model: the library alone takes no more RAM than TFLM's build and
    no more flash than TFLM + CMSIS-NN's."""
    by = {}
    for r in rows:
        if "error" not in r:
            by.setdefault(r["model"], {})[r["build"]] = r
    out = ["Library alone against TF Lite Micro (target: RAM <= TFLM's, flash <= TFLM + "
           "CMSIS-NN's):", ""]
    for model, b in by.items():
        lib, t, c = b.get("ours library"), b.get("tflm"), b.get("tflm+cmsis-nn")
        if not (lib and t and c):
            continue
        ram_ok, flash_ok = lib["ram"] <= t["ram"], lib["flash"] <= c["flash"]
        out.append(f"- {model}: RAM {lib['ram']:,} B (data {lib['data']:,} + bss {lib['bss']:,}"
                   f" + stack {lib['stack_used']:,}) vs TFLM's {t['ram']:,} B: "
                   f"{'met' if ram_ok else '**not met**'}; flash {lib['flash']:,} B vs TFLM + "
                   f"CMSIS-NN's {c['flash']:,} B: {'met' if flash_ok else '**not met**'}")
    return out


def render(a, board, tc: Toolchain, rows: list[dict]) -> str:
    gcc = subprocess.run([tc.cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    qemu = subprocess.run([shutil.which("qemu-system-arm") or "qemu-system-arm", "--version"],
                          capture_output=True, text=True).stdout.splitlines()[0]
    ours = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    srcs = [f"- ${k.replace('_src', '').upper()} (--{k.replace('_', '-')}): {SOURCES[k][0]} at "
            f"`{commit_of(getattr(a, k))}`" for k in SOURCES if getattr(a, k) is not None]
    tflm_row = next((r for r in rows if r["build"] == "tflm+cmsis-nn" and "cxxflags" in r), None)
    subst = [(str(getattr(a, k)), "$" + k.replace("_src", "").upper()) for k in SOURCES
             if getattr(a, k) is not None] + [(str(ROOT), ".")]

    def rel(flags: list[str]) -> str:
        text = shlex.join(flags)
        for path, name in subst:
            text = text.replace(path, name)
        return text

    L = ["# TF Lite Micro (+ CMSIS-NN) beside quarl-edge, same models, same board, same counter",
         "", "Made with (" + datetime.date.today().isoformat() + ", quarl-edge `" + ours + "`):", "",
         "    " + rel([".venv/bin/python", "benchmarks/vs_tflm.py", *sys.argv[1:]]), "",
         f"Board {board.id} ({board.cpu}) in QEMU (`{qemu}`, -icount shift="
         f"{board.connect['icount_shift']}): instructions per inference, exact (SysTick under "
         "-icount, firmware/ports/cortex-m/port.c), one invoke after a warm-up, the input copied "
         "outside the count; TFLM's Invoke() and our qe_model_invoke() in the same "
         "start/stop bracket (benchmarks/vs_tflm_harness.cc, firmware/core/harness.c). "
         "Flash = text + data of each ELF (`arm-none-eabi-size`), its harness included (ours "
         "carries the host protocol, TFLM's prints one line). Arena: for TFLM the smallest arena "
         "its AllocateTensors() accepted, of arena_used_bytes() + 0, 64, 128, 256, ... B (it "
         "plans with temporary buffers; arena_used_bytes() is in the .jsonl), which holds the "
         "tensors and the interpreter's own data; ours: the planner's tensor arena. RAM = .data "
         "+ .bss with that arena, the stack excluded. Ratios: TFLM's instructions / this "
         "build's. `ours library`: the model as `quarl-edge export` ships it (the generated "
         "model and the kernels it calls, the board's variant, prefixed; no harness, no "
         "protocol, no policy wrapper), benchmarks/vs_tflm_library.py: flash = text + data of "
         "the library linked alone from its invoke, RAM = data + bss + the stack high-water of "
         "an invoke (the stack included), instructions under a bare main() on the same port "
         "and counter.", "",
         "Models: cartpole = examples/cartpole_dqn/models/int8.tflite (float I/O), its first "
         "calibration observation; cnn = benchmarks/speed.py's 16x16x2 int8 CNN (conv 3x3, "
         "depthwise 3x3, conv 1x1, max pool, FC; float I/O), speed.py's observation; kws = "
         f"MLPerf Tiny's keyword-spotting DS-CNN ({TINY_KWS}, int8 I/O), int8 features from "
         "numpy's default_rng(0); others: default_rng(0) normal values.", "",
         fmt_table(rows), ""]
    eq = {r["model"]: r["outputs_equal"] for r in rows if "outputs_equal" in r}
    L.append("Outputs of the five builds byte-identical: " + ", ".join(
        f"{m} {'yes' if v else '**no**'}" for m, v in eq.items()) + ".")
    L += ["", *library_verdicts(rows)]
    L += ["", "Sources:", *srcs, "", f"Compiler: `{gcc}`, the same for both sides.", "",
          "Flags (both sides: the board file's cflags and -ffp-contract=off):", "",
          "    TFLM C++: " + rel(tflm_row["cxxflags"] if tflm_row else []),
          "    CMSIS-NN C: " + rel(tflm_row["cflags"] if tflm_row else []),
          "    ours: " + rel(tc.arch_flags) + " -std=c99 (quarl_edge/targets/build.py)",
          "    link (both): " + rel(tc.ldflags), "",
          "($TFLM etc. are the --tflm-src ... directories above; the TFLM side without CMSIS-NN "
          "has the same flags less -DCMSIS_NN and the CMSIS-NN include directories.)", ""]
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
