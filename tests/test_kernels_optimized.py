"""Optimized kernel variants (firmware/core/kernels/optimized/) are bit-exact with the reference.

The int8 FULLY_CONNECTED of the cortex-m-dsp variant against the reference, both compiled into
one checker (tests/c/fc_kernels_check.c) over random shapes (accum_depth 1..300, odd and
unaligned too; output_depth 1..70; batches 1..3), weights, offsets, biases, requantization
constants, per tensor, per channel and the int8-acc head:
  - on the host with gcc: the variant's portable C path (and once more under ASan/UBSan);
  - cross-compiled for each emulated Cortex-M board with the DSP extension and run under
    qemu-system-arm (the SXTAB16/SMLAD path), its files read and written through semihosting;
    those outputs must also equal the host reference's, byte for byte.
End to end: the shipped CartPole int8 policy and random int8 MLPs built with the variant for
mps2-an386 are bit-exact with TF Lite Micro (quarl_edge.measure.validate). Board files: `[build] kernels`
is validated, and the build compiles the variant's files in place of the reference's.

(Split by topic for issue 25: the board files, the build and the end-to-end runs in
test_kernels_optimized_build.py, QUANTIZE in test_kernels_optimized_quantize.py, the 8-bit AVR
variant in test_kernels_optimized_avr.py; the cases and checkers in helpers_fc_cases.py and
helpers_fc_checker.py.)"""
from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers_fc_cases import (BYTES, CHECK, DSP_BOARDS, FW, INT32_MAX, M0_DEFINES, M0_FC, M0_HOST_DEFINES,
                              PACKED, PAIRS, PC, S8, VARIANT_FC, Case, as_bytes, avr_output_stage_cases, edge_cases, fc_case, int32_add_overflows,
                              as_mm, mm_cases, mm_stage_cases, output_stage_cases, packed_edge_cases,
                              shrunk_case)
from helpers_fc_checker import (assert_same, board_checker, host_checker, m0_cases, run_board,
                                run_host, split)
from quarl_edge.converters.ops.optimized.common import PACKED_MAX_DEPTH
from quarl_edge.converters import qmath
from quarl_edge.converters.ops.optimized.cortex_m0.fully_connected import (PAIRS_ROWS, STEPS_MAX_SPAN,
                                                                   bytes_fc_words, pairs_fc_stream,
                                                                   saturation_bounds, step_table)
from quarl_edge.converters.ops.optimized.cortex_m_dsp.fully_connected import pack_fc_weights
from quarl_edge.targets.build import COMMON_CFLAGS


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fc_variant")


@pytest.fixture(scope="module")
def host_exe(tmp_module) -> Path:
    return host_checker(tmp_module)


@pytest.fixture(scope="module")
def m4_elf(tmp_module) -> Path:
    return board_checker("mps2-an386", tmp_module)


# ------------------------------------------------------------------------------ host
def test_edge_cases_on_the_host(host_exe):
    cases = edge_cases()
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_packed_edge_cases_on_the_host(host_exe):
    cases = packed_edge_cases()
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_packed_edge_cases_under_sanitizers(sanitized_exe):
    cases = packed_edge_cases()
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_pack_fc_weights_layout():
    """The word order of fully_connected.h, spelled out for one small case: two rows (padded to
    four), depth 5 (padded to 8), filter offset 1, input offset 2."""
    w = np.arange(10, dtype=np.int8).reshape(2, 5)          # w' = w + 1: 1..5, 6..10
    words, bias_p, d_pad = pack_fc_weights(w, np.array([100, -100], np.int32), 2, 1)
    assert d_pad == 8 and words.size == 4 * 8 // 2 and list(bias_p) == [100 + 2 * 15, -100 + 2 * 40, 0, 0]
    lo = lambda v: (int(v) & 0xFFFF) - (0x10000 if int(v) & 0x8000 else 0)  # noqa: E731
    pair = lambda v: int(v) >> 16                                           # noqa: E731
    neg, _, _ = pack_fc_weights(np.array([[-1, 0, -2, 0]], np.int8), None, 0, 0)
    assert [(lo(v), pair(v)) for v in neg[:1]] == [(-1, -2)] and int(neg[0]) == -65537  # 0xFFFE:FFFF
    # quad 0, half 0: rows 0..3 hold (w'[r][0], w'[r][2]); half 1: (w'[r][1], w'[r][3])
    assert [(lo(v), pair(v)) for v in words[0:4]] == [(1, 3), (6, 8), (0, 0), (0, 0)]
    assert [(lo(v), pair(v)) for v in words[4:8]] == [(2, 4), (7, 9), (0, 0), (0, 0)]
    # quad 1: d = 4 is real, 5..7 padding
    assert [(lo(v), pair(v)) for v in words[8:12]] == [(5, 0), (10, 0), (0, 0), (0, 0)]
    assert all(v == 0 for v in words[12:16])


def test_output_stage_cases_reach_the_int32_overflow():
    """The deterministic family really holds the inputs where TFLM's int32 `+ output_offset`
    overflows (the shrunk case among them), per tensor and per channel, at both ends."""
    cases = output_stage_cases()
    assert int32_add_overflows(shrunk_case())
    assert sum(int32_add_overflows(c) for c in cases if c.kind == S8) >= 20
    assert sum(int32_add_overflows(c) for c in cases if c.kind == PC) >= 20
    assert {c.output_offset for c in cases} >= {-128, 127}
    assert {c.input_offset for c in cases} >= {-127, 128}
    assert max(c.multiplier for c in cases) == INT32_MAX and max(c.shift for c in cases) == 30


def test_output_stage_cases_on_the_host(host_exe):
    cases = output_stage_cases()
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_checker_sees_a_difference(tmp_module):
    """A deliberately wrong variant (one off in one output) must fail the checker: the test can
    tell the two kernels apart at all."""
    bad = tmp_module / "bad_fc.c"
    bad.write_text(VARIANT_FC.read_text().replace('#include "../../fully_connected.h"',
                                                  f'#include "{FW}/core/kernels/fully_connected.h"')
                   .replace('#include "../../fully_connected.c"',
                            f'#include "{FW}/core/kernels/fully_connected.c"')
                   .replace("out[o] = requant_s8(&rq, acc);", "out[o] = (int8_t)(requant_s8(&rq, acc) ^ 1);"))
    exe = tmp_module / "fc_check_bad"
    res = subprocess.run(["gcc", *COMMON_CFLAGS, "-O2", f"-I{FW / 'core'}", f"-I{VARIANT_FC.parent}",
                          str(CHECK), str(bad),
                          str(FW / "core" / "requant.c"), "-o", str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cases = [c for c in edge_cases() if c.kind == S8 and c.rows == 3]
    status, out = run_host(exe, cases)
    assert status == 1 and any(r != o for r, o in split(cases, out))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=1, max_size=8))
@example(cases=[shrunk_case()])
def test_random_cases_on_the_host(host_exe, cases):
    status, out = run_host(host_exe, cases)
    assert_same(cases, status, out, twin=True)


@pytest.fixture(scope="module")
def sanitized_exe(tmp_module) -> Path:
    return host_checker(tmp_module, sanitize=True)


def test_edge_cases_under_sanitizers(sanitized_exe):
    """ASan + UBSan: no out-of-bounds access, no signed overflow (within the generator's
    bounds: the edge cases reach them)."""
    cases = edge_cases()
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_mm_cases_under_sanitizers(sanitized_exe):
    """The mm stream (pack_fc_mm, the reference's qe_fully_connected_s8_mm on the host): equal
    to qe_fully_connected_s8 on the original weights and to the twin, no UB at the doubled
    bound's edge."""
    cases = mm_cases()
    assert len(cases) > 150 and {c.depth for c in cases} >= set(range(4, 129, 4))
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_mm_stream_is_refused_past_the_doubled_bound():
    """pack_fc_mm admits a row only while |bias'| + 128 sum |w'| < 2^30 (the doubled sums stay
    in int32); at 2^30 the generator keeps the packed layout."""
    from quarl_edge.converters.ops.optimized.cortex_m_dsp.fully_connected import pack_fc_mm
    w = np.full((4, 8), 127, np.int8)
    edge = (1 << 30) - 128 * 127 * 8
    assert pack_fc_mm(w, np.full(4, edge - 1, np.int32), 0, 0) is not None
    assert pack_fc_mm(w, np.full(4, edge, np.int32), 0, 0) is None
    stream = pack_fc_mm(w, np.arange(4, dtype=np.int32), 1, 0)
    # per group: its four bias'' (2 (bias + io sum w)) first, then the doubled weight words
    assert list(stream[:4]) == [2 * (r + 127 * 8) for r in range(4)]
    assert stream[4] == 2 * 127 * 65536 + 2 * 127 and stream.size == 4 + 4 * 8 // 2


def test_output_stage_cases_under_sanitizers(sanitized_exe):
    """The requantization extremes under ASan + UBSan (-fno-sanitize-recover: a report exits
    SANITIZER_EXIT and fails run_host): no signed overflow anywhere, reference == optimized ==
    the Python twin, which is the exact clamp of requant(acc) + offset."""
    cases = output_stage_cases()
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=1, max_size=8))
@example(cases=[shrunk_case()])
def test_random_cases_under_sanitizers(sanitized_exe, cases):
    status, out = run_host(sanitized_exe, cases)
    assert_same(cases, status, out, twin=True)


# ------------------------------------------------------------------------------ boards (DSP)
def test_the_dsp_path_is_compiled_for_cortex_m4(m4_elf):
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(m4_elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_fully_connected_s8>:", 1)[1].split("\n\n", 1)[0]
    assert "smlad" in body and "sxtab16" in body
    # the packed kernel: its mm output stage's asm groups and the other stages' C path
    for fn in ("mm_groups_fix", "mm_groups_nofix", "packed_other"):
        body = dis.split(f"<{fn}>:", 1)[1].split("\n\n", 1)[0]
        assert "smlad" in body and "ldmia" in body, fn
    assert "smmlar" in dis.split("<mm_groups_nofix>:", 1)[1].split("\n\n", 1)[0]
    body = dis.split("<qe_fully_connected_s8_mm>:", 1)[1].split("\n\n", 1)[0]
    assert "smmlar" in body and "smlad" in body and "qadd" not in body


def test_edge_cases_on_cortex_m4(m4_elf, host_exe):
    cases = edge_cases()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


def test_packed_edge_cases_on_cortex_m4(m4_elf, host_exe):
    """The LDM/SMLAD loop of qe_fully_connected_s8_packed on the generator's layout, and its
    output stages (mm_stage_cases: the four-instruction one)."""
    cases = packed_edge_cases() + mm_stage_cases()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


def test_mm_cases_on_cortex_m4(m4_elf, host_exe):
    """qe_fully_connected_s8_mm's asm (the whole op: widening, every MAC loop entry, whole and
    padded groups, the sign fix and not) on QEMU == the reference == the twin."""
    cases = mm_cases()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PACKED, max_depth=128, max_rows=40), min_size=10, max_size=40))
def test_random_mm_cases_on_cortex_m4(m4_elf, host_exe, cases):
    cases = [m for m in map(as_mm, cases) if m is not None] or mm_cases()[:3]
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


def test_output_stage_cases_on_cortex_m4(m4_elf, host_exe):
    """The same extremes through the SXTAB16/SMLAD path and its requant_scale: == the host's
    reference and the twin."""
    cases = output_stage_cases()
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=10, max_size=30))
def test_random_cases_on_cortex_m4(m4_elf, host_exe, cases):
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("mps2-an386", m4_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


@pytest.mark.parametrize("board_id", [b for b in DSP_BOARDS if b != "mps2-an386"])
def test_edge_cases_on_the_other_dsp_boards(tmp_module, host_exe, board_id):
    elf = board_checker(board_id, tmp_module)
    cases = edge_cases() + packed_edge_cases()[::3] + mm_cases()[::3]
    _, host_out = run_host(host_exe, cases)
    status, out = run_board(board_id, elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(), min_size=20, max_size=60), board_id=st.sampled_from(DSP_BOARDS))
def test_long_fuzz_on_the_dsp_boards(tmp_module, host_exe, cases, board_id):
    elf = tmp_module / f"fc_check_{board_id}.elf"
    if not elf.is_file():
        board_checker(board_id, tmp_module)
    _, host_out = run_host(host_exe, cases)
    status, out = run_board(board_id, elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)])


# ------------------------------------------------------------------------------ boards (ARMv6-M)

@pytest.fixture(scope="module")
def m0_elf(tmp_module) -> Path:
    return board_checker("microbit", tmp_module, M0_FC, M0_DEFINES)


def test_the_m0_variant_on_the_host_under_sanitizers(tmp_module):
    """The cortex-m0 file compiles for the host (its portable path) and checks clean."""
    exe = host_checker(tmp_module, sanitize=True, variant_fc=M0_FC, defines=M0_DEFINES)
    cases = packed_edge_cases()
    status, out = run_host(exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_armv6m_path_is_compiled_for_cortex_m0(m0_elf):
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(m0_elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_fully_connected_s8_packed>:", 1)[1].split("\n\n", 1)[0]
    assert "muls" in body and "ldmia" in body and "sxth" in body


def test_packed_edge_cases_on_cortex_m0(m0_elf, host_exe):
    cases = m0_cases(packed_edge_cases())
    assert len(cases) > 300
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


def test_output_stage_cases_on_cortex_m0(m0_elf, host_exe):
    cases = [c for c in output_stage_cases() if c.kind == PACKED]
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PACKED, max_depth=96, max_rows=20), min_size=10, max_size=30))
def test_random_packed_cases_on_cortex_m0(m0_elf, host_exe, cases):
    cases = m0_cases(cases)
    _, host_out = run_host(host_exe, cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, [r for r, _ in split(cases, host_out)], twin=True)


# ------------------------------------------------------------------------------ cortex-m0: row pairs
def pairs_cases(cases: list[Case]) -> list[Case]:
    """Per-tensor int8 cases (of depth <= 128) as cases of the chunked row-pair layout."""
    return [dataclasses.replace(c, kind=PAIRS) for c in cases
            if c.kind in (S8, PACKED) and c.depth <= PACKED_MAX_DEPTH]


def pairs_edge_cases() -> list[Case]:
    """The packed layout's edge cases (depths 1..128: chunks of one input, odd and even chunks,
    weights and offsets at their ends, so w' = 255 and -255 words), the output-stage extremes,
    and the accumulators around the saturation bounds (avr_output_stage_cases), as row-pair
    cases."""
    return pairs_cases(packed_edge_cases() + output_stage_cases()) + [
        dataclasses.replace(c, kind=PAIRS) for c in avr_output_stage_cases()]


def pairs_m0_cases(cases: list[Case]) -> list[Case]:
    """The cases that fit the micro:bit checker's buffers (MAX_PAIRS: 704 words of stream)."""
    out = []
    for c in m0_cases(cases):
        stream, _, _ = pairs_fc_stream(c.w.reshape(c.rows, c.depth), c.bias, c.input_offset,
                                       c.filter_offset)
        if stream.size <= 704:
            out.append(c)
    return out


@settings(max_examples=40, deadline=None)
@given(case=fc_case(kind=PAIRS))
def test_pairs_stream_words_are_two_rows_and_chunks_sum_in_16_bits(case):
    """The words' values are 65536 w'[hi row] + w'[lo row], each chunk's sums lie in int16 for
    every int8 input (so the 32-bit packed sums split exactly), the chunks cover the depth."""
    stream, bias_p, chunks = pairs_fc_stream(case.w.reshape(case.rows, case.depth), case.bias,
                                             case.input_offset, case.filter_offset)
    wp = case.w.reshape(case.rows, case.depth).astype(np.int64) + case.filter_offset
    full = np.zeros((-(-case.rows // PAIRS_ROWS) * PAIRS_ROWS, case.depth), np.int64)
    full[:case.rows] = wp
    s, pos = stream.astype(np.int64), 0
    for g in range(full.shape[0] // PAIRS_ROWS):
        gw, d = full[g * PAIRS_ROWS:(g + 1) * PAIRS_ROWS], 0
        while (n := int(s[pos])) != 0:
            assert n % 4 == 0                    # 4 L: the chunk's bytes of widened input
            n //= 4
            words = s[pos + 1:pos + 1 + 2 * n].reshape(n, 2)
            c = gw[:, d:d + n]
            assert np.array_equal(words[:, 0], 65536 * c[1] + c[0])
            assert np.array_equal(words[:, 1], 65536 * c[3] + c[2])
            hi = 127 * np.maximum(c, 0).sum(1) + 128 * np.maximum(-c, 0).sum(1)
            lo = 128 * np.maximum(c, 0).sum(1) + 127 * np.maximum(-c, 0).sum(1)
            assert np.all(hi <= 32767) and np.all(lo <= 32768)
            pos, d = pos + 1 + 2 * n, d + n
        assert d == case.depth
        pos += 1
    assert pos == s.size


@pytest.fixture(scope="module")
def m0_san_exe(tmp_module) -> Path:
    """The cortex-m0 checker for the host under ASan/UBSan (the pairs and the byte lanes)."""
    return host_checker(tmp_module, sanitize=True, variant_fc=M0_FC, defines=M0_HOST_DEFINES)


def test_the_pairs_layout_on_the_host_under_sanitizers(m0_san_exe):
    exe = m0_san_exe
    cases = pairs_edge_cases()
    assert len(cases) > 400
    status, out = run_host(exe, cases)
    assert_same(cases, status, out, twin=True)


@pytest.fixture(scope="module")
def m0_host_exe(tmp_module) -> Path:
    return host_checker(tmp_module, variant_fc=M0_FC, defines=M0_HOST_DEFINES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PAIRS), min_size=1, max_size=8))
def test_random_pairs_cases_on_the_host(m0_host_exe, cases):
    status, out = run_host(m0_host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_armv6m_pairs_path_is_compiled_for_cortex_m0(m0_elf):
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(m0_elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_fully_connected_s8_pairs>:", 1)[1].split("\n\n", 1)[0]
    assert "muls" in body and "ldmia" in body and "sxth" in body


def test_pairs_edge_cases_on_cortex_m0(m0_elf):
    cases = pairs_m0_cases(pairs_edge_cases())
    assert len(cases) > 300
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, twin=True)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PAIRS, max_depth=96, max_rows=20), min_size=10, max_size=30))
def test_random_pairs_cases_on_cortex_m0(m0_elf, cases):
    cases = pairs_m0_cases(cases)
    status, out = run_board("microbit", m0_elf, cases)
    assert_same(cases, status, out, twin=True)


# ------------------------------------------------------------------------------ rv32: row pairs
RV32_FC = FW / "core" / "kernels" / "optimized" / "rv32" / "fully_connected.c"


@pytest.fixture(scope="module")
def rv32_elf(tmp_module) -> Path:
    """The checker for hifive1 (QEMU sifive_e, rv32imac) with the rv32 variant: its own asm walk
    of the pairs layout (computed jump into the unrolled MAC body, the 0x8000-biased split)."""
    return board_checker("hifive1", tmp_module, RV32_FC, M0_DEFINES)


def test_the_riscv_pairs_walk_is_compiled_for_hifive1(rv32_elf):
    dis = subprocess.run(["riscv64-unknown-elf-objdump", "-d", str(rv32_elf)], capture_output=True,
                         text=True).stdout
    body = dis.split("<qe_fully_connected_s8_pairs>:", 1)[1].split("\n\n", 1)[0]
    assert body.count("\tmul\t") >= 2 * 128 and "jr\tt2" in body   # the unrolled body, entered


def test_pairs_edge_cases_on_rv32(rv32_elf):
    cases = pairs_m0_cases(pairs_edge_cases())
    assert len(cases) > 300
    status, out = run_board("hifive1", rv32_elf, cases)
    assert_same(cases, status, out, twin=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=PAIRS, max_depth=128, max_rows=20), min_size=10, max_size=30))
def test_random_pairs_cases_on_rv32(rv32_elf, cases):
    cases = pairs_m0_cases(cases)
    status, out = run_board("hifive1", rv32_elf, cases)
    assert_same(cases, status, out, twin=True)


# ------------------------------------------------------------------------------ cortex-m0, rv32: byte lanes
def deep_case(batches: int, depth: int, rows: int, seed: int, style: str = "uniform",
              io: int = 128, fo: int = 0, out_offset: int = -128, relu: bool = True) -> Case:
    """An int8 per-tensor case for the byte lanes (layers deeper than PACKED_MAX_DEPTH): weights
    uniform or at the int8 extremes, inputs as a ReLU layer's (io = 128: x + 128 >= 0) or
    anything, a bias up to the generator's int32 bound, the right shift that spreads the outputs
    over the int8 range (as a real layer's), so that the step table applies."""
    rng = np.random.default_rng(seed)
    pick = (lambda n: rng.choice(np.array([-128, 127], np.int8), n)) if style == "extremes" \
        else (lambda n: rng.integers(-128, 128, n).astype(np.int8))
    x, w = pick(batches * depth), pick(rows * depth)
    worst = depth * (128 + abs(fo)) * (128 + abs(io))
    bias = rng.integers(-(INT32_MAX - worst), INT32_MAX - worst, rows, endpoint=True).astype(np.int32) \
        if style == "extremes" else rng.integers(-20000, 20000, rows).astype(np.int32)
    acc = ((w.reshape(rows, depth).astype(np.int64) + fo)
           @ (x.reshape(batches, depth).astype(np.int64) + io).T) + bias[:, None]
    shift = int(np.floor(np.log2(100.0 / max(int(np.abs(acc).max()), 1))))
    c = Case(BYTES, batches, depth, rows, io, fo, out_offset, int(rng.integers(1 << 30, INT32_MAX)),
             max(shift, -31), out_offset if relu else -128, 127, 0, 0, 0, x, w, bias,
             np.zeros(rows, np.int32), np.zeros(rows, np.int8), np.zeros(rows, np.float32))
    return as_bytes(c)


def deep_cases() -> list[Case]:
    """MinAtar's 1,024 -> 128 (with and without the step table: the second's shift is a left
    one), odd and unaligned depths (300, 129, 1,001), three batches, weights and inputs at the
    int8 extremes with a bias at the int32 bound, a filter offset."""
    return [deep_case(1, 1024, 128, 0), deep_case(1, 1024, 128, 1, relu=False),
            dataclasses.replace(deep_case(1, 1024, 20, 2), shift=3),
            deep_case(2, 300, 6, 3), deep_case(3, 129, 9, 4, io=-5), deep_case(1, 1001, 5, 5),
            deep_case(2, 300, 7, 6, style="extremes"), deep_case(1, 1024, 4, 7, style="extremes"),
            deep_case(1, 300, 4, 8, fo=3, io=-127), deep_case(1, 8, 3, 9)]


def bytes_board_cases() -> list[Case]:
    """Deep cases that fit the micro:bit checker's buffers (the widened input in its 704 words,
    rows x depth <= 2048, the words in 1024): depths 700, 300, 129 and 17."""
    return [deep_case(1, 700, 2, 10), deep_case(1, 700, 2, 11, style="extremes"),
            deep_case(1, 300, 6, 12), deep_case(1, 300, 6, 13, style="extremes", relu=False),
            deep_case(3, 129, 8, 14, io=-5), deep_case(2, 17, 9, 15, fo=-2)]


@settings(max_examples=40, deadline=None)
@given(case=fc_case(kind=BYTES, max_depth=1100, max_rows=12))
def test_bytes_words_are_four_rows_offset_binary(case):
    """Byte k of group g's word d is w'[4g+k][d] + 128 (padding rows and inputs: 128, w' = 0),
    bias' = bias + input_offset * sum w'; weights with a w' outside int8 get no byte layout."""
    words, bias_p, d_pad = bytes_fc_words(case.w.reshape(case.rows, case.depth), case.bias,
                                          case.input_offset, case.filter_offset)
    wp = case.w.reshape(case.rows, case.depth).astype(np.int64) + case.filter_offset
    groups = -(-case.rows // 4)
    assert d_pad % 8 == 0 and case.depth <= d_pad < case.depth + 8
    assert words.dtype == np.uint32 and words.size == groups * d_pad
    u = np.stack([(words.reshape(groups, d_pad).astype(np.int64) >> (8 * k)) & 0xFF
                  for k in range(4)], axis=1).reshape(4 * groups, d_pad) - 128
    assert np.array_equal(u[:case.rows, :case.depth], wp)
    assert not u[case.rows:].any() and not u[:, case.depth:].any()
    want = (0 if case.bias is None else case.bias.astype(np.int64)) + case.input_offset * wp.sum(1)
    assert np.array_equal(bias_p[:case.rows], want) and not bias_p[case.rows:].any()
    w = case.w.reshape(case.rows, case.depth)
    if w.max() > -128:          # a filter offset that takes the largest weight past 127
        assert bytes_fc_words(w, case.bias, case.input_offset, 128 - int(w.max())) is None


def test_deep_cases_on_the_host(m0_host_exe):
    cases = deep_cases()
    assert sum(c.depth == 1024 and c.rows == 128 for c in cases) == 2
    status, out = run_host(m0_host_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_deep_cases_under_sanitizers(m0_san_exe):
    cases = deep_cases()
    status, out = run_host(m0_san_exe, cases)
    assert_same(cases, status, out, twin=True)


def test_the_bytes_checker_sees_a_difference(m0_host_exe):
    """A wrong layout must fail (kind 7 compares, the test can fail): row 0's bytes all 0,
    i.e. its w' all -128."""
    c = deep_case(1, 300, 6, 3)
    enc = bytearray(c.encode())
    at = 64 + c.x.size + c.w.size + 4 * c.bias.size        # the words
    for d in range(304):
        enc[at + 4 * d] = 0
    res = subprocess.run([str(m0_host_exe)], input=bytes(enc), capture_output=True, timeout=60)
    assert res.returncode == 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=BYTES, max_depth=1100, max_rows=24), min_size=1, max_size=6))
def test_random_bytes_cases_on_the_host(m0_host_exe, cases):
    status, out = run_host(m0_host_exe, cases)
    assert_same(cases, status, out, twin=True)


@pytest.mark.parametrize("depths, calls", [
    ((129, 128, 4), ["qe_fully_connected_s8_bytes(", "qe_fully_connected_s8_pairs("]),
    ((2056, 4), ["qe_fully_connected_s8("])])
def test_the_generator_gives_the_byte_lanes_past_depth_128(tmp_path, depths, calls):
    """cortex-m0 and rv32: depth 129 the byte lanes (with its scratch), 128 the row pairs, 2,056
    the reference kernel (its widened input would pass BYTES_SCRATCH_MAX)."""
    from helpers_models import convert, random_mlp
    from quarl_edge.converters import cgen
    model = random_mlp(0, depths[0], list(depths[1:]), ["relu"] * (len(depths) - 2) + ["none"], 2.0)
    path = tmp_path / "mlp.tflite"
    calib = np.random.default_rng(0).standard_normal((16, depths[0])).astype(np.float32)
    path.write_bytes(convert(model, "int8", calib))
    for v in ("cortex-m0", "rv32"):
        gm = cgen.generate(path, tmp_path / v, kernels=v)
        fcs = [ln.strip().split("&", 1)[0] for ln in gm.c_path.read_text()
               .split("void qe_model_invoke(void)", 1)[1].splitlines()
               if ln.strip().startswith("qe_fully_connected")]
        assert fcs == calls, fcs
        text = gm.c_path.read_text()
        assert ("scratch of op" in text) == (depths[0] <= 2048)


def bytes_fits_board(c: Case) -> bool:
    d_pad = -(-c.depth // 8) * 8
    return (c.batches * c.depth <= 1024 and c.rows * c.depth <= 2048 and c.rows <= 64
            and d_pad <= 704 and -(-c.rows // 4) * d_pad <= 1024)


@pytest.mark.parametrize("board_id", ["microbit", "hifive1"])
def test_bytes_cases_on_the_boards(request, board_id):
    """The ARMv6-M and RISC-V walks (asm) of the byte lanes under QEMU: fixed deep cases and
    random ones (Hypothesis, a few), against the reference on the board and the Python twin."""
    elf = request.getfixturevalue("m0_elf" if board_id == "microbit" else "rv32_elf")
    fixed = bytes_board_cases()
    assert all(bytes_fits_board(c) for c in fixed)

    @settings(max_examples=3, deadline=None)
    @given(st.lists(fc_case(kind=BYTES, max_depth=700, max_rows=8), min_size=6, max_size=12))
    def run(cases):
        cases = fixed + [c for c in cases if bytes_fits_board(c)]
        status, out = run_board(board_id, elf, cases)
        assert_same(cases, status, out, twin=True)
    run()


@pytest.mark.parametrize("board_id, objdump, wants", [
    ("microbit", "arm-none-eabi-objdump", ("muls", "lsrs", "ldmia")),
    ("hifive1", "riscv64-unknown-elf-objdump", ("\tmul\t", "\tsrl", "\tlw\t"))])
def test_the_bytes_walk_is_compiled_for_the_boards(request, board_id, objdump, wants):
    elf = request.getfixturevalue("m0_elf" if board_id == "microbit" else "rv32_elf")
    dis = subprocess.run([objdump, "-d", str(elf)], capture_output=True, text=True).stdout
    body = dis.split("<qe_fully_connected_s8_bytes>:", 1)[1].split("\n\n", 1)[0]
    assert all(wnt in body for wnt in wants)
    n_mul = body.count("muls") if board_id == "microbit" else body.count("\tmul\t")
    assert n_mul >= 32                    # eight inputs a pass, four products each, inline


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1 << 30, (1 << 31) - 1), e=st.integers(1, 14), offset=st.integers(-128, 127),
       relu=st.booleans(), narrow=st.booleans(), seed=st.integers(0, 2**32 - 1))
@example(m=(1 << 31) - 1, e=1, offset=127, relu=False, narrow=False, seed=0)
@example(m=1 << 30, e=14, offset=-128, relu=True, narrow=False, seed=1)
@example(m=1518500250, e=7, offset=-3, relu=False, narrow=True, seed=2)
def test_the_step_table_is_tflm_output_stage(m, e, offset, relu, narrow, seed):
    """The cortex-m0 output stage's step table (step_table, fully_connected.h) against qmath's
    TFLM output stage: at every step's edge, at the saturation bounds, and at random
    accumulators of the unsaturated range, evaluated as the C does (uint32 u, the top byte b,
    one compare, the byte as int8); a table is found for every right shift whose range fits
    STEPS_MAX_SPAN."""
    act_min, act_max = (max(offset, -128) if relu else -128), (5 if narrow else 127)
    if act_min > act_max:
        act_min = act_max
    sat_low, sat_above = saturation_bounds(m, -e, offset, act_min, act_max)
    table = step_table(m, -e, offset, act_min, act_max, sat_low, sat_above)
    span = sat_above - sat_low - 1
    assert (table is None) == (span > STEPS_MAX_SPAN or span < 0)
    if table is None:
        return
    lo, mul, add, steps = table
    assert steps.size == 256 and 0 <= add < (1 << 32)
    rng = np.random.default_rng(seed)
    edges = steps[steps <= span]
    us = np.concatenate([edges, np.maximum(edges - 1, 0), [0, span],
                         rng.integers(0, span + 1, 200)]).astype(np.int64)
    for u in us.tolist():
        b = ((u * mul + add) & 0xFFFFFFFF) >> 24
        b = (b + int(u >= int(steps[b]))) & 0xFF
        got = b - 256 if b >= 128 else b
        assert got == qmath.requantize_output(lo + u, m, -e, offset, act_min, act_max), u
    for a in (sat_low, sat_low - 1, sat_above + 1, (1 << 31) - 1, -(1 << 31) + 1):
        want = act_min if a <= sat_low else act_max
        assert qmath.requantize_output(a, m, -e, offset, act_min, act_max) == want
