"""The images flash tools and boot loaders take, written from a firmware ELF's loadable segments
at their load addresses: Intel HEX (avrdude, teensy_loader_cli, DAPLink drives), UF2 (UF2 boot
loaders' drives) and Espressif's image format (esptool, the ESP32-C3's boot ROM). Pure functions
of bytes, beside flash.py, which runs the tools."""
from __future__ import annotations

import hashlib
import itertools
import struct
from pathlib import Path

from ..core.errors import BoardError

def loadable_segments(elf: Path) -> list[tuple[int, bytes]]:
    """(load address, bytes) of every PT_LOAD segment with file contents, by address. The load
    address is the physical address (LMA): initialised data is stored in flash after the code."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with Path(elf).open("rb") as f:
            segs = [(s["p_paddr"], s.data()[:s["p_filesz"]]) for s in ELFFile(f).iter_segments()
                    if s["p_type"] == "PT_LOAD" and s["p_filesz"] > 0]
    except (OSError, ELFError) as e:
        raise BoardError(f"{elf} is not a firmware ELF: {e}") from None
    if not segs:
        raise BoardError(f"{elf} has no loadable contents")
    segs.sort()
    for (a0, d0), (a1, _) in itertools.pairwise(segs):
        if a0 + len(d0) > a1:
            raise BoardError(f"{elf}: loadable segments overlap at 0x{a1:08x}")
    return segs


def _ihex_record(rtype: int, addr: int, data: bytes = b"") -> str:
    body = bytes([len(data), (addr >> 8) & 0xFF, addr & 0xFF, rtype]) + data
    return ":" + (body + bytes([(-sum(body)) & 0xFF])).hex().upper()


def intel_hex(segments: list[tuple[int, bytes]], record_bytes: int = 16) -> str:
    """Intel HEX (data, extended linear address and end-of-file records) of the segments."""
    lines, upper = [], None
    for base, data in segments:
        if base + len(data) > 1 << 32:
            raise BoardError(f"segment at 0x{base:x} does not fit 32-bit Intel HEX")
        off = 0
        while off < len(data):
            addr = base + off
            if addr >> 16 != upper:
                upper = addr >> 16
                lines.append(_ihex_record(4, 0, struct.pack(">H", upper)))
            n = min(record_bytes, len(data) - off, 0x10000 - (addr & 0xFFFF))  # not across 64 KiB
            lines.append(_ihex_record(0, addr & 0xFFFF, data[off:off + n]))
            off += n
    lines.append(_ihex_record(1, 0))
    return "\n".join(lines) + "\n"


UF2_MAGIC_START0, UF2_MAGIC_START1, UF2_MAGIC_END = 0x0A324655, 0x9E5D5157, 0x0AB16F30
UF2_FLAG_FAMILY_ID = 0x00002000
UF2_PAYLOAD = 256      # bytes per block (what the RP2040 boot ROM requires), 256-byte aligned


def uf2(segments: list[tuple[int, bytes]], family_id: int, base: int | None = None,
        size: int | None = None) -> bytes:
    """A UF2 file (github.com/microsoft/uf2's format): one 512-byte block per 256-byte page the
    segments touch, page-aligned, zero-filled around the segments, with the family id set.
    With `base` (and `size`), every byte must lie in [base, base + size): the flash."""
    pages: dict[int, bytearray] = {}
    for addr, data in segments:
        if base is not None and (addr < base or (size and addr + len(data) > base + size)):
            end = f"0x{base + size:08x}" if size else "the end"
            raise BoardError(f"a loadable segment at 0x{addr:08x}..0x{addr + len(data):08x} lies "
                             f"outside the flash (0x{base:08x}..{end}): a UF2 cannot write it")
        pos = 0
        while pos < len(data):
            a = addr + pos
            page, at = a - a % UF2_PAYLOAD, a % UF2_PAYLOAD
            n = min(UF2_PAYLOAD - at, len(data) - pos)
            pages.setdefault(page, bytearray(UF2_PAYLOAD))[at:at + n] = data[pos:pos + n]
            pos += n
    order = sorted(pages)
    blocks = []
    for i, page in enumerate(order):
        head = struct.pack("<8I", UF2_MAGIC_START0, UF2_MAGIC_START1, UF2_FLAG_FAMILY_ID, page,
                           UF2_PAYLOAD, i, len(order), family_id)
        payload = bytes(pages[page]).ljust(476, b"\0")
        blocks.append(head + payload + struct.pack("<I", UF2_MAGIC_END))
    return b"".join(blocks)


ESP_MAGIC, ESP_CHECKSUM_SEED, ESP_WP_PIN_DISABLED = 0xE9, 0xEF, 0xEE
ESP_FLASH_DIO_40M_4MB = (2, 0x20)   # header bytes 2, 3: DIO mode; 40 MHz (low nibble 0), 4 MiB (2)


def esp_image(segments: list[tuple[int, bytes]], entry: int, chip_id: int) -> bytes:
    """An image in Espressif's boot format (what `esptool elf2image` writes, documented in
    esptool's "Firmware Image Format"), for a boot ROM that loads it into RAM: the 8-byte header
    (magic 0xE9, segment count, flash mode/frequency/size, entry address), the 16-byte extended
    header (WP pin disabled, chip id, any chip revision, SHA-256 appended), each segment as
    (load address, length, bytes padded to 4), zero padding so that the checksum byte (0xEF
    XOR every segment byte) ends a 16-byte block, then the SHA-256 of everything before it."""
    if len(segments) > 16:
        raise BoardError(f"an ESP image holds at most 16 segments; the ELF has {len(segments)}")
    out = bytearray(struct.pack("<BBBBI", ESP_MAGIC, len(segments), *ESP_FLASH_DIO_40M_4MB, entry))
    out += struct.pack("<B3sHBHH4sB", ESP_WP_PIN_DISABLED, b"\0\0\0", chip_id, 0, 0, 0xFFFF,
                       b"\0" * 4, 1)
    checksum = ESP_CHECKSUM_SEED
    for addr, data in segments:
        data = data + b"\0" * (-len(data) % 4)
        out += struct.pack("<II", addr, len(data)) + data
        for byte in data:
            checksum ^= byte
    out += b"\0" * (15 - len(out) % 16) + bytes([checksum])
    return bytes(out) + hashlib.sha256(out).digest()


def _elf_entry(elf: Path) -> int:
    from elftools.elf.elffile import ELFFile
    with Path(elf).open("rb") as f:
        return ELFFile(f)["e_entry"]
