"""quarl_edge/converters/planner.py: greedy static arena planning from (size, first_use, last_use)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quarl_edge.converters.planner import Buffer, check, plan


def test_empty_plan():
    p = plan([])
    assert p.offsets == [] and p.arena_bytes == 0


def test_chain_reuses_memory():
    # input -> op0 -> a -> op1 -> b -> op2 -> out: a and out can share, input and b can share
    bufs = [Buffer(20, -1, 0), Buffer(8, 0, 1), Buffer(20, 1, 2), Buffer(12, 2, 3)]
    p = plan(bufs)
    check(bufs, p)
    assert p.arena_bytes == 48           # 20 -> 32 aligned, + 8/12 -> 16: two slots
    assert p.offsets[0] == p.offsets[2] == 0


def test_overlapping_lifetimes_never_share():
    bufs = [Buffer(10, 0, 5), Buffer(10, 1, 2), Buffer(10, 2, 3)]
    p = plan(bufs)
    check(bufs, p)
    assert len(set(p.offsets)) == 3
    assert p.arena_bytes == 48


def test_touching_lifetimes_overlap():
    # an op reads one buffer and writes another at the same index: they must not alias
    bufs = [Buffer(16, 0, 3), Buffer(16, 3, 4)]
    p = plan(bufs)
    assert p.offsets[0] != p.offsets[1]


def test_largest_first_and_gap_filling():
    bufs = [Buffer(100, 0, 1), Buffer(40, 2, 3), Buffer(40, 2, 3), Buffer(16, 0, 3)]
    p = plan(bufs)
    check(bufs, p)
    # the two 40-byte buffers fit where the 100-byte one was
    assert p.offsets[1] < 112 and p.offsets[2] < 112
    assert p.arena_bytes == 128


def test_alignment_and_zero_sizes():
    bufs = [Buffer(1, 0, 0), Buffer(1, 0, 0), Buffer(0, 0, 0), Buffer(3, 0, 0)]
    p = plan(bufs, alignment=8)
    check(bufs, p, alignment=8)
    assert all(o % 8 == 0 for o in p.offsets)
    assert p.arena_bytes == 24


def test_accepts_tuples():
    assert plan([(4, 0, 1), (4, 2, 3)]).arena_bytes == 16


@pytest.mark.parametrize("bad", [[Buffer(-1, 0, 0)], [Buffer(4, 3, 2)]])
def test_rejects_invalid_buffers(bad):
    with pytest.raises(ValueError):
        plan(bad)


def test_rejects_bad_alignment():
    with pytest.raises(ValueError):
        plan([Buffer(4, 0, 0)], alignment=12)


buffers = st.lists(
    st.tuples(st.integers(0, 300), st.integers(-1, 12), st.integers(0, 6))
    .map(lambda t: Buffer(t[0], t[1], t[1] + t[2])),
    max_size=14)


@settings(max_examples=300, deadline=None)
@given(buffers, st.sampled_from([1, 4, 16]))
def test_plans_are_valid_and_reasonably_tight(bufs, alignment):
    p = plan(bufs, alignment=alignment)
    check(bufs, p, alignment=alignment)
    assert p.arena_bytes % alignment == 0
    aligned = [(b.size + alignment - 1) // alignment * alignment for b in bufs]
    # never worse than giving every buffer its own slot
    assert p.arena_bytes <= sum(aligned)
    # never better than the bytes live at the busiest moment
    for t in {b.first_use for b in bufs}:
        assert p.arena_bytes >= sum(b.size for b in bufs if b.first_use <= t <= b.last_use)


def test_check_catches_a_bad_plan():
    from quarl_edge.converters.planner import Plan
    bufs = [Buffer(16, 0, 1), Buffer(16, 1, 2)]
    with pytest.raises(AssertionError):
        check(bufs, Plan([0, 0], 16))


def brute_force_plan(bufs, alignment):
    """The greedy plan as first written: every placed buffer scanned for each new one (B^2)."""
    order = sorted(range(len(bufs)), key=lambda i: (-bufs[i].size, bufs[i].first_use, i))
    offsets, placed = [0] * len(bufs), []
    for i in order:
        b = bufs[i]
        if b.size == 0:
            continue
        live = sorted((j for j in placed if bufs[j].overlaps_in_time(b)), key=lambda j: offsets[j])
        candidate = 0
        for j in live:
            if candidate + b.size <= offsets[j]:
                break
            candidate = max(candidate, -(-(offsets[j] + bufs[j].size) // alignment) * alignment)
        offsets[i] = candidate
        placed.append(i)
    return offsets


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 64), st.integers(-1, 40), st.integers(0, 45))
                .map(lambda t: Buffer(t[0], t[1], t[1] + t[2])), max_size=40),
       st.sampled_from([1, 16]))
def test_the_indexed_planner_places_exactly_as_the_scan(bufs, alignment):
    """plan() finds the live buffers through its lifetime index (issue 36: near-linear in ops);
    the offsets are those of the plain scan over every placed buffer."""
    assert plan(bufs, alignment=alignment).offsets == brute_force_plan(bufs, alignment)


@settings(max_examples=200, deadline=None)
@given(buffers, st.lists(st.integers(0, 20), min_size=14, max_size=14))
def test_check_finds_every_overlap_the_pairwise_scan_finds(bufs, slots):
    """check() on arbitrary (mostly wrong) offsets fails exactly when some pair of buffers live
    together shares bytes."""
    from quarl_edge.converters.planner import Plan
    offsets = [16 * s for s in slots[:len(bufs)]]
    result = Plan(offsets, 16 * 21 + 320)
    clash = any(a.size and b.size and a.overlaps_in_time(b)
                and not (oa + a.size <= ob or ob + b.size <= oa)
                for i, (a, oa) in enumerate(zip(bufs, offsets))
                for b, ob in zip(bufs[i + 1:], offsets[i + 1:]))
    try:
        check(bufs, result)
        found = False
    except AssertionError:
        found = True
    assert found == clash
