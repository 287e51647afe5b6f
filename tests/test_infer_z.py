"""Zero-run coded inputs (protocol v5, docs/protocol.md "Zero-run coded inputs"): INFER_Z carries
the inputs with every run of zero bytes as 0x00 + its length. The coding (property tests), the
real harness (firmware/core, host port, with and without ASan/UBSan) decoding it bit for bit
against INFER, in one frame where the raw bytes would stream, refusing malformed codes without
touching the input, and BoardLink choosing it for sparse inputs only."""
from __future__ import annotations

import os
import struct
import subprocess
import tty

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quarl_edge.link import protocol as P
from quarl_edge.link.runner import BoardLink
from helpers_harness import SAN_ENV, SANITIZE, Board, assert_clean_exit, build, dequant

INFER, INFER_Z = P.COMMANDS["INFER"], P.COMMANDS["INFER_Z"]
N = 16                       # the identity model, this wide: int8 [1,N] in; float [1,N] + [1,1] out


def sparse_bytes(max_size=600):
    """Byte strings that are mostly zeros, with runs longer than one token (255) too."""
    piece = st.one_of(st.binary(min_size=1, max_size=4),
                      st.integers(1, 700).map(lambda k: bytes(k)))
    return st.lists(piece, max_size=12).map(b"".join).filter(lambda b: len(b) <= max_size)


@given(sparse_bytes(2000))
def test_the_code_round_trips_and_never_holds_a_zero_run_of_zero(data):
    code = P.zrun_encode(data)
    assert P.zrun_decode(code, len(data)) == data
    assert len(code) <= 2 * len(data)
    # a 0x00 is always followed by a run length in 1..255
    i = 0
    while i < len(code):
        if code[i] == 0:
            assert 1 <= code[i + 1] <= P.ZRUN_MAX
            i += 2
        else:
            i += 1


def test_sparse_float_images_shrink_tenfold():
    rng = np.random.default_rng(0)
    obs = (rng.random((10, 10, 4)) < 0.03).astype(np.float32)   # a MinAtar-like frame
    code = P.zrun_encode(obs.tobytes())
    assert obs.nbytes == 1600 and len(code) < 160, len(code)


@pytest.mark.parametrize("code, why", [(b"\0", "without its length"), (b"\0\0", "length 0"),
                                       (b"\x05\0", "without its length"),
                                       (b"\x05\0\x02", "3 bytes"), (b"\0\xff", "more than")])
def test_malformed_codes_are_refused(code, why):
    with pytest.raises(ValueError, match=why):
        P.zrun_decode(code, 4)


# --------------------------------------------------------------------------- the real harness
@pytest.fixture(scope="module")
def zbuilds(tmp_path_factory):
    d = tmp_path_factory.mktemp("zrun-harness")
    one = [f"-DQE_IDENTITY_N={N}", "-DQE_MAX_PAYLOAD=128u"]          # inputs in one frame
    streamed = [f"-DQE_IDENTITY_N={N}", "-DQE_MAX_PAYLOAD=8u", "-DQE_INPUT_COPY_BYTES=0u"]
    return {"one-frame": (build(d / "one", one), {}),
            "one-frame-sanitized": (build(d / "one_san", one + SANITIZE), SAN_ENV),
            "streamed": (build(d / "streamed", streamed), {}),
            "streamed-sanitized": (build(d / "streamed_san", streamed + SANITIZE), SAN_ENV)}


def outputs_of(b: Board, reply: P.Frame, streamed: bool) -> tuple[list[float], float]:
    assert reply.cmd == INFER_Z | P.REPLY_BIT, reply
    if streamed:      # the cost only: the outputs come with OUT_CHUNK
        assert len(reply.payload) == 4
        out = b""
        for off, n in P.chunk_spans(4 * N + 4, 2):
            f = b.request(P.COMMANDS["OUT_CHUNK"], struct.pack("<IH", off, n))
            out += f.payload[4:]
    else:
        out = reply.payload[4:]
    *ys, total = struct.unpack(f"<{N + 1}f", out)
    return ys, total


@pytest.mark.parametrize("build_name", ["one-frame", "one-frame-sanitized", "streamed",
                                        "streamed-sanitized"])
def test_the_harness_decodes_infer_z_bit_for_bit(zbuilds, build_name):
    """Sparse inputs through INFER_Z give the identity model's outputs, exactly; on the build
    whose 16 raw input bytes would need 4 IN_CHUNK frames (max_payload 8), one INFER_Z frame.
    A retried INFER_Z (same sequence number and CRC) is answered again, not run again (the
    model's running total shows it)."""
    exe, env = zbuilds[build_name]
    streamed = build_name.startswith("streamed")
    rng = np.random.default_rng(1)
    with Board(exe, env) as b:
        b.hello()
        for k in range(12):
            x = np.zeros(N, np.int8)
            idx = rng.choice(N, size=int(rng.integers(0, 3)), replace=False)
            x[idx] = rng.integers(-128, 128, size=len(idx))
            code = P.zrun_encode(x.tobytes())
            assert len(code) <= (8 if streamed else 128)
            ys, _ = outputs_of(b, b.request(INFER_Z, code), streamed)
            assert ys == dequant(x.tolist()), (k, x)
        # the retry: same frame again -> the same reply, and the model did not run again
        x = np.zeros(N, np.int8)
        x[3] = 7
        frame = P.encode_frame(INFER_Z, P.zrun_encode(x.tobytes()), b.next_seq())
        b.send(frame)
        first = outputs_of(b, b.frame(), streamed)
        b.send(frame)
        again = outputs_of(b, b.frame(), streamed)
        assert again == first                      # the model's running total did not move
        rerun = outputs_of(b, b.request(INFER_Z, P.zrun_encode(x.tobytes())), streamed)
        assert rerun[0] == first[0] and rerun[1] != first[1]     # a new request runs
        assert_clean_exit(b)


@pytest.mark.parametrize("build_name", ["one-frame-sanitized", "streamed-sanitized"])
def test_malformed_infer_z_is_bad_payload_and_changes_nothing(zbuilds, build_name):
    exe, env = zbuilds[build_name]
    with Board(exe, env) as b:
        b.hello()
        x = np.zeros(N, np.int8)
        x[[0, 5, 15]] = (4, 9, -4)          # coded in 7 bytes: one frame on either build
        good = b.request(INFER_Z, P.zrun_encode(x.tobytes()))
        assert good.cmd == INFER_Z | P.REPLY_BIT
        for code in (b"\0", b"\0\0", b"\x05\0", b"\0\x0f",        # 15 bytes: one short
                     b"\0\x11", b"\0\xff\0\xff", b"\x01\0\x10"):  # more than the inputs
            f = b.request(INFER_Z, code)
            assert f.is_error and f.error()[0] == "BAD_PAYLOAD", (code, f)
        if build_name.startswith("one-frame"):
            # BENCH runs on the last good input: a malformed code wrote nothing over it
            bench = b.request(P.COMMANDS["BENCH"], struct.pack("<H", 1))
            assert bench.cmd == P.COMMANDS["BENCH"] | P.REPLY_BIT
            again = b.request(INFER, x.tobytes())
            assert again.payload[4:4 + 4 * N] == good.payload[4:4 + 4 * N]
            # the running total of output 0's first element, (4 + 3) * 0.5 a run: BENCH's run
            # was on x too
            (t_good,), (t_after,) = (struct.unpack_from("<f", f.payload, 4 + 4 * N)
                                     for f in (good, again))
            assert t_after == t_good + 2 * 3.5
        assert_clean_exit(b)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(-128, 127), min_size=N, max_size=N),
       st.lists(st.booleans(), min_size=N, max_size=N))
def test_boardlink_codes_sparse_inputs_only_and_gets_what_infer_gets(zbuilds, values, keep):
    """BoardLink.infer sends INFER_Z when the code saves at least an eighth of the bytes (it
    counts them in stats["coded"]), INFER otherwise; the board answers the same either way."""
    exe, _ = zbuilds["one-frame"]
    x = np.array([v if k else 0 for v, k in zip(values, keep)], np.int8).reshape(1, N)
    master, slave = os.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen([str(exe)], stdin=master, stdout=master, close_fds=True)
    os.close(master)
    try:
        with BoardLink(os.ttyname(slave), alive=lambda: proc.poll() is None) as link:
            link.hello(10)
            (y, _), _ = link.infer([x])
            raw = x.tobytes()
            coded = len(P.zrun_encode(raw)) <= len(raw) - len(raw) // 8 - 1
            assert link.stats["coded"] == int(coded)
            assert y.ravel().tolist() == dequant(x.ravel().tolist())
    finally:
        proc.terminate()
        proc.wait(5)
        os.close(slave)
