"""Hostile policy files for tests/test_hostile_import.py, made without torch or SB3: zips
written member by member (a bzip2 member copied in as it is compressed, with whatever size the
central directory should declare), pickles assembled from opcodes, YAML and JSON bombs, and
small ONNX graphs.

tests/fixtures/hostile/zeros-3GiB.bz2 is 3 GiB of zero bytes compressed by bzip2 (3 KB: made
by `python tests/helpers_hostile_import.py`, which writes it again), the payload of every zip
bomb here."""
from __future__ import annotations

import io
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SB3 = ROOT / "tests" / "fixtures" / "sb3"
BOMB = ROOT / "tests" / "fixtures" / "hostile" / "zeros-3GiB.bz2"
BOMB_SIZE = 3 << 30
BOMB_CRC = 0x480BBE37              # CRC-32 of those 3 GiB


@dataclass
class Raw:
    """A member given as its compressed bytes: what it inflates to (and may declare)."""
    compressed: bytes
    size: int
    crc: int
    method: int = zipfile.ZIP_BZIP2


def bomb(declared: int | None = None) -> Raw:
    """The 3 GiB bzip2 bomb as a zip member, declaring `declared` bytes (its true size by
    default: a declared size can lie)."""
    return Raw(BOMB.read_bytes(), BOMB_SIZE if declared is None else declared, BOMB_CRC)


def deflate_bomb(size: int = 256 << 20, declared: int | None = None) -> Raw:
    """`size` zero bytes deflated (1,000 to 1), declaring `declared` bytes."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = b"".join(comp.compress(bytes(1 << 24)) for _ in range(size >> 24)) + comp.flush()
    crc = 0
    for _ in range(size >> 24):
        crc = zlib.crc32(bytes(1 << 24), crc)
    return Raw(raw, size if declared is None else declared, crc, zipfile.ZIP_DEFLATED)


def write_zip(path: Path | None, members: dict) -> bytes:
    """A zip of `members` (name -> bytes, stored; or Raw, copied as compressed); written to
    `path` when one is given. Returns its bytes."""
    out, central = io.BytesIO(), []
    for name, value in members.items():
        if not isinstance(value, Raw):
            value = Raw(bytes(value), len(value), zlib.crc32(value), zipfile.ZIP_STORED)
        fname, offset = name.encode(), out.tell()
        fields = (46 if value.method == zipfile.ZIP_BZIP2 else 20, 0, value.method, 0, 0x21,
                  value.crc, len(value.compressed), value.size, len(fname))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + fname)
        out.write(value.compressed)
        central.append(struct.pack("<IH", 0x02014B50, 20) + struct.pack("<HHHHHIIIHH", *fields,
                                                                            0)
                       + struct.pack("<HHHII", 0, 0, 0, 0, offset) + fname)
    start = out.tell()
    for c in central:
        out.write(c)
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central),
                          out.tell() - start, start, 0))
    raw = out.getvalue()
    if path is not None:
        Path(path).write_bytes(raw)
    return raw


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def sb3_zip(path: Path, base: str = "dqn_cartpole.zip", **replace) -> Path:
    """An SB3 fixture with members replaced (data=..., policy_pth=...)."""
    m = members(SB3 / base)
    for k, v in replace.items():
        m["policy.pth" if k == "policy_pth" else k] = v
    write_zip(path, m)
    return path


# ------------------------------------------------------------------------------ pickles
def shared_lists(levels: int = 60) -> bytes:
    """A pickle (protocol 4) of `levels` lists, each holding the one before twice: 2^levels
    paths to the innermost list, from 7 bytes per level (MEMOIZE, POP, MARK, BINGET, DUP,
    LIST)."""
    ops = bytearray(b"\x80\x04]")
    for k in range(levels):
        ops += b"\x940(h" + bytes([k]) + b"2l"
    return bytes(ops + b".")


def shared_tuples(levels: int = 60) -> bytes:
    """A ~130-byte pickle: a list inside 2^levels paths of pairs (DUP, TUPLE2 per level)."""
    return b"\x80\x02]" + b"2\x86" * levels + b"."


def _unicode(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def vecnormalize_pickle(mean: bytes, clip_obs: bytes = b"G" + struct.pack(">d", 10.0)) -> bytes:
    """A VecNormalize as SB3 pickles it (a class by name, its state a dict; obs_rms a
    RunningMeanStd), with the opcodes `mean` for obs_rms.mean and `clip_obs` for clip_obs."""
    def obj(module: str, name: str, state: bytes) -> bytes:
        return f"c{module}\n{name}\n".encode() + b")\x81}(" + state + b"ub"
    var = b"]G" + struct.pack(">d", 1.0) + b"a"
    rms = obj("stable_baselines3.common.running_mean_std", "RunningMeanStd",
              _unicode("mean") + mean + _unicode("var") + var)
    state = _unicode("obs_rms") + rms + _unicode("epsilon") + b"G" + struct.pack(">d", 1e-8) + \
        _unicode("clip_obs") + clip_obs + _unicode("norm_obs") + b"\x88"
    return b"\x80\x04" + obj("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize",
                             state) + b"."


def mean_bomb(levels: int = 60) -> bytes:
    """The opcodes of shared_lists' lists, to put inside another pickle."""
    return shared_lists(levels)[2:-1]


def tensors_viewing_one_storage(count: int, numel: int) -> bytes:
    """policy.pth's data.pkl: an OrderedDict of `count` float tensors, each viewing all of
    storage "0" of `numel` elements (torch's _rebuild_tensor_v2 and a persistent id per
    tensor, as torch.save writes them)."""
    def int4(v: int) -> bytes:
        return b"J" + struct.pack("<i", v)
    pid = b"(" + _unicode("storage") + b"ctorch\nFloatStorage\n" + _unicode("0") + \
        _unicode("cpu") + int4(numel) + b"tQ"
    args = pid + b"K\x00" + int4(numel) + b"\x85K\x01\x85\x89ccollections\nOrderedDict\n)R"
    items = b"".join(_unicode(f"t{k}") + b"ctorch._utils\n_rebuild_tensor_v2\n(" + args + b"tR"
                     for k in range(count))
    return b"\x80\x02ccollections\nOrderedDict\n)R(" + items + b"u."


def torch_archive(files: dict) -> bytes:
    """policy.pth as torch writes it: archive/data.pkl, archive/data/KEY, ..."""
    return write_zip(None, {f"archive/{k}": v for k, v in files.items()})


# ------------------------------------------------------------------------- text bombs
def billion_laughs(key: str = "env_wrapper") -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines + [f"{key}: *i", ""])


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


if __name__ == "__main__":
    import bz2
    comp, parts = bz2.BZ2Compressor(9), []
    for _ in range(BOMB_SIZE // (1 << 24)):
        parts.append(comp.compress(bytes(1 << 24)))
    BOMB.parent.mkdir(parents=True, exist_ok=True)
    BOMB.write_bytes(b"".join(parts) + comp.flush())
    print(BOMB, BOMB.stat().st_size, "bytes")
