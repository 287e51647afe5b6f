"""The exported library in bare-metal firmware, as a user writes it (issue 37): a main() of
their own on mps2-an386 (Cortex-M4F) in QEMU, with a startup file and linker script of their
own, linking two exported policies (CartPole DQN int8, the Pendulum SAC actor int8) as CMake
targets and printing the self-tests and the actions over the UART; the actions equal the host's
mapping of TF Lite Micro's outputs (what `hil` compares a board with)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers_export import CARTPOLE, export, host_actions, observations, pendulum_run

pytestmark = pytest.mark.skipif(
    not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")
         and shutil.which("cmake")),
    reason="arm-none-eabi-gcc, qemu-system-arm or cmake is not installed (scripts/setup.sh)")

TOOLCHAIN = """set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_C_FLAGS_INIT "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 -O2 -ffunction-sections -fdata-sections")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-T${CMAKE_CURRENT_LIST_DIR}/app.ld -nostartfiles --specs=nano.specs --specs=nosys.specs -Wl,--gc-sections")
"""

LINKER = """MEMORY
{
    FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M
    RAM (rwx)  : ORIGIN = 0x20000000, LENGTH = 4M
}
ENTRY(Reset_Handler)
SECTIONS
{
    .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) } > FLASH
    .ARM.exidx : { *(.ARM.exidx*) } > FLASH
    _sidata = LOADADDR(.data);
    .data : { _sdata = .; *(.data*) _edata = .; } > RAM AT > FLASH
    .bss (NOLOAD) : { _sbss = .; *(.bss*) *(COMMON) _ebss = .; } > RAM
    _estack = ORIGIN(RAM) + LENGTH(RAM);
}
"""

STARTUP = """#include <stdint.h>
extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
int main(void);
void Reset_Handler(void);
static void Hang(void) { for (;;) { } }
__attribute__((section(".vectors"), used))
const uintptr_t vectors[16] = { (uintptr_t)&_estack, (uintptr_t)Reset_Handler,
    (uintptr_t)Hang, (uintptr_t)Hang, (uintptr_t)Hang, (uintptr_t)Hang, (uintptr_t)Hang };
void Reset_Handler(void)
{
    uint32_t *s = &_sidata, *d = &_sdata;
    while (d < &_edata) { *d++ = *s++; }
    for (d = &_sbss; d < &_ebss; ) { *d++ = 0u; }
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;      /* CPACR: the FPU on */
    __asm volatile ("dsb\\n\\tisb");
    (void)main();
    {   /* semihosting SYS_EXIT, ADP_Stopped_ApplicationExit: QEMU ends */
        register uint32_t r0 __asm("r0") = 0x18u;
        register uint32_t r1 __asm("r1") = 0x20026u;
        __asm volatile ("bkpt 0xab" : : "r"(r0), "r"(r1) : "memory");
    }
    Hang();
}
"""

MAIN = """/* The user's firmware: self-tests, then each observation's action, over the CMSDK UART. */
#include <stdint.h>
#include "cp8.h"
#include "pend.h"

#define UART_DATA (*(volatile uint32_t *)0x40004000u)
#define UART_STATE (*(volatile uint32_t *)0x40004004u)
#define UART_CTRL (*(volatile uint32_t *)0x40004008u)
#define UART_BAUDDIV (*(volatile uint32_t *)0x40004010u)

static void put(char c) { while (UART_STATE & 1u) { } UART_DATA = (uint32_t)c; }
static void puts_(const char *s) { while (*s) { put(*s++); } }
static void hex(uint32_t v) { int i; for (i = 28; i >= 0; i -= 4) { put("0123456789abcdef"[(v >> i) & 15u]); } }
static void bits(float f) { union { float f; uint32_t u; } x; x.f = f; hex(x.u); }

@OBS@

/* The stack a policy's calls take: the 16 KiB below main's frame painted, the calls made,
 * then the lowest word they changed (inline: a function would paint its own frame). */
#define PAINT(sp) do { __asm volatile ("mov %0, sp" : "=r"(sp)); \\
        for (p = (sp) - 4096; p < (sp) - 8; ++p) { *p = 0xC0FFEE11u; } } while (0)
static uint32_t *p;

int main(void)
{
    unsigned i, k;
    float a[1];
    uint32_t *sp;
    UART_BAUDDIV = 16u;
    UART_CTRL = 1u;
    PAINT(sp);
    k = (unsigned)cp8_selftest();
    for (i = 0u; i < sizeof cp8_obs / sizeof cp8_obs[0]; ++i) { (void)cp8_act(cp8_obs[i], a); }
    for (p = sp - 4096; p < sp && *p == 0xC0FFEE11u; ++p) { }
    puts_("stack cp8 "); hex((uint32_t)((uint8_t *)sp - (uint8_t *)p)); put('\\n');
    PAINT(sp);
    k += (unsigned)pend_selftest();
    for (i = 0u; i < sizeof pend_obs / sizeof pend_obs[0]; ++i) { (void)pend_act(pend_obs[i], a); }
    for (p = sp - 4096; p < sp && *p == 0xC0FFEE11u; ++p) { }
    puts_("stack pend "); hex((uint32_t)((uint8_t *)sp - (uint8_t *)p)); put('\\n');
    cp8_reset();
    pend_reset();
    puts_("selftest cp8 "); hex((uint32_t)cp8_selftest()); put('\\n');
    puts_("selftest pend "); hex((uint32_t)pend_selftest()); put('\\n');
    for (i = 0u; i < sizeof cp8_obs / sizeof cp8_obs[0]; ++i) {
        k = (unsigned)cp8_act(cp8_obs[i], a);
        puts_("cp8 "); hex(k); put(' '); bits(a[0]); put('\\n');
    }
    for (i = 0u; i < sizeof pend_obs / sizeof pend_obs[0]; ++i) {
        k = (unsigned)pend_act(pend_obs[i], a);
        puts_("pend "); hex(k); put(' '); bits(a[0]); put('\\n');
    }
    puts_("done\\n");
    return 0;
}
"""


def c_rows(name: str, obs: np.ndarray) -> str:
    rows = ",\n".join("    { " + ", ".join(f"{float(v).hex()}f" for v in o) + " }" for o in obs)
    return f"static const float {name}_obs[{len(obs)}][{obs.shape[1]}] = {{\n{rows}\n}};"


@pytest.fixture(scope="module")
def pend(tmp_path_factory):
    """The Pendulum run, imported and quantized once for the module's two firmware fixtures."""
    return pendulum_run(tmp_path_factory.mktemp("pendulum"))


@pytest.fixture(scope="module")
def firmware(tmp_path_factory, pend):
    d = tmp_path_factory.mktemp("mps2")
    libs = {"cp8": export(CARTPOLE, "cp8", d / "cp8", board="mps2-an386"),
            "pend": export(pend, "pend", d / "pend", board="mps2-an386")}
    obs = {"cp8": observations("CartPole-v1", 30), "pend": observations("Pendulum-v1", 30)}
    app = d / "app"
    app.mkdir()
    (app / "toolchain.cmake").write_text(TOOLCHAIN)
    (app / "app.ld").write_text(LINKER)
    (app / "startup.c").write_text(STARTUP)
    (app / "main.c").write_text(MAIN.replace("@OBS@", "\n".join(c_rows(n, o)
                                                                 for n, o in obs.items())))
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
        f"add_subdirectory({d / 'cp8'} cp8)\nadd_subdirectory({d / 'pend'} pend)\n"
        "add_executable(app.elf main.c startup.c)\n"
        "target_link_libraries(app.elf PRIVATE cp8 pend m)\n")
    for cmd in (["cmake", "-S", app, "-B", d / "build",
                 f"-DCMAKE_TOOLCHAIN_FILE={app / 'toolchain.cmake'}"],
                ["cmake", "--build", d / "build"]):
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return d / "build" / "app.elf", {"cp8": CARTPOLE, "pend": pend}, obs


def test_bare_metal_firmware_on_mps2_acts_as_the_host_maps_tflm(firmware):
    elf, runs, obs = firmware
    p = subprocess.run(["qemu-system-arm", "-machine", "mps2-an386", "-kernel", str(elf),
                        "-nographic", "-monitor", "none", "-serial", "stdio",
                        "-semihosting-config", "enable=on,target=native"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    lines = p.stdout.replace("\r", "").splitlines()
    assert p.returncode == 0 and lines[-1:] == ["done"], p.stdout[-2000:] + p.stderr[-2000:]
    assert lines[2:4] == ["selftest cp8 00000000", "selftest pend 00000000"]
    stack = {ln.split()[1]: int(ln.split()[2], 16) for ln in lines[:2]}
    print(f"stack high-water of the policies' calls (selftest, act) on mps2-an386: {stack}")
    assert set(stack) == {"cp8", "pend"} and all(0 < v < 4096 for v in stack.values()), stack
    for name in ("cp8", "pend"):
        got = [ln.split()[1:] for ln in lines if ln.startswith(name + " ")]
        assert [rc for rc, _ in got] == ["00000000"] * len(obs[name])
        ours = np.array([int(b, 16) for _, b in got], np.uint32).view(np.float32)
        want = host_actions(runs[name], "int8", obs[name]).reshape(-1)
        assert np.array_equal(ours, want), (name, np.argwhere(ours != want)[:5])
        assert len(np.unique(want)) > 1


# ------------------------------------------------------------------------ Arduino on simavr
ARDUINO = Path("/usr/share/arduino/hardware/arduino/avr")
AVR_FLAGS = ["-mmcu=atmega328p", "-DF_CPU=16000000L", "-DARDUINO=10807", "-DARDUINO_AVR_UNO",
             "-DARDUINO_ARCH_AVR", "-Os", "-ffunction-sections", "-fdata-sections",
             f"-I{ARDUINO / 'cores' / 'arduino'}", f"-I{ARDUINO / 'variants' / 'standard'}"]
# platform.txt's flags, without -flto (Debian's avr-gcc 5.4 has no LTO plugin for avr-ar)
CFLAGS = ["-std=gnu11", "-Wall", "-Wextra"]
CXXFLAGS = ["-std=gnu++11", "-fpermissive", "-fno-exceptions", "-fno-threadsafe-statics"]

SKETCH = """// A user's sketch: both policies, their self-tests, then each observation's action bits.
#include <cp8.h>
#include <pend.h>
#include <avr/pgmspace.h>
#include <string.h>

@OBS@

static void show(const char *who, int rc, float a) {
  uint32_t u;
  memcpy(&u, &a, 4);
  Serial.print(who); Serial.print(' '); Serial.print(rc); Serial.print(' ');
  Serial.println(u, HEX);
}

void setup() {
  Serial.begin(9600);
  Serial.print("selftest cp8 "); Serial.println(cp8_selftest());
  Serial.print("selftest pend "); Serial.println(pend_selftest());
  float obs[4], a[1];
  for (unsigned i = 0; i < sizeof cp8_obs / sizeof cp8_obs[0]; ++i) {
    memcpy_P(obs, cp8_obs[i], sizeof cp8_obs[i]);
    int rc = cp8_act(obs, a);
    show("cp8", rc, a[0]);
  }
  for (unsigned i = 0; i < sizeof pend_obs / sizeof pend_obs[0]; ++i) {
    memcpy_P(obs, pend_obs[i], sizeof pend_obs[i]);
    int rc = pend_act(obs, a);
    show("pend", rc, a[0]);
  }
  Serial.println("done");
}

void loop() {}
"""


def _run(cmd: list) -> None:
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{cmd[0]}: {p.stderr[-3000:]}"


def arduino_elf(d: Path, sketch: str, libs: list[Path]) -> Path:
    """The sketch built as the Arduino IDE builds it: the core (Debian's arduino-core-avr; its
    WString.cpp, which does not compile with Debian's avr-g++ 5.4 and which no sketch here
    uses, left out), each library's src/*.c with avr-gcc, the .ino as C++ with Arduino.h."""
    objs = []
    core = ARDUINO / "cores" / "arduino"
    for src in sorted(core.glob("*.c")) + sorted(core.glob("*.cpp")) + sorted(core.glob("*.S")):
        if src.name == "WString.cpp":
            continue
        o = d / f"core_{src.name}.o"
        extra = CXXFLAGS if src.suffix == ".cpp" else CFLAGS if src.suffix == ".c" else \
            ["-x", "assembler-with-cpp"]
        _run(["avr-gcc" if src.suffix != ".cpp" else "avr-g++", *AVR_FLAGS, *extra, "-c", src,
              "-o", o])
        objs.append(o)
    includes = [f"-I{lib / 'src'}" for lib in libs]
    for lib in libs:
        for src in sorted((lib / "src").glob("*.c")):
            o = d / f"lib_{src.name}.o"
            _run(["avr-gcc", *AVR_FLAGS, *CFLAGS, "-Werror", *includes, "-c", src, "-o", o])
            objs.append(o)
    cpp = d / "sketch.cpp"
    cpp.write_text("#include <Arduino.h>\n" + sketch)
    _run(["avr-g++", *AVR_FLAGS, *CXXFLAGS, "-Wall", "-Wextra", "-Werror", *includes, "-c", cpp,
          "-o", d / "sketch.o"])
    elf = d / "sketch.elf"
    _run(["avr-gcc", "-mmcu=atmega328p", "-Os", "-Wl,--gc-sections", d / "sketch.o", *objs,
          "-lm", "-o", elf])
    return elf


def simavr_uart(elf: Path, seconds: float = 20.0, until: str = "done") -> list[str]:
    """What the sketch prints on USART0 under simavr's ATmega328P (simavr's own UART log)."""
    proc = subprocess.Popen(["simavr", "-m", "atmega328p", "-f", "16000000", str(elf)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        import select
        import time
        end = time.monotonic() + seconds
        buf = ""
        while time.monotonic() < end and until not in lines:
            r, _, _ = select.select([proc.stdout], [], [], 0.5)
            if r:
                chunk = proc.stdout.readline()
                if not chunk:
                    break
                buf += chunk
                lines = [ln.replace("\x1b[32m", "").replace("\x1b[0m", "").rstrip(".")
                         for ln in buf.splitlines()]
    finally:
        proc.kill()
        proc.wait()
    return [ln for ln in lines if ln and not ln.startswith(("Loaded", "signal"))]


needs_avr = pytest.mark.skipif(
    not (shutil.which("avr-g++") and shutil.which("simavr") and ARDUINO.is_dir()),
    reason="avr-g++, simavr or arduino-core-avr is not installed (scripts/setup.sh)")


@pytest.fixture(scope="module")
def avr_libs(tmp_path_factory, pend):
    d = tmp_path_factory.mktemp("avr")
    export(CARTPOLE, "cp8", d / "cp8", board="atmega328p")
    export(pend, "pend", d / "pend", board="atmega328p")
    return d, {"cp8": CARTPOLE, "pend": pend}


@needs_avr
def test_the_arduino_example_runs_on_the_atmega328p(avr_libs, tmp_path):
    d, runs = avr_libs
    ino = (d / "cp8" / "examples" / "cp8_basic" / "cp8_basic.ino").read_text()
    lines = simavr_uart(arduino_elf(tmp_path, ino, [d / "cp8"]), until="action: 1.000000")
    want = host_actions(CARTPOLE, "int8", np.zeros((1, 4), np.float32))[0, 0]
    assert lines[:2] == ["cp8_selftest: 0", f"action: {want:.6f}"], lines[:5]


def p_rows(name: str, obs: np.ndarray) -> str:
    return c_rows(name, obs).replace("static const float", "static const float PROGMEM")


@needs_avr
def test_two_policies_in_one_sketch_act_as_the_host_maps_tflm(avr_libs, tmp_path):
    d, runs = avr_libs
    obs = {"cp8": observations("CartPole-v1", 8), "pend": observations("Pendulum-v1", 8)}
    sketch = SKETCH.replace("@OBS@", "\n".join(p_rows(n, o) for n, o in obs.items()))
    # ends at "done"; the bound is for a host so loaded that simavr runs far behind real time
    lines = simavr_uart(arduino_elf(tmp_path, sketch, [d / "cp8", d / "pend"]), seconds=300)
    assert lines[:2] == ["selftest cp8 0", "selftest pend 0"] and lines[-1] == "done", lines
    for name in ("cp8", "pend"):
        got = [ln.split()[1:] for ln in lines if ln.startswith(name + " ")]
        assert [rc for rc, _ in got] == ["0"] * len(obs[name])
        ours = np.array([int(b, 16) for _, b in got], np.uint32).view(np.float32)
        want = host_actions(runs[name], "int8", obs[name]).reshape(-1)
        # AVR's double is 32-bit: the identity head clips in float, exactly as in double
        assert np.array_equal(ours, want), (name, ours, want)
