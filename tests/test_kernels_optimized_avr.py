"""The 8-bit AVR variant of the int8 FULLY_CONNECTED (firmware/core/kernels/optimized/avr/) is
bit-exact with the reference and the Python twin: its weight stream (avr_fc_stream) sums exactly
in 16 bits, the variant checks clean on the host under ASan/UBSan, and on the ATmega328P under
simavr (the cases compiled into the checker's flash, tests/c/fc_avr_check.c); end to end, the
CartPole int8 policy and a random int8 MLP are bit-exact with TF Lite Micro."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_fc_cases import (AVR, AVR_DEFINES, AVR_FC, AVR_VARIANT, INT32_MIN, PACKED, ROOT, S8,
                              Case, as_avr, avr_output_stage_cases, fc_case, output_stage_cases,
                              packed_edge_cases, twin_outputs)
from helpers_fc_checker import assert_same, host_checker, run_host, run_simavr
from quarl_edge.converters.ops.optimized.avr.fully_connected import (AVR_ROWS, avr_fc_stream,
                                                                     avr_output_stage_c)
from quarl_edge.targets.boards import get_board


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fc_variant")


# ------------------------------------------------------------------------------ avr (8-bit AVR)
def avr_edge_cases(max_depth: int = 300) -> list[Case]:
    """The packed layout's edge cases and the output-stage extremes as avr cases: depths 1..300
    (chunks of every length, the 255 cap), 1..9 rows (full and padded row groups), offsets at
    their ends, the largest biases, every shift (both requantization paths)."""
    return [as_avr(c) for c in packed_edge_cases(max_depth) + output_stage_cases()
            if c.kind in (S8, PACKED)] + avr_output_stage_cases()


def _chunks_of(stream: np.ndarray, rows: int, depth: int) -> list[np.ndarray]:
    """The chunks of each row group of an avr stream: per group a list of [len][AVR_ROWS]."""
    s, pos, groups = stream.astype(np.int64), 0, []
    for _ in range(-(-rows // AVR_ROWS)):
        chunks = []
        while (n := int(s[pos]) & 0xFF) != 0:
            chunks.append(s[pos + 1:pos + 1 + n * AVR_ROWS].reshape(n, AVR_ROWS))
            pos += 1 + n * AVR_ROWS
        pos += 1
        assert sum(len(c) for c in chunks) == depth
        groups.append(chunks)
    assert pos == s.size
    return groups


@settings(max_examples=40, deadline=None)
@given(case=fc_case(kind=AVR))
def test_avr_stream_chunks_sum_exactly_in_16_bits(case):
    """The generator's proof, checked from the stream: every chunk's sum of w' x lies in int16
    for every int8 x (its extremes 127 P + 128 N and -128 P - 127 N), each chunk is as long as it
    can be (one more input would break that, or it has 255), and the stream's weights are w'."""
    stream, bias_p, chunks = case.avr_stream()
    wp = case.w.reshape(case.rows, case.depth).astype(np.int64) + case.filter_offset
    full = np.zeros((-(-case.rows // AVR_ROWS) * AVR_ROWS, case.depth), np.int64)
    full[:case.rows] = wp
    fits = lambda c: np.all((127 * np.maximum(c, 0).sum(0) + 128 * np.maximum(-c, 0).sum(0) <= 32767)
                            & (128 * np.maximum(c, 0).sum(0) + 127 * np.maximum(-c, 0).sum(0) <= 32768))  # noqa: E731
    for g, group in enumerate(_chunks_of(stream, case.rows, case.depth)):
        d = 0
        for c in group:
            assert fits(c)
            assert np.array_equal(c.T, full[g * AVR_ROWS:(g + 1) * AVR_ROWS, d:d + len(c)])
            d += len(c)
            if d < case.depth and len(c) < 255:
                assert not fits(full[g * AVR_ROWS:(g + 1) * AVR_ROWS, d - len(c):d + 1].T)
    expect = (0 if case.bias is None else case.bias.astype(np.int64)) + case.input_offset * wp.sum(1)
    assert np.array_equal(bias_p[:case.rows], expect)


def test_avr_stream_only_for_int8_w_prime():
    """w + filter_offset outside int8 keeps the reference layout (None); at the edges it is used."""
    w = np.array([[127, -128, 0]], np.int8)
    assert avr_fc_stream(w, None, 0, 1) is None and avr_fc_stream(w, None, 0, -1) is None
    stream, _, chunks = avr_fc_stream(w, None, 3, 0)
    assert chunks == [3] and list(stream[:5]) == [3, 127, 0, 0, 0]   # 127 * 127 + 128 * 128 fits
    stream, _, chunks = avr_fc_stream(np.array([[-128, -128, 5]], np.int8), None, 3, 0)
    # (-128) * (-128) twice is 32768: the first two inputs are two chunks
    assert chunks == [1, 2] and list(stream[:6]) == [1, -128, 0, 0, 0, 2]


def test_the_avr_variant_on_the_host_under_sanitizers(tmp_module):
    """The avr file compiles for the host (its C walk of the stream with the same wrapping 16- and
    24-bit sums) and checks clean against the reference and the Python twin."""
    exe = host_checker(tmp_module, sanitize=True, variant_fc=AVR_FC, defines=AVR_DEFINES)
    cases = avr_edge_cases()
    assert len(cases) > 500
    status, out = run_host(exe, cases)
    assert_same(cases, status, out, twin=True)


@pytest.fixture(scope="module")
def avr_host_exe(tmp_module) -> Path:
    return host_checker(tmp_module, variant_fc=AVR_FC, defines=AVR_DEFINES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=AVR), min_size=1, max_size=8))
def test_random_avr_cases_on_the_host(avr_host_exe, cases):
    status, out = run_host(avr_host_exe, cases)
    assert_same(cases, status, out, twin=True)


# On the ATmega328P under simavr: the cases compiled into the checker's flash (tests/c/fc_avr_check.c)
AVR_CHECK = ROOT / "tests" / "c" / "fc_avr_check.c"
AVR_FLASH_FOR_CASES = 20000      # of 32 KiB: the checker, both kernels and the requantizer fit
AVR_MAX_IN, AVR_MAX_OUT = 768, 384


def _avr_fits(c: Case) -> bool:
    return c.batches * c.depth <= AVR_MAX_IN and c.batches * c.rows <= AVR_MAX_OUT


def _avr_case_bytes(c: Case) -> int:
    return (c.x.size + c.w.size + c.avr_stream()[0].size
            + 4 * (c.rows if c.bias is not None else 0) + 4 * (-(-c.rows // AVR_ROWS) * AVR_ROWS) + 64)


def _c_list(vals) -> str:
    lit = lambda v: "(-2147483647 - 1)" if int(v) == INT32_MIN else str(int(v))  # noqa: E731
    return "{" + ", ".join(lit(v) for v in vals) + "}"


def avr_cases_header(cases: list[Case]) -> str:
    out, rows = [], []
    for k, c in enumerate(cases):
        stream, bias_p, _ = c.avr_stream()
        out.append(f"static const QE_FLASH int8_t c{k}_x[] = {_c_list(c.x)};")
        out.append(f"static const QE_FLASH int8_t c{k}_w[] = {_c_list(c.w)};")
        if c.bias is not None:
            out.append(f"static const QE_FLASH int32_t c{k}_b[] = {_c_list(c.bias)};")
        out.append(f"static const QE_FLASH int8_t c{k}_s[] = {_c_list(stream)};")
        out.append(f"static const QE_FLASH int32_t c{k}_bp[] = {_c_list(bias_p)};")
        q = (f"{c.output_offset}, {c.multiplier}, {c.shift}, {c.act_min}, {c.act_max}")
        dims = f"{c.batches}u, {c.depth}u, {c.rows}u"
        qa = (f".output_offset = {c.output_offset}, .output_multiplier = {c.multiplier}, "
              f".output_shift = {c.shift}, .activation_min = {c.act_min}, "
              f".activation_max = {c.act_max},\n"
              + avr_output_stage_c(c.avr_stage()).replace("/*", "//").replace("*/", "")
              + f".batches = {c.batches}u, .accum_depth = {c.depth}u, .output_depth = {c.rows}u")
        rows.append(f"    {{{{{c.input_offset}, {c.filter_offset}, {q}, {dims}}},\n{{{qa}}},\n c{k}_x, c{k}_w, "
                    f"{f'c{k}_b' if c.bias is not None else 'QE_FLASH_NULL'}, c{k}_s, c{k}_bp}},")
    return "\n".join(out + ["static const QE_FLASH fc_avr_case_t cases[] = {", *rows, "};", ""])


def avr_batches(cases: list[Case]) -> list[list[Case]]:
    """The cases in groups that fit one checker's flash."""
    groups, cur, size = [], [], 0
    for c in cases:
        b = _avr_case_bytes(c)
        if cur and size + b > AVR_FLASH_FOR_CASES:
            groups.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += b
    return groups + ([cur] if cur else [])


def run_simavr_checker(cases: list[Case], tmp: Path, name: str) -> list[bytes]:
    """Build the checker with `cases` in flash for the atmega328p (its board flags), run it under
    simavr, and return the variant's outputs per case; every case must match the board's
    reference (status 0)."""
    return run_simavr(AVR_CHECK, AVR_FC, avr_cases_header(cases), len(cases), tmp, name)


def assert_avr_board(cases: list[Case], tmp: Path, name: str) -> None:
    for j, group in enumerate(avr_batches(cases)):
        outs = run_simavr_checker(group, tmp, f"{name}{j}")
        for k, (c, o) in enumerate(zip(group, outs)):
            assert o == twin_outputs(c), (f"{name}{j} case {k}: batches {c.batches} depth {c.depth} "
                                          f"rows {c.rows} shift {c.shift}: the board's avr "
                                          f"kernel differs from the Python twin")


def test_the_avr_path_is_compiled_for_atmega328p(tmp_path):
    """The checker's ELF has the variant's asm: LPM/MULS in the dot product (both entry points),
    MUL in the batch routine's output stage."""
    cases = [c for c in avr_edge_cases(16) if _avr_fits(c)][:4]
    run_simavr_checker(cases, tmp_path, "asm")
    dis = subprocess.run(["avr-objdump", "-d", str(tmp_path / "asm" / "fc_avr_check.elf")],
                         capture_output=True, text=True).stdout
    dot = dis.split("<qe_avr_fc_dot4>:", 1)[1].split("\n\n", 1)[0]
    batch = dis.split("<qe_avr_fc_batch>:", 1)[1].split("\n\n", 1)[0]
    assert "muls" in dot and "lpm" in dot and "muls" in batch and "mul\t" in batch


def test_avr_edge_cases_on_atmega328p(tmp_path):
    """The edge cases of depth <= 65 and the output-stage extremes, on simavr: the variant equals
    the board's reference and the Python twin."""
    cases = [c for c in avr_edge_cases(65) if _avr_fits(c)]
    assert len(cases) > 300
    assert_avr_board(cases, tmp_path, "edge")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(fc_case(kind=AVR, max_depth=96, max_rows=24), min_size=8, max_size=20))
def test_random_avr_cases_on_atmega328p(tmp_path_factory, cases):
    cases = [c for c in cases if _avr_fits(c)]
    assert_avr_board(cases, tmp_path_factory.mktemp("avr_random"), "random")


def test_cartpole_int8_with_the_avr_variant_is_bit_exact_on_atmega328p(tmp_path):
    from quarl_edge.measure.validate import validate
    board = get_board("atmega328p")
    assert board.kernels == AVR_VARIANT
    res = validate(ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite", board,
                   tmp_path / "fw", random_n=60)
    assert f"optimized/{AVR_VARIANT}/fully_connected.c" in (tmp_path / "fw" / "build.cmd").read_text()
    assert (tmp_path / "fw" / "gen" / "model.c").read_text().count("qe_fully_connected_s8_avr(") == 3
    assert res["bit_exact"] and res["mismatches"] == 0 and res["n"] == 60


def test_a_random_int8_mlp_with_the_avr_variant_is_bit_exact_on_atmega328p(tmp_path):
    """Padded row groups (37, 19, 3 rows), depth 7, RELU: TF Lite Micro's outputs."""
    from helpers_models import convert, random_mlp
    from quarl_edge.measure.validate import validate
    rng = np.random.default_rng(1)
    model = tmp_path / "mlp.tflite"
    model.write_bytes(convert(random_mlp(1, 7, [37, 19, 3], ["relu", "relu", "none"], 2.0), "int8",
                              rng.standard_normal((64, 7)).astype(np.float32)))
    res = validate(model, get_board("atmega328p"), tmp_path / "fw", random_n=40)
    assert "qe_fully_connected_s8_avr(" in (tmp_path / "fw" / "gen" / "model.c").read_text()
    assert res["bit_exact"] and res["mismatches"] == 0
