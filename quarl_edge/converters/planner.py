"""Static memory planner for the activation arena.

It sees only buffers: (size in bytes, first use, last use), uses being op indices, both
inclusive. Buffers are placed greedily, largest first, each at the lowest aligned offset that
does not collide with an already placed buffer whose lifetime overlaps its own. Buffers whose
lifetimes do not overlap may share memory. The same idea as TFLM's GreedyMemoryPlanner, kept
separate from the generator so it can be tested on its own.

Time: each buffer asks only for the placed buffers live when it is (`_Lifetimes`, two segment
trees over op indices), so a plan costs O(B log T) plus the pairs of buffers live together,
not B^2: near-linear in the ops of a long chain (benchmarks/codegen_scaling.py).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

DEFAULT_ALIGNMENT = 16


@dataclass(frozen=True)
class Buffer:
    size: int
    first_use: int
    last_use: int

    def overlaps_in_time(self, other: "Buffer") -> bool:
        return self.first_use <= other.last_use and other.first_use <= self.last_use


@dataclass
class Plan:
    offsets: list[int]      # one per buffer, in the order given
    arena_bytes: int        # a multiple of the alignment


def _align(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


class _Lifetimes:
    """Buffers by lifetime (inclusive op-index intervals): `overlapping(f, l)` gives each one
    added whose lifetime meets [f, l] exactly once, in O(log T + the answer). `cover`: each
    lifetime on the segment-tree nodes that tile it (those live at a point lie on the point's
    path to the root); `start`: each on its first use's leaf and that leaf's ancestors (those
    starting in a range lie on the nodes that tile it)."""

    def __init__(self, buffers: Sequence[Buffer]):
        self.lo = min((b.first_use for b in buffers), default=0)
        hi = max((b.last_use for b in buffers), default=0)
        self.size = 1
        while self.size < hi - self.lo + 2:
            self.size *= 2
        self.cover: dict[int, list[int]] = defaultdict(list)
        self.start: dict[int, list[int]] = defaultdict(list)

    def _tiles(self, a: int, b: int):
        """The nodes tiling op indices [a, b] (inclusive)."""
        a, b = a - self.lo + self.size, b - self.lo + self.size + 1
        while a < b:
            if a & 1:
                yield a
                a += 1
            if b & 1:
                b -= 1
                yield b
            a //= 2
            b //= 2

    def add(self, j: int, b: Buffer) -> None:
        for node in self._tiles(b.first_use, b.last_use):
            self.cover[node].append(j)
        node = b.first_use - self.lo + self.size
        while node:
            self.start[node].append(j)
            node //= 2

    def overlapping(self, first: int, last: int) -> list[int]:
        found: list[int] = []
        node = first - self.lo + self.size      # live at `first` (started at or before it) ...
        while node:
            found.extend(self.cover.get(node, ()))
            node //= 2
        if last > first:                         # ... and started after it, by `last`
            for node in self._tiles(first + 1, last):
                found.extend(self.start.get(node, ()))
        return found


def plan(buffers: Iterable[Buffer | Sequence[int]], alignment: int = DEFAULT_ALIGNMENT) -> Plan:
    """Offsets for each buffer (aligned to `alignment`) and the arena size."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, not {alignment}")
    bufs = [b if isinstance(b, Buffer) else Buffer(*b) for b in buffers]
    for i, b in enumerate(bufs):
        if b.size < 0:
            raise ValueError(f"buffer {i} has a negative size {b.size}")
        if b.first_use > b.last_use:
            raise ValueError(f"buffer {i} is last used ({b.last_use}) before its first use "
                             f"({b.first_use})")

    order = sorted(range(len(bufs)), key=lambda i: (-bufs[i].size, bufs[i].first_use, i))
    offsets = [0] * len(bufs)
    placed: list[int] = []
    index = _Lifetimes(bufs)
    for i in order:
        b = bufs[i]
        if b.size == 0:
            continue
        # the placed buffers live with b, lowest first (equal offsets: any order gives the same)
        live = sorted(index.overlapping(b.first_use, b.last_use), key=lambda j: offsets[j])
        candidate = 0
        for j in live:
            if candidate + b.size <= offsets[j]:
                break                        # fits in the gap below buffer j
            candidate = max(candidate, _align(offsets[j] + bufs[j].size, alignment))
        offsets[i] = candidate
        placed.append(i)
        index.add(i, b)

    end = max((offsets[i] + bufs[i].size for i in placed), default=0)
    return Plan(offsets, _align(end, alignment))


def check(buffers: Sequence[Buffer], result: Plan, alignment: int = DEFAULT_ALIGNMENT) -> None:
    """Raise AssertionError if a plan puts two simultaneously live buffers on the same bytes."""
    index = _Lifetimes([b for b in buffers if b.first_use <= b.last_use])
    for i, a in enumerate(buffers):
        oa = result.offsets[i]
        assert oa % alignment == 0, f"buffer {i} at {oa} is not {alignment}-aligned"
        assert oa + a.size <= result.arena_bytes, f"buffer {i} ends past the arena"
        if a.size and a.first_use <= a.last_use:
            index.add(i, a)
    for i, a in enumerate(buffers):
        oa = result.offsets[i]
        if not a.size or a.first_use > a.last_use:
            continue
        for j in sorted(index.overlapping(a.first_use, a.last_use)):
            b, ob = buffers[j], result.offsets[j]
            if j > i:
                assert oa + a.size <= ob or ob + b.size <= oa, \
                    f"buffers {i} and {j} are live together and overlap in memory"
