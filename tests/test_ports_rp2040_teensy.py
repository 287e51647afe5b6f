"""Real-board ports, compiled only (no hardware here): Raspberry Pi Pico (RP2040) and Teensy 4.1
(i.MX RT1062). The shipped example policies build warning-free with the real arm-none-eabi-gcc and
fit, and the images are laid out the way each boot ROM needs them, read back from the ELF:

- Pico: the first 256 bytes of flash are our boot stage 2 (assembled from boot2.S) with a correct
  CRC-32/MPEG-2 in its last word (what the RP2040 bootrom checks), and the vector table boot2
  jumps through sits at 0x10000100 with an SRAM stack pointer and a Thumb reset handler in flash.
- Teensy 4.1: the FlexSPI NOR configuration block ('FCFB') at 0x60000000, the IVT at 0x60001000
  pointing at our entry, at itself and at boot data that covers the whole image, and the vector
  table at 0x60002000 that the entry installs."""
import importlib.util
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from quarl_edge.targets.boards import get_board
from quarl_edge.targets.build import build

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "examples" / "cartpole_dqn" / "models"
SCHEMES = ("int8", "fp32")
BOARD_IDS = ("pico", "teensy41")


def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2 (poly 0x04C11DB7, init 0xFFFFFFFF, MSB first, no final xor), bit by bit:
    written here independently of firmware/ports/rp2040/boot2.py."""
    crc = 0xFFFFFFFF
    for byte in data:
        for bit in range(7, -1, -1):
            top = ((crc >> 31) & 1) ^ ((byte >> bit) & 1)
            crc = ((crc << 1) & 0xFFFFFFFF) ^ (0x04C11DB7 if top else 0)
    return crc


def load_boot2_tool():
    path = ROOT / "firmware" / "ports" / "rp2040" / "boot2.py"
    spec = importlib.util.spec_from_file_location("qe_rp2040_boot2", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Image:
    """An ELF's flash contents by load address, its sections and symbols."""

    def __init__(self, elf: Path):
        with elf.open("rb") as f:
            e = ELFFile(f)
            self.segments = [(s["p_paddr"], s.data()[:s["p_filesz"]]) for s in e.iter_segments()
                             if s["p_type"] == "PT_LOAD" and s["p_filesz"]]
            self.sections = {s.name: (s["sh_addr"], s["sh_size"]) for s in e.iter_sections()}
            self.symbols = {sym.name: (sym["st_value"], sym["st_size"])
                            for sym in e.get_section_by_name(".symtab").iter_symbols()}
        self.end = max(addr + len(data) for addr, data in self.segments)

    def read(self, addr: int, n: int) -> bytes:
        for base, data in self.segments:
            if base <= addr and addr + n <= base + len(data):
                return data[addr - base:addr - base + n]
        raise AssertionError(f"0x{addr:08x}+{n} is not in a loadable segment")

    def word(self, addr: int) -> int:
        return struct.unpack("<I", self.read(addr, 4))[0]


@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    out = tmp_path_factory.mktemp("real_boards")
    built = {}
    for bid in BOARD_IDS:
        board = get_board(bid)
        for scheme in SCHEMES:
            built[bid, scheme] = build(MODELS / f"{scheme}.tflite", board, out / f"{bid}-{scheme}")
    return built


def test_crc32_mpeg2_matches_the_known_check_value():
    assert crc32_mpeg2(b"123456789") == 0x0376E6E7
    tool = load_boot2_tool()
    for data in (b"123456789", b"", bytes(range(256)) * 3):
        assert tool.crc32_mpeg2(data) == crc32_mpeg2(data)


def test_board_files_describe_real_serial_boards():
    pico, teensy = get_board("pico"), get_board("teensy41")
    for b in (pico, teensy):
        assert (b.kind, b.cost_unit, b.connect_method) == ("real", "cycles", "serial")
        assert (b.baud, b.reset_on_open_ms, b.shared) == (115200, 0, ("cortex-m",))
        assert "-DQE_SEMIHOSTING=0" in b.cflags
    assert pico.clock_hz == 125_000_000 and teensy.clock_hz == 600_000_000
    assert pico.usb == ((0x2E8A, 0x000C),) and teensy.usb == ()
    # M0+: no DWT cycle counter, SysTick on the core clock; M7: DWT CYCCNT, hard float
    assert "-DQE_CORTEXM_DWT" not in pico.cflags and "-mfloat-abi=soft" in pico.cflags
    assert {"-DQE_CORTEXM_DWT", "-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard"} <= set(teensy.cflags)
    assert pico.flashers == ("uf2", "picotool", "openocd")
    assert pico.flash_config["uf2"] == {"volume": "RPI-RP2", "family_id": 0xE48BFF56, "base": 0x10000000}
    assert pico.flash_config["openocd"]["config"] == ["interface/cmsis-dap.cfg", "target/rp2040.cfg"]
    assert teensy.flashers == ("teensy",) and teensy.flash_config["teensy"] == {"mcu": "TEENSY41"}


@pytest.mark.parametrize("bid", BOARD_IDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_example_policies_build_warning_free_and_fit(firmware, bid, scheme):
    fw = firmware[bid, scheme]
    assert (fw.out_dir / "build.log").read_text() == ""     # linker warnings too
    m, board = fw.memory, fw.board
    assert m.flash_bytes > m.weights_bytes > 0 and m.ram_bytes > m.arena_bytes > 0
    assert m.flash_bytes <= board.flash_bytes and m.ram_bytes <= board.ram_bytes
    print(f"{bid} {scheme}: flash {m.flash_bytes} B, RAM {m.ram_bytes} B")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pico_image_starts_with_crc_checked_boot2_then_vectors(firmware, scheme):
    img = Image(firmware["pico", scheme].elf)
    assert img.sections[".boot2"] == (0x10000000, 256)
    assert min(addr for addr, _ in img.segments) == 0x10000000   # what the UF2 base points at
    boot2 = img.read(0x10000000, 256)
    assert struct.unpack("<I", boot2[252:])[0] == crc32_mpeg2(boot2[:252])
    # ... and it is exactly boot2.S as assembled now: boot2.c is not stale
    tool = load_boot2_tool()
    assert boot2 == tool.block(tool.assemble())
    assert struct.pack("<I", 0x10000100) in boot2[:252]          # the vector table boot2 enters

    sp, reset = img.word(0x10000100), img.word(0x10000104)
    assert img.symbols["qe_vectors"][0] == 0x10000100
    assert 0x20000000 < sp <= 0x20042000 and sp % 8 == 0             # in the 264 KiB of SRAM
    assert reset & 1 and 0x10000100 < reset < 0x10000000 + 2 * 1024 * 1024
    assert reset == img.symbols["Reset_Handler"][0]      # ARM ELF: Thumb symbols carry bit 0
    assert img.end - 0x10000000 == firmware["pico", scheme].memory.flash_bytes


@pytest.mark.parametrize("scheme", SCHEMES)
def test_teensy_image_has_fcfb_ivt_and_boot_data(firmware, scheme):
    img = Image(firmware["teensy41", scheme].elf)
    sym = img.symbols
    assert min(addr for addr, _ in img.segments) == 0x60000000

    fcfb = img.read(0x60000000, 512)
    assert fcfb[:4] == b"FCFB" and fcfb[7] == ord("V")
    assert struct.unpack_from("<I", fcfb, 0x50)[0] == 8 * 1024 * 1024     # sflashA1Size
    assert fcfb[0x44:0x46] == bytes([1, 4])                              # serial NOR, 4 pads
    assert struct.unpack_from("<I", fcfb, 0x80)[0] == 0x0A1804EB        # LUT 0: EBh, 24-bit address

    ivt = img.read(0x60001000, 32)
    assert ivt[:4] == bytes([0xD1, 0x00, 0x20, 0x41])
    header, entry, _, dcd, boot_data, self_addr, csf, _ = struct.unpack("<8I", ivt)
    assert self_addr == 0x60001000 and dcd == 0 and csf == 0
    assert entry & 1 and entry == sym["qe_imxrt_entry"][0]           # Thumb (bit 0), in flash
    assert 0x60002000 <= entry < img.end

    start, size, plugin = struct.unpack("<3I", img.read(boot_data, 12))
    assert (start, plugin) == (0x60000000, 0)
    assert start + size >= img.end and size == firmware["teensy41", scheme].memory.flash_bytes

    # The vector table the entry installs: VTOR = 0x60002000, SP in DTCM, the shared reset handler
    assert sym["qe_vectors"][0] == 0x60002000
    sp, reset = img.word(0x60002000), img.word(0x60002004)
    assert 0x20000000 < sp <= 0x20020000 and sp % 8 == 0
    assert reset & 1 and reset == sym["Reset_Handler"][0]
    stub_addr, stub_size = sym["qe_imxrt_entry"]
    stub = img.read(stub_addr & ~1, stub_size or 32)
    assert struct.pack("<I", 0x60002000) in stub and struct.pack("<I", 0xE000ED08) in stub
