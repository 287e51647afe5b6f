"""The builds benchmarks/vs_tflm.py measures: TF Lite Micro (reference kernels, or CMSIS-NN)
compiled from the user's checkouts with the board's toolchain and flags, linked with
benchmarks/vs_tflm_harness.cc on the project's Cortex-M port and run in QEMU (tflm_measure), and
our firmware on the same board (ours_measure). How and why: vs_tflm.py's docstring."""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "benchmarks" / "vs_tflm_harness.cc"

# operator -> (MicroMutableOpResolver method, kernel sources in tensorflow/lite/micro/kernels/)
OPS = {
    "QUANTIZE": ("AddQuantize", ["quantize", "quantize_common"]),
    "DEQUANTIZE": ("AddDequantize", ["dequantize", "dequantize_common"]),
    "FULLY_CONNECTED": ("AddFullyConnected", ["fully_connected", "fully_connected_common"]),
    "CONV_2D": ("AddConv2D", ["conv", "conv_common"]),
    "DEPTHWISE_CONV_2D": ("AddDepthwiseConv2D", ["depthwise_conv", "depthwise_conv_common"]),
    "MAX_POOL_2D": ("AddMaxPool2D", ["pooling", "pooling_common"]),
    "AVERAGE_POOL_2D": ("AddAveragePool2D", ["pooling", "pooling_common"]),
    "RESHAPE": ("AddReshape", ["reshape", "reshape_common"]),
    "SOFTMAX": ("AddSoftmax", ["softmax", "softmax_common"]),
    "RELU": ("AddRelu", ["activations", "activations_common"]),
    "ADD": ("AddAdd", ["add", "add_common"]),
}
ALWAYS_KERNELS = ["kernel_util"]

TFLM_CXXFLAGS = ["-std=c++17", "-fno-rtti", "-fno-exceptions", "-fno-threadsafe-statics",
                 "-fno-unwind-tables", "-fno-asynchronous-unwind-tables", "-fmessage-length=0",
                 "-DTF_LITE_STATIC_MEMORY", "-DTF_LITE_DISABLE_X86_NEON", "-DNDEBUG",
                 "-DTF_LITE_STRIP_ERROR_STRINGS", "-DFLATBUFFERS_LOCALE_INDEPENDENT=0"]
COMMON_EXTRA = ["-ffp-contract=off"]   # as our firmware (quarl_edge/targets/build.py COMMON_CFLAGS)


class SetupError(Exception):
    """A missing source or tool: the message says what to pass or install (exit 2)."""


def tflm_core_sources(tflm: Path) -> list[Path]:
    """TFLM's MICROLITE_CC_BASE_SRCS (tools/make/sources.inc) without tests and test helpers."""
    micro = tflm / "tensorflow" / "lite" / "micro"
    skip = {"test_helpers.cc", "test_helper_custom_ops.cc", "mock_micro_graph.cc",
            "fake_micro_context.cc", "recording_micro_allocator.cc"}
    out = []
    for d in (micro, micro / "arena_allocator", micro / "memory_planner", micro / "tflite_bridge"):
        out += [p for p in sorted(d.glob("*.cc")) if not p.name.endswith("_test.cc")
                and p.name not in skip]
    for p in sorted((tflm / "tensorflow").rglob("*.c*")):
        rel = p.relative_to(tflm).as_posix()
        if p.suffix not in (".cc", ".c") or rel.startswith(("tensorflow/lite/micro/",
                                                             "tensorflow/lite/experimental/")):
            continue
        if rel == "tensorflow/lite/array.cc" or p.name.endswith("_test.cc"):
            continue
        out.append(p)
    return out


def kernel_sources(tflm: Path, ops: list[str], cmsis_nn: bool) -> list[Path]:
    kdir = tflm / "tensorflow" / "lite" / "micro" / "kernels"
    names = list(ALWAYS_KERNELS)
    for op in ops:
        if op not in OPS:
            raise SetupError(f"operator {op} is not in this benchmark's op table (OPS in "
                             f"{Path(__file__).name}): add its resolver method and kernel files")
        names += [n for n in OPS[op][1] if n not in names]
    out = []
    for n in names:
        opt = kdir / "cmsis_nn" / f"{n}.cc"
        p = opt if cmsis_nn and opt.is_file() else kdir / f"{n}.cc"
        if p.is_file():
            out.append(p)
        elif not n.endswith("_common"):
            raise SetupError(f"no {p} in the TF Lite Micro checkout")
    return out


def cmsis_nn_sources(cmsis_nn: Path) -> list[Path]:
    return sorted(p for p in (cmsis_nn / "Source").rglob("*.c")
                  if not p.name.endswith(("_f16.c", "_f32.c")) and p.name != "arm_nntables_flt.c")


# ------------------------------------------------------------------------------- build
@dataclasses.dataclass
class Toolchain:
    cc: str
    cxx: str
    size: str
    arch_flags: list[str]     # the board's cflags (-mcpu..., -O2, sections) + COMMON_EXTRA
    defines: list[str]        # the board's QE_* defines (cost unit, icount shift, SysTick)
    ldflags: list[str]
    family_dirs: list[Path]
    core_dir: Path


def toolchain(board) -> Toolchain:
    from quarl_edge.targets import build as B
    cc = shutil.which(board.cc)
    if cc is None:
        raise SetupError(f"{board.cc} is not installed: {board.install}")
    cxx = shutil.which(board.cc.replace("gcc", "g++"))
    size = shutil.which(board.cc.replace("gcc", "size"))
    if cxx is None or size is None:
        raise SetupError(f"{board.cc.replace('gcc', 'g++')} / size not found next to {board.cc}")
    probe = subprocess.run([cxx, "-x", "c++", "-E", "-", "-o", os.devnull],
                           input="#include <limits>\n", capture_output=True, text=True)
    if probe.returncode != 0:
        raise SetupError(f"{cxx} has no C++ standard headers (TF Lite Micro is C++): install them "
                         "(Debian: apt-get install libstdc++-arm-none-eabi-newlib)")
    return Toolchain(cc, cxx, size, [B.expand_flag(board, f) for f in board.cflags] + COMMON_EXTRA,
                     B.board_defines(board), [B.expand_flag(board, f) for f in board.ldflags],
                     B.family_dirs(board), B.firmware_dir() / "core")


def run(cmd: list[str], what: str) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout).splitlines()[-25:])
        raise RuntimeError(f"{what} failed:\n{shlex.join(cmd)}\n{tail}")


def compile_all(jobs: list[tuple[list[str], Path, Path]], cache: Path, n: int) -> list[Path]:
    """Compile (command-prefix, source, _) jobs into the object cache, keyed by the command and
    the source's bytes (headers are keyed by the source trees' commits, in the cache folder's
    name). Returns the objects in order."""
    from concurrent.futures import ThreadPoolExecutor
    cache.mkdir(parents=True, exist_ok=True)

    def one(job):
        cmd, src, _ = job
        key = hashlib.sha256(("\0".join(cmd) + "\0" + str(src)).encode() + src.read_bytes()).hexdigest()[:20]
        obj = cache / f"{src.stem}-{key}.o"
        if not obj.is_file():
            tmp = obj.with_suffix(f".{os.getpid()}.tmp")
            run([*cmd, "-c", str(src), "-o", str(tmp)], f"compiling {src}")
            os.replace(tmp, obj)
        return obj

    with ThreadPoolExecutor(max_workers=max(1, n)) as ex:
        return list(ex.map(one, jobs))


def tflm_flags(tc: Toolchain, a: argparse.Namespace, cmsis_nn: bool) -> tuple[list[str], list[str]]:
    """(C++ flags, C flags) of a TFLM build."""
    inc = [f"-I{a.tflm_src}", f"-I{a.flatbuffers_src / 'include'}", f"-I{a.gemmlowp_src}", f"-I{a.ruy_src}"]
    if cmsis_nn:
        inc += [f"-I{a.cmsis_nn_src}", f"-I{a.cmsis_nn_src / 'Include'}"]
        if a.cmsis_src:
            inc += [f"-I{a.cmsis_src}", f"-I{a.cmsis_src / 'CMSIS' / 'Core' / 'Include'}"]
    base = [*tc.arch_flags, *(["-DCMSIS_NN"] if cmsis_nn else []), *inc]
    return ([tc.cxx, *base, *TFLM_CXXFLAGS],
            [tc.cc, *base, "-std=c99", "-DNDEBUG", "-fno-unwind-tables",
             "-fno-asynchronous-unwind-tables"])


def port_objects(tc: Toolchain, cache: Path, jobs: int) -> list[Path]:
    cmd = [tc.cc, "-std=c99", *tc.arch_flags, *tc.defines, f"-I{tc.core_dir}",
           *(f"-I{d}" for d in tc.family_dirs)]
    srcs = [c for d in tc.family_dirs for c in sorted(d.glob("*.c"))]
    return compile_all([(cmd, s, s) for s in srcs], cache, jobs)


def c_array(name: str, data: bytes) -> str:
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
    return (f"alignas(16) static const unsigned char {name}[{max(len(data), 1)}] = {{\n  "
            + ",\n  ".join(rows or ["0"]) + "\n};\n")


def model_header(model: bytes, x: bytes, ops: list[str], arena: int) -> str:
    uniq = list(dict.fromkeys(ops))
    adds = " ".join(f"(r).{OPS[o][0]}();" for o in uniq)
    return ("/* Written by benchmarks/vs_tflm.py. */\n" + c_array("QE_VS_MODEL", model)
            + c_array("QE_VS_INPUT", x) + f"#define QE_VS_INPUT_LEN {len(x)}u\n"
            f"#define QE_VS_ARENA_BYTES {arena}u\n#define QE_VS_N_OPS {len(uniq)}\n"
            f"#define QE_VS_ADD_OPS(r) do {{ {adds} }} while (0)\n")


def elf_sizes(tc: Toolchain, elf: Path) -> dict:
    """text, data, bss of the ELF (arm-none-eabi-size, Berkeley format); the stack section is
    NOLOAD and counted by size in bss: taken out here (sections.ld's .stack)."""
    out = subprocess.run([tc.size, "-A", str(elf)], capture_output=True, text=True, check=True).stdout
    secs = {}
    for ln in out.splitlines():
        parts = ln.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            secs[parts[0]] = int(parts[1])
    berk = subprocess.run([tc.size, str(elf)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(v) for v in berk.splitlines()[1].split()[:3])
    stack = secs.get(".stack", 0)
    return {"text": text, "data": data, "bss": bss - stack, "stack_reserved": stack,
            "flash": text + data, "ram": data + bss - stack}


def qemu_run(board, elf: Path, timeout: float = 300.0) -> str:
    qemu = shutil.which(board.connect.get("qemu", "qemu-system-arm"))
    if qemu is None:
        raise SetupError(f"qemu-system-arm is not installed: {board.connect.get('install')}")
    cmd = [qemu, "-machine", board.connect["machine"], "-kernel", str(elf), "-display", "none",
           "-nodefaults", "-nic", "none", "-monitor", "none",
           "-icount", f"shift={board.connect['icount_shift']},sleep=off",
           "-semihosting-config", "enable=on,target=native", "-serial", "stdio"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("QE-VS-TFLM")), None)
    if p.returncode != 0 or line is None or "status=ok" not in line:
        raise RuntimeError(f"{elf}: QEMU exit {p.returncode}: {p.stdout[-500:]} {p.stderr[-500:]}")
    return line


def tflm_measure(tc: Toolchain, board, a, cmsis_nn: bool, model: Path, ops: list[str],
                 x: bytes, work: Path) -> dict:
    cxx, cc = tflm_flags(tc, a, cmsis_nn)
    tag = "cmsis-nn" if cmsis_nn else "ref"
    cache = work / "obj" / tag
    srcs = tflm_core_sources(a.tflm_src) + kernel_sources(a.tflm_src, ops, cmsis_nn)
    jobs = [(cxx, s, s) for s in srcs]
    if cmsis_nn:
        jobs += [(cc, s, s) for s in cmsis_nn_sources(a.cmsis_nn_src)]
    objs = compile_all(jobs, cache, a.jobs) + port_objects(tc, work / "obj" / "port", a.jobs)
    d = work / f"{model.stem}-{tag}"
    d.mkdir(parents=True, exist_ok=True)

    def link(arena: int) -> Path:
        (d / "vs_tflm_model.h").write_text(model_header(model.read_bytes(), x, ops, arena))
        h = d / "harness.o"
        run([*cxx, *tc.defines, f"-I{d}", f"-I{tc.core_dir}", *(f"-I{p}" for p in tc.family_dirs),
             "-c", str(HARNESS), "-o", str(h)], "compiling the TFLM harness")
        elf = d / f"tflm-{arena}.elf"
        link_cmd = [tc.cxx, *tc.arch_flags, str(h), *map(str, objs), "-o", str(elf), *tc.ldflags,
                    f"-Wl,-Map={elf.with_suffix('.map')}"]
        run(link_cmd, "linking the TFLM firmware")
        (d / "link.cmd").write_text(shlex.join(link_cmd) + "\n")
        return elf

    first = parse_line(qemu_run(board, link(1 << 20)))
    # arena_used_bytes() is what stays allocated; AllocateTensors needs some more while it plans
    # (temporary buffers): the arena linked is the first of used + 0, 64, 128, 256, ... B that
    # works.
    used = (first["arena_used"] + 15) // 16 * 16
    for margin in (0, *(64 << k for k in range(12))):
        elf = link(used + margin)
        try:
            res = parse_line(qemu_run(board, elf))
            break
        except RuntimeError as e:
            if "allocate-tensors-failed" not in str(e):
                raise
    else:
        raise RuntimeError(f"{model.name} {tag}: no arena up to {used + margin} B works")
    if res["instructions"] != first["instructions"]:
        raise RuntimeError(f"{model.name} {tag}: counts differ with the smaller arena "
                           f"({first['instructions']} vs {res['instructions']})")
    return {**res, "arena": used + margin, **elf_sizes(tc, elf), "elf": str(elf),
            "cxxflags": cxx[1:], "cflags": cc[1:] if cmsis_nn else None,
            "sources": len(jobs)}


def parse_line(line: str) -> dict:
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    counts = [int(c) for c in kv["instructions"].split(",")]
    if len(set(counts)) != 1:
        raise RuntimeError(f"TFLM counts vary between two invokes: {counts}")
    return {"instructions": counts[0], "arena_used": int(kv["arena_used"]),
            "output": kv["output"]}


def ours_measure(tc: Toolchain, board, kernels: str, model: Path, x, work: Path) -> dict:
    import numpy as np
    from quarl_edge.link.session import BoardSession
    d = work / f"{model.stem}-ours-{kernels}"
    with BoardSession(model, dataclasses.replace(board, kernels=kernels), d) as s:
        spec = s.info.inputs[0]
        outs = s.link.infer([np.asarray(x).reshape(spec.shape).astype(spec.dtype)])[0]
        stats = s.link.bench(3)
        mem = s.memory()
        elf = s.firmware.elf
    if stats.min != stats.max:
        raise RuntimeError(f"{model.name} ours {kernels}: counts vary ({stats.min}..{stats.max})")
    out_hex = ",".join(np.ascontiguousarray(o).tobytes().hex() for o in outs)
    return {"instructions": int(stats.min), "arena": int(mem["arena_bytes"]), "output": out_hex,
            **elf_sizes(tc, elf), "elf": str(elf), "stack_used": mem.get("stack_bytes")}
