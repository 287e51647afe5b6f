"""The "ours library" rows of benchmarks/vs_tflm.py: the model as `quarl-edge export` ships it
(quarl_edge/converters/library.py: the generated model and only the kernels it calls, the board's variant,
every symbol prefixed; no harness, no protocol), measured alone on the same board and counter.

- flash = text + data, RAM = data + bss of the library linked alone with --gc-sections from its
  invoke (no start files, no main, as measure/export.py's footprint), plus the stack high-water
  of one invoke;
- instructions and stack: a bare-metal main() on the project's Cortex-M port (start-up, UART,
  the SysTick counter under QEMU -icount, as vs_tflm_harness.cc) copies the input into the
  library's arena, invokes once as a warm-up, then twice between qe_port_cost_start/stop (the
  same bracket as TFLM's), the 4 KiB below its frame painted before the counted invokes.

The policy wrapper (NAME_act, NAME_reset, NAME_selftest: the observation's quantization and the
action mapping) needs an env, which cnn and kws do not have: it is left out for all three
models, as TFLM's rows have no action mapping either."""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from vs_tflm_build import Toolchain, compile_all, elf_sizes, parse_line, port_objects, qemu_run, run

NAME = "vslib"
MAIN = r"""/* Written by benchmarks/vs_tflm_library.py. */
#include <stdint.h>
#include <string.h>
#include "qe_port.h"
#include "vslib_qe_model.h"
void qe_semihost_exit(uint32_t code) __attribute__((noreturn));

static const uint8_t input[@LEN@] = { @INPUT@ };

static void put(const char *s) { qe_port_write((const uint8_t *)s, (uint32_t)strlen(s)); }
static void put_u32(uint32_t v)
{
    char b[11];
    int i = 10;
    b[i] = '\0';
    do { b[--i] = (char)('0' + v % 10u); v /= 10u; } while (v != 0u);
    put(b + i);
}

__attribute__((noinline)) static uint32_t run_once(void)
{
    qe_port_cost_start();
    vslib_model_invoke();
    return qe_port_cost_stop();
}

int main(void)
{
    static const char digits[] = "0123456789abcdef";
    uint32_t c1, c2, i, *sp, *p;
    char b[3] = {0, 0, 0};
    qe_port_init();
    memcpy(vslib_arena + @IN_OFF@u, input, sizeof input);
    (void)run_once();
    memcpy(vslib_arena + @IN_OFF@u, input, sizeof input);
    __asm volatile ("mov %0, sp" : "=r"(sp));
    for (p = sp - 1024; p < sp - 16; ++p) { *p = 0xC0FFEE11u; }
    c1 = run_once();
    memcpy(vslib_arena + @IN_OFF@u, input, sizeof input);
    c2 = run_once();
    for (p = sp - 1024; p < sp && *p == 0xC0FFEE11u; ++p) { }
    put("QE-VS-TFLM status=ok instructions=");
    put_u32(c1); put(","); put_u32(c2);
    put(" arena_used="); put_u32(@ARENA@u);
    put(" stack="); put_u32((uint32_t)((uint8_t *)sp - (uint8_t *)p));
    put(" output=");
    for (i = 0u; i < @OUT_LEN@u; ++i) {
        b[0] = digits[vslib_arena[@OUT_OFF@u + i] >> 4];
        b[1] = digits[vslib_arena[@OUT_OFF@u + i] & 15u];
        put(b);
    }
    put("\n");
    qe_semihost_exit(0u);
}
"""


def library_measure(tc: Toolchain, board, model: Path, x: bytes, work: Path, jobs: int = 1) -> dict:
    from quarl_edge.converters.cgen import generate
    from quarl_edge.converters.library import library_sources
    from quarl_edge.core.resources import firmware_dir
    from quarl_edge.targets.build import kernel_sources
    d = work / f"{model.stem}-ours-library"
    src = d / "src"
    src.mkdir(parents=True, exist_ok=True)
    gm = generate(model, d / "gen", name=model.stem, kernels=board.kernels)
    fw = firmware_dir()
    files = library_sources((d / "gen" / "model.c").read_text(),
                            [fw / "core" / "requant.c", *kernel_sources(board.kernels)],
                            fw / "core", NAME)
    for stale in src.iterdir():
        stale.unlink()
    for fname, text in files.items():
        (src / fname).write_text(text)
    header = next(f for f in files if f.endswith(".h") and "model" in f)
    main = (MAIN.replace("vslib_qe_model.h", header).replace("@LEN@", str(len(x)))
            .replace("@INPUT@", ", ".join(str(b) for b in x))
            .replace("@IN_OFF@", str(gm.input_offsets[0]))
            .replace("@OUT_OFF@", str(gm.output_offsets[0]))
            .replace("@OUT_LEN@", str(gm.outputs[0].nbytes))
            .replace("@ARENA@", str(gm.arena_bytes)))
    (d / "main.c").write_text(main)
    cflags = [tc.cc, "-std=c99", *tc.arch_flags]
    lib = sorted(src.glob("*.c"))
    # footprint: the library alone, from its invoke (measure/export.py's footprint)
    alone = d / "library.elf"
    run([*cflags, *map(str, lib), "-nostartfiles", "-Wl,--gc-sections",
         f"-Wl,-e,{NAME}_model_invoke", f"-Wl,-u,{NAME}_model_invoke", "-o", str(alone), "-lm"],
        "linking the library alone")
    sizes = elf_sizes(tc, alone)
    # instructions, output, stack: the library under a bare main() on the port
    objs = compile_all([(cflags, s, s) for s in lib], work / "obj" / "library", jobs)
    port = port_objects(tc, work / "obj" / "port", jobs)
    elf = d / "bench.elf"
    link = [*cflags, *tc.defines, f"-I{src}", f"-I{tc.core_dir}", str(d / "main.c"),
            *map(str, objs), *map(str, port), "-o", str(elf), *tc.ldflags]
    run(link, "linking the library's bench program")
    (d / "link.cmd").write_text(shlex.join(link) + "\n")
    line = qemu_run(board, elf)
    res = parse_line(line)
    stack = int(dict(f.split("=", 1) for f in line.split()[1:])["stack"])
    if stack >= 4096 - 64:    # the whole painted region changed: the high-water is beyond it
        raise RuntimeError(f"{model.name} library: the stack takes 4 KiB or more; paint more")
    return {**res, "arena": gm.arena_bytes, "text": sizes["text"], "data": sizes["data"],
            "bss": sizes["bss"], "flash": sizes["text"] + sizes["data"],
            "stack_used": stack, "ram": sizes["data"] + sizes["bss"] + stack,
            "elf": str(alone)}


if __name__ == "__main__":   # pragma: no cover - run through vs_tflm.py
    raise SystemExit("run benchmarks/vs_tflm.py")
