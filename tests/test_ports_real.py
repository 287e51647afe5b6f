"""The real boards' firmware (boards/*.toml with kind = "real" whose ports live here: NUCLEO-F446RE,
NUCLEO-L4R5ZI, BBC micro:bit v1, Arduino Uno), compile-only since no board is attached: each
builds warning-free with the real cross compiler, fits, and puts its vector table where the chip
boots; and what can go wrong in the ports themselves: the cost counter that is linked (DWT,
TIMER0, SysTick), the UART divider against the board file's clock and baud rate, the clock check
at compile time, no semihosting breakpoint left on silicon, the flash tools' config files. Two
ports also run: the micro:bit v1 firmware on QEMU's micro:bit (its TIMER0 cycle count against the
emulated board's instruction count), and the Uno's receive path in simavr (cycles per byte
against the line rate)."""
import dataclasses
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import build
from quarl_edge.core.errors import ToolchainError

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "examples" / "cartpole_dqn" / "models"

# board id -> (flash origin, RAM origin): where the chip boots from and where its SRAM is.
REAL = {
    "nucleo-f446re": (0x08000000, 0x20000000),
    "nucleo-l4r5zi": (0x08000000, 0x20000000),
    "microbit-v1": (0x00000000, 0x20000000),
    "arduino-uno": (0x00000000, 0x00800100),   # AVR: RAM in the data space (0x800000 + address)
}
DWT = {0xE0001000, 0xE0001004}        # DWT_CTRL, DWT_CYCCNT (as base, or base + offset)
NRF51_TIMER0 = 0x40008000
BKPT_SEMIHOSTING = b"\xab\xbe"   # Thumb `bkpt 0xAB`


def _board(bid):
    b = get_board(bid)
    if not b.toolchain_installed():
        pytest.skip(f"{b.cc} is not installed: {b.install}")
    return b


@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    """Build each (board, scheme) once for the whole module."""
    cache = {}

    def get(bid, scheme):
        if (bid, scheme) not in cache:
            out = tmp_path_factory.mktemp(f"{bid}-{scheme}")
            cache[bid, scheme] = build(MODELS / f"{scheme}.tflite", _board(bid), out)
        return cache[bid, scheme]
    return get


class Elf:
    def __init__(self, path: Path):
        self.f = path.open("rb")
        self.elf = ELFFile(self.f)
        self.syms = {s.name: s for s in self.elf.get_section_by_name(".symtab").iter_symbols()}

    def addr(self, name):
        return self.syms[name]["st_value"]

    def bytes_at(self, vaddr, n):
        """n bytes of the section holding vaddr, as linked (for .data: its initial image)."""
        for sec in self.elf.iter_sections():
            a = sec["sh_addr"]
            if sec["sh_type"] == "SHT_PROGBITS" and a <= vaddr and vaddr + n <= a + sec["sh_size"]:
                return sec.data()[vaddr - a:vaddr - a + n]
        raise KeyError(hex(vaddr))

    def function(self, name):
        """A function's bytes including its literal pool (GCC emits the pool inside .size)."""
        s = self.syms[name]
        return self.bytes_at(s["st_value"] & ~1, s["st_size"])

    def close(self):
        self.f.close()


def _words(data):
    return set(struct.unpack(f"<{len(data) // 4}I", data[:len(data) // 4 * 4]))


def _literals(fn_bytes):
    """The 32-bit words a Thumb function loads (aligned words in its body and literal pool)."""
    return _words(fn_bytes) | _words(fn_bytes[2:])


# ------------------------------------------------------------------------------ build and fit
@pytest.mark.parametrize("bid", sorted(REAL))
@pytest.mark.parametrize("scheme", ["int8", "fp32"])
def test_builds_warning_free_fits_and_boots_from_flash(firmware, bid, scheme):
    fw = firmware(bid, scheme)
    board = fw.board
    assert board.kind == "real" and board.cost_unit == "cycles" and board.connect_method == "serial"
    assert board.usb and board.flashers
    assert (fw.out_dir / "build.log").read_text() == ""       # linker warnings too
    m = fw.memory
    assert m.flash_bytes > m.weights_bytes > 0 and m.ram_bytes > m.arena_bytes > 0
    assert m.flash_bytes <= board.flash_bytes and m.ram_bytes <= board.ram_bytes
    flash0, ram0 = REAL[bid]
    e = Elf(fw.elf)
    try:
        # everything flashed (loadable segments with contents) lies in the chip's flash
        for seg in e.elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_filesz"]:
                assert flash0 <= seg["p_paddr"] and seg["p_paddr"] + seg["p_filesz"] <= flash0 + board.flash_bytes
        if board.cc.startswith("avr"):
            assert e.addr("__vectors") == flash0 == e.elf.header["e_entry"]
        else:
            # the vector table opens the flash: initial SP = top of our stack (in RAM), reset
            # vector = the ELF entry (a Thumb address)
            assert e.addr("qe_vectors") == flash0
            sp, reset = struct.unpack("<II", e.bytes_at(flash0, 8))
            assert sp == e.addr("__stack_top") and ram0 < sp <= ram0 + board.ram_bytes
            assert reset == e.addr("Reset_Handler") | 1 == e.elf.header["e_entry"] | 1
    finally:
        e.close()


# ------------------------------------------------------------------------------- Cortex-M ports
def test_the_cost_counter_linked_is_the_boards(firmware):
    """DWT CYCCNT on the STM32 boards, TIMER0 on the micro:bit v1 (its M0 has no SysTick), SysTick
    on the emulated boards (QEMU has no DWT)."""
    seen = {}
    for bid in ("nucleo-f446re", "nucleo-l4r5zi", "microbit-v1", "netduinoplus2", "microbit"):
        e = Elf(firmware(bid, "int8").elf)
        try:
            start = _literals(e.function("qe_port_cost_start"))
            found = {"dwt": bool(DWT & start),
                     # the SysTick counter restarts its wrap count (a static in port.c)
                     "systick": e.addr("systick_wraps") in start,
                     "family": "qe_family_cost_start" in e.syms
                               and NRF51_TIMER0 in _literals(e.function("qe_family_cost_start"))}
            seen[bid] = "+".join(k for k, v in found.items() if v)
            if found["dwt"]:   # enabled once at start-up
                assert DWT & _literals(e.function("qe_port_init"))
        finally:
            e.close()
    assert seen == {"nucleo-f446re": "dwt", "nucleo-l4r5zi": "dwt", "microbit-v1": "family",
                    "netduinoplus2": "systick", "microbit": "systick"}


def test_no_semihosting_breakpoint_on_real_boards(firmware):
    for bid, expect in (("nucleo-f446re", False), ("nucleo-l4r5zi", False), ("microbit-v1", False),
                        ("microbit", True)):   # the emulated board does end QEMU that way
        e = Elf(firmware(bid, "int8").elf)
        try:
            code = e.function("qe_semihost_exit") + e.function("qe_fault_handler")
            assert (BKPT_SEMIHOSTING in code) == expect, bid
        finally:
            e.close()


@pytest.mark.parametrize("bid, fck_of_clock, baud_of_brr", [
    # USART2 on APB1 = SYSCLK/4, 16x oversampling: baud = fck / BRR
    ("nucleo-f446re", lambda hz: hz / 4, lambda fck, brr: fck / brr),
    # LPUART1 on PCLK1 = SYSCLK: baud = 256 * fck / BRR
    ("nucleo-l4r5zi", lambda hz: hz, lambda fck, brr: 256 * fck / brr),
])
def test_uart_divider_gives_the_board_files_baud_at_its_clock(firmware, bid, fck_of_clock, baud_of_brr):
    fw = firmware(bid, "int8")
    e = Elf(fw.elf)
    try:
        (brr,) = struct.unpack("<I", e.bytes_at(e.addr("qe_uart_brr"), 4))
    finally:
        e.close()
    baud = baud_of_brr(fck_of_clock(fw.board.clock_hz), brr)
    assert abs(baud / fw.board.baud - 1) < 0.02, (brr, baud)


@pytest.mark.parametrize("bid, check", [("nucleo-f446re", "qe_f446_clock_matches_board_file"),
                                        ("nucleo-l4r5zi", "qe_l4_clock_matches_board_file")])
def test_a_clock_the_port_does_not_set_up_does_not_build(tmp_path, bid, check):
    board = dataclasses.replace(_board(bid), clock_hz=168_000_000)
    with pytest.raises(ToolchainError, match=check):
        build(MODELS / "int8.tflite", board, tmp_path)


def test_openocd_knows_the_config_files():
    openocd = shutil.which("openocd")
    if openocd is None:
        pytest.skip("openocd is not installed")
    scripts = Path(openocd).resolve().parents[1] / "share" / "openocd" / "scripts"
    for bid in REAL:
        cfg = get_board(bid).flash_config.get("openocd")
        for name in (cfg or {}).get("config", []):
            assert (scripts / name).is_file(), (bid, name)


def test_microbit_v1_firmware_counts_cycles_on_qemus_microbit(tmp_path):
    """QEMU models the nRF51's TIMER0 (not the crystal: its CLOCK block reads as started), so the
    real board's firmware runs there: same answers, and its 16 MHz TIMER0 count equals the
    emulated board's instruction count times 16 MHz x 2^7 ns (icount shift 7 = 128 ns)."""
    from quarl_edge.link.session import BoardSession
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm is not installed")
    emulated = get_board("microbit")
    real_on_qemu = dataclasses.replace(_board("microbit-v1"), kind="emulated",
                                       connect=dict(emulated.connect))
    xs = [np.array([[0.02 * i, -0.2, 0.05 * i, 0.3]], np.float32) for i in range(3)]
    runs = {}
    for name, board in (("real", real_on_qemu), ("emulated", emulated)):
        with BoardSession(MODELS / "int8.tflite", board, tmp_path / name) as s:
            runs[name] = [s.link.infer([x]) for x in xs]
            assert s.memory()["stack_bytes"] > 0
    ticks_per_instruction = 16e6 * 2 ** emulated.connect["icount_shift"] / 1e9
    for (out_r, ticks), (out_e, instructions) in zip(runs["real"], runs["emulated"]):
        assert all(np.array_equal(a, b) for a, b in zip(out_r, out_e))
        assert instructions > 10_000
        assert abs(ticks / ticks_per_instruction - instructions) <= 10, (ticks, instructions)


# ----------------------------------------------------------------------------------- AVR port
RXCOST_C = r"""
/* Cycles the firmware is busy with each received byte: from its read of UDR0 until it polls
 * the UART again (simavr is cycle-accurate). */
#include <stdio.h>
#include <stdlib.h>
#include <simavr/sim_avr.h>
#include <simavr/sim_elf.h>
#include <simavr/avr_uart.h>

int main(int argc, char **argv)
{
    static elf_firmware_t fw;
    unsigned long poll = strtoul(argv[2], 0, 16), read = strtoul(argv[3], 0, 16);
    avr_cycle_count_t t_read = 0;
    uint8_t frame[25] = {0xA5, 0x5A, @VERSION@, 0x05, 0x07, 16, 0};   /* ECHO header, 16 B, CRC */
    int i, n = 0, waiting = 0;
    uint32_t flags = 0;
    avr_t *avr;

    if (argc != 4 || elf_read_firmware(argv[1], &fw))
        return 2;
    fw.frequency = 16000000;
    avr = avr_make_mcu_by_name("atmega328p");
    avr_init(avr);
    avr_load_firmware(avr, &fw);
    /* no host sleep while the firmware polls an empty UART: we want cycles, not wall time */
    avr_ioctl(avr, AVR_IOCTL_UART_GET_FLAGS('0'), &flags);
    flags &= ~(uint32_t)AVR_UART_FLAG_POLL_SLEEP;
    avr_ioctl(avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);
    for (i = 7; i < 25; i++)
        frame[i] = (uint8_t)(0x11 * i);
    while (avr->pc != poll && avr->cycle < 2000000)   /* start-up, until it polls USART0 */
        avr_run(avr);
    for (i = 0; i < 25; i++)
        avr_raise_irq(avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_INPUT), frame[i]);
    while (n < 24 && avr->cycle < 4000000) {   /* not the last byte: that one runs the command */
        if (avr->pc == read) {
            t_read = avr->cycle;
            waiting = 1;
        } else if (avr->pc == poll && waiting) {
            printf("%llu\n", (unsigned long long)(avr->cycle - t_read));
            waiting = 0;
            n++;
        }
        avr_run(avr);
    }
    return n == 24 ? 0 : 1;
}
"""


def test_uno_receive_path_keeps_up_with_its_line_rate(firmware, tmp_path):
    """USART0 buffers two bytes: the firmware must handle each byte of a frame in less time than
    the next one takes on the wire (10 bits at the board's baud), or bytes are lost on the real
    board (simavr queues input, so the emulated board cannot show it)."""
    if shutil.which("gcc") is None or not Path("/usr/include/simavr/sim_avr.h").is_file():
        pytest.skip("needs gcc and libsimavr-dev")
    fw = firmware("arduino-uno", "int8")
    e = Elf(fw.elf)
    try:
        start = e.addr("qe_port_read_byte")
        code = e.function("qe_port_read_byte")
        read = start + code.index(bytes([0x80, 0x91, 0xC6, 0x00]))   # lds r24, UDR0
    finally:
        e.close()
    # a frame of the current protocol whose header the board accepts (ECHO takes any length):
    # a header it refused would be answered at once, and that reply is not the receive path
    from quarl_edge.link.protocol import VERSION
    (tmp_path / "rxcost.c").write_text(RXCOST_C.replace("@VERSION@", str(VERSION)))
    exe = tmp_path / "rxcost"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(tmp_path / "rxcost.c"), "-lsimavr",
                    "-lpthread", "-lutil"], check=True, capture_output=True)
    # errors="replace": the firmware's boot announcement (a binary HELLO frame) is on the UART
    p = subprocess.run([str(exe), str(fw.elf), f"{start:x}", f"{read:x}"], capture_output=True,
                       text=True, errors="replace", timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    busy = [int(ln) for ln in p.stdout.splitlines() if ln.isdigit()]   # simavr: "Loaded ..." 
    cycles_per_byte = fw.board.clock_hz * 10 / fw.board.baud
    assert len(busy) == 24 and 50 < max(busy) < cycles_per_byte, (busy, cycles_per_byte)
    # and the default 1 Mbaud of the emulated atmega328p would not keep up on silicon
    assert max(busy) > fw.board.clock_hz * 10 / 1_000_000
