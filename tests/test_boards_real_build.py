"""Every real board (kind = "real" in boards/) builds the shipped int8 CartPole policy with its
real cross compiler, fits its memory, and gets a correct image for each of its flash tools:
Intel HEX equal to binutils' objcopy output, UF2 blocks covering every loadable byte with the
family id set (and, on the RP2040, a boot stage 2 whose CRC the boot ROM accepts), OpenOCD
configurations that the installed OpenOCD finds, addresses teensy_loader_cli accepts. No
hardware is touched: this is compile-only. And `quarl-edge boards` lists every board."""
import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from quarl_edge.targets import flash as F
from quarl_edge.targets.boards import all_boards
from quarl_edge.targets.build import build
from quarl_edge.targets.flash_tools import describe_tools
from helpers_flash import parse_uf2   # our own reader of the UF2 format, independent of the writer

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"
REAL = sorted(b.id for b in all_boards().values() if b.kind == "real")
RP2040_FAMILY = 0xE48BFF56


def parse_ihex(text: str) -> dict[int, int]:
    mem, upper = {}, 0
    for line in text.splitlines():
        raw = bytes.fromhex(line[1:])
        assert line[0] == ":" and sum(raw) & 0xFF == 0, f"bad record {line}"
        n, addr, rtype, data = raw[0], int.from_bytes(raw[1:3], "big"), raw[3], raw[4:-1]
        assert len(data) == n
        if rtype == 0:
            mem.update((upper + addr + i, b) for i, b in enumerate(data))
        elif rtype == 4:
            upper = int.from_bytes(data, "big") << 16
        elif rtype == 1:
            break
    return mem


def crc32_mpeg2(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc


def image_bytes_at(image: dict, addr: int, n: int) -> bytes:
    return bytes(image.get(addr + i, 0) for i in range(n))


def parse_esp_image(raw: bytes) -> tuple[dict, list[tuple[int, bytes]]]:
    """Our own reader of Espressif's boot image (esptool's "Firmware Image Format"): the header
    fields and the segments, checking the checksum byte and the appended SHA-256."""
    magic, count, mode, speed_size, entry = struct.unpack_from("<BBBBI", raw, 0)
    wp, chip_id, hash_appended = raw[8], struct.unpack_from("<H", raw, 12)[0], raw[23]
    pos, segs, checksum = 24, [], 0xEF
    for _ in range(count):
        addr, n = struct.unpack_from("<II", raw, pos)
        data = raw[pos + 8:pos + 8 + n]
        assert len(data) == n and n % 4 == 0
        segs.append((addr, data))
        for byte in data:
            checksum ^= byte
        pos += 8 + n
    pos += 15 - pos % 16                  # the checksum byte ends a 16-byte block
    assert raw[pos] == checksum, "bad ESP image checksum: the boot ROM would refuse it"
    assert hash_appended == 1 and raw[pos + 1:] == hashlib.sha256(raw[:pos + 1]).digest()
    return {"magic": magic, "mode": mode, "speed_size": speed_size, "entry": entry, "wp": wp,
            "chip_id": chip_id}, segs


def check_esp_image(image: Path, cfg: dict, elf: Path, loadable: dict) -> None:
    from elftools.elf.elffile import ELFFile
    head, segs = parse_esp_image(image.read_bytes())
    with elf.open("rb") as f:
        entry = ELFFile(f)["e_entry"]
    assert head == {"magic": 0xE9, "mode": 2, "speed_size": 0x20, "entry": entry, "wp": 0xEE,
                    "chip_id": cfg["chip_id"]}
    image_bytes = {a + i: v for a, d in segs for i, v in enumerate(d)}
    assert all(image_bytes.get(a) == v for a, v in loadable.items())
    # the ROM loads RAM segments only: SRAM through the data bus (DRAM) or the instruction bus
    assert all(0x3FC80000 <= a < 0x3FCDC710 or 0x40380000 <= a < 0x403E0000 for a, _ in segs)
    if shutil.which("esptool.py"):     # Espressif's own reader, when it is installed
        p = subprocess.run(["esptool.py", "--chip", cfg["chip"], "image_info", str(image)],
                           capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    """One build per board, shared by its checks."""
    built = {}

    def get(board_id):
        if board_id not in built:
            board = all_boards()[board_id]
            if shutil.which(board.cc) is None:
                pytest.skip(f"compiler {board.cc} for {board_id} is not installed: {board.install}")
            d = tmp_path_factory.mktemp(board_id)
            model = d / "int8.tflite"
            shutil.copy(MODEL, model)
            built[board_id] = build(model, board, d / "build")
        return built[board_id]
    return get


def test_there_are_real_boards():
    assert REAL, "no board file with kind = 'real' in boards/"


@pytest.mark.parametrize("board_id", REAL)
def test_real_board_builds_the_example_and_fits(firmware, board_id):
    fw = firmware(board_id)
    b = fw.board
    assert 0 < fw.memory.flash_bytes <= b.flash_bytes and 0 < fw.memory.ram_bytes <= b.ram_bytes
    assert fw.memory.weights_bytes > 0 and fw.memory.arena_bytes > 0
    assert b.connect_method == "serial" and b.flashers and b.cost_unit == "cycles"


@pytest.mark.parametrize("board_id", REAL)
def test_real_board_images_for_each_flash_tool(firmware, board_id, tmp_path):
    fw = firmware(board_id)
    b, elf = fw.board, fw.elf
    segs = F.loadable_segments(elf)
    loadable = {a + i: v for a, d in segs for i, v in enumerate(d)}
    assert sum(len(d) for _, d in segs) <= fw.memory.flash_bytes    # every byte stored in flash
    for tool in b.flashers:
        image = F.write_image(b, tool, elf)
        kind = F.TOOLS[tool].image
        if kind == "elf":
            assert image == elf
        elif kind == "hex":
            ours = parse_ihex(image.read_text())
            assert ours == loadable, tool
            objcopy = b.cc[:-3] + "objcopy" if b.cc.endswith("gcc") else None
            if objcopy and shutil.which(objcopy):
                ref = tmp_path / f"{tool}.objcopy.hex"
                subprocess.run([objcopy, "-O", "ihex", str(elf), str(ref)], check=True)
                assert parse_ihex(ref.read_text()) == ours, f"{tool}: differs from {objcopy}'s HEX"
        elif kind == "esp":
            check_esp_image(image, b.flash_config[tool], elf, loadable)
        else:
            cfg = b.flash_config[tool]
            blocks = parse_uf2(image.read_bytes())
            assert [blk[3] for blk in blocks] == list(range(len(blocks)))
            assert all(blk[4] == len(blocks) and blk[0] == 0x2000 and blk[5] == cfg["family_id"]
                       and blk[2] == 256 and blk[1] % 256 == 0 for blk in blocks)
            image_bytes = {blk[1] + i: v for blk in blocks for i, v in enumerate(blk[6])}
            assert all(image_bytes.get(a) == v for a, v in loadable.items())
            base = cfg.get("base", 0)
            assert all(base <= blk[1] and blk[1] + 256 <= base + b.flash_bytes for blk in blocks)
            if cfg["family_id"] == RP2040_FAMILY:   # the boot ROM checks boot2's CRC first
                first = image_bytes_at(image_bytes, base, 256)
                assert crc32_mpeg2(first[:252]) == struct.unpack("<I", first[252:])[0], \
                    "boot stage 2 (first 256 bytes of flash) has a bad CRC: the RP2040 would not boot"
            if shutil.which("picotool"):
                p = subprocess.run(["picotool", "info", "-a", str(image)], capture_output=True,
                                   text=True, timeout=60, check=False)
                assert p.returncode == 0, p.stdout + p.stderr


OPENOCD_BOARDS = [bid for bid in REAL if "openocd" in all_boards()[bid].flashers]


@pytest.mark.parametrize("board_id", OPENOCD_BOARDS)
def test_openocd_finds_the_boards_configuration(board_id):
    """The installed OpenOCD reads the board's .cfg files (then stops before touching USB)."""
    if shutil.which("openocd") is None:
        pytest.skip(f"openocd is not installed ({F.TOOLS['openocd'].install})")
    cfg = all_boards()[board_id].flash_config["openocd"]
    args = F.openocd_args(cfg, Path("/nonexistent.elf"))[:-2] + ["-c", "shutdown"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr[-2000:]


TEENSY_BOARDS = [bid for bid in REAL if "teensy" in all_boards()[bid].flashers]


@pytest.mark.parametrize("board_id", TEENSY_BOARDS)
def test_teensy_loader_accepts_the_image(firmware, board_id):
    """teensy_loader_cli reads the HEX and checks its addresses against the MCU's flash before
    it looks for a device: with none attached, 'Unable to open device' means the image passed."""
    if shutil.which("teensy_loader_cli") is None:
        pytest.skip(f"teensy_loader_cli is not installed ({F.TOOLS['teensy'].install})")
    if any(p.read_text().strip() == "16c0" for p in Path("/sys/bus/usb/devices").glob("*/idVendor")):
        pytest.skip("a Teensy (USB vendor 16c0) is attached: not running the loader against it")
    fw = firmware(board_id)
    b = fw.board
    hexf = F.write_image(b, "teensy", fw.elf)
    args = [a for a in F.teensy_args(b.flash_config["teensy"], hexf) if a != "-w"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    out = p.stdout + p.stderr
    assert "error reading intel hex" not in out and "Unable to open device" in out, out


def test_boards_command_lists_every_board_with_kind_and_flasher():
    boards = all_boards()
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "boards"], capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:2] == ["board", "kind"] and lines[0].rstrip().endswith("flasher")
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert set(rows) == set(boards)
    for bid, b in boards.items():
        assert rows[bid].split()[1] == b.kind
        if b.kind == "real" or b.flashers:   # QEMU boards flash through emulate's GDB server
            assert describe_tools(b) in rows[bid]
            assert all(t in rows[bid] for t in b.flashers if t not in F.COPY_TOOLS)
        else:
            assert rows[bid].rstrip().endswith(" -")
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "boards", "--json"],
                       capture_output=True, text=True, timeout=60, check=False)
    listed = json.loads(p.stdout)
    assert set(listed) == set(boards)
    for bid in REAL:
        assert [s["tool"] for s in listed[bid]["flasher"]] == list(boards[bid].flashers)
        assert all(s["status"] in ("ok", "missing", "copy") for s in listed[bid]["flasher"])
        assert listed[bid]["installed"] == (not boards[bid].missing_tools())
