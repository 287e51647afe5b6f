"""Static memory planner for the activation arena.

It sees only buffers: (size in bytes, first use, last use), uses being op indices, both
inclusive. Buffers are placed greedily, largest first, each at the lowest aligned offset that
does not collide with an already placed buffer whose lifetime overlaps its own. Buffers whose
lifetimes do not overlap may share memory. The same idea as TFLM's GreedyMemoryPlanner, kept
separate from the generator so it can be tested on its own.
"""
from __future__ import annotations

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
    for i in order:
        b = bufs[i]
        if b.size == 0:
            continue
        live = sorted((j for j in placed if bufs[j].overlaps_in_time(b)), key=lambda j: offsets[j])
        candidate = 0
        for j in live:
            if candidate + b.size <= offsets[j]:
                break                        # fits in the gap below buffer j
            candidate = max(candidate, _align(offsets[j] + bufs[j].size, alignment))
        offsets[i] = candidate
        placed.append(i)

    end = max((offsets[i] + bufs[i].size for i in placed), default=0)
    return Plan(offsets, _align(end, alignment))


def check(buffers: Sequence[Buffer], result: Plan, alignment: int = DEFAULT_ALIGNMENT) -> None:
    """Raise AssertionError if a plan puts two simultaneously live buffers on the same bytes."""
    for i, a in enumerate(buffers):
        oa = result.offsets[i]
        assert oa % alignment == 0, f"buffer {i} at {oa} is not {alignment}-aligned"
        assert oa + a.size <= result.arena_bytes, f"buffer {i} ends past the arena"
        for j in range(i + 1, len(buffers)):
            b, ob = buffers[j], result.offsets[j]
            if a.size and b.size and a.overlaps_in_time(b):
                assert oa + a.size <= ob or ob + b.size <= oa, \
                    f"buffers {i} and {j} are live together and overlap in memory"
