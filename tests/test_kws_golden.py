"""Keyword spotting (issue 26): TF Lite Micro's keyword benchmark models end in SOFTMAX int8 ->
int16 and QUANTIZE int16 -> int32 after seven SVDF layers. Here:

- SOFTMAX int8 -> int16 (output 1/65536, -32768): the Python twin (quarl_edge/converters/ops/softmax.py) against
  the interpreter over many scales and betas; hand-built one-op models, the generated C
  against the tflite-micro interpreter by hypothesis (rows, depth, input scale, beta); the
  refusal of other output quantizations;
- SVDF int8 with an int16 or an int8 state: hand-built one-op models (random geometry, rank,
  quantization; always a bias: without one TFLM's Prepare crashes, and we refuse it), a run
  of records with the state carried over (and reset every few records), against the interpreter by hypothesis; refusals by name;
- the public models themselves (tests/fixtures/tflm-keyword, Apache 2.0, commit in SOURCE.md):
  `quarl-edge validate` on the host and on mps2-an386 (QEMU), bit-exact with TFLM; and MLPerf
  Tiny's trained DS-CNN keyword model (tests/fixtures/mlperf-tiny-kws, Apache 2.0), whose
  outputs, unlike the scrambled models', follow the input.

No real-converter model: Keras has no SVDF layer, and the converter gives an int8 softmax an
int8 output (16x8 gives int16 -> int16); the public models are the converter's own output.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import quarl_edge as qe
from helpers_models import compare_generated, op_model, schema, tflm_run
from quarl_edge.converters import cgen
from quarl_edge.converters.ops.softmax import softmax_params_s8, softmax_s8
from quarl_edge.core.errors import UnsupportedOpError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "tflm-keyword"
MLPERF_KWS = ROOT / "tests" / "fixtures" / "mlperf-tiny-kws" / "kws_ref_model.tflite"
S = schema()
_HC = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
CHEAP = settings(max_examples=20, deadline=None, suppress_health_check=_HC,
                 phases=[Phase.explicit, Phase.reuse, Phase.generate])


def _f32(v: float) -> float:
    return float(np.float32(v))


def _workdir(tmp_path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


# ----------------------------------------------------------------- SOFTMAX int8 -> int16
def _softmax_s16_model(shape, in_q, beta, out_q=(1 / 65536, -32768)):
    opt = S.SoftmaxOptionsT()
    opt.beta = beta
    return op_model("SOFTMAX", [dict(shape=shape, dtype="int8", q=in_q)],
                    [dict(shape=shape, dtype="int16", q=out_q)], opt)


def test_softmax_int16_output_twin_matches_interpreter():
    """softmax_s8(out_dtype="int16") (TFLM's arithmetic in Python) against the interpreter
    over 60 random input quantizations and betas: rows with ties, one-hot rows, saturated ones."""
    rng = np.random.default_rng(26)
    for _ in range(60):
        s, zp = _f32(10 ** rng.uniform(-3, 0.7)), int(rng.integers(-128, 128))
        beta = _f32(rng.choice([1.0, 1.0, 0.5, 2.0, rng.uniform(0.05, 4)]))
        depth = int(rng.integers(1, 24))
        x = rng.integers(-128, 128, (24, 1, depth)).astype(np.int8)
        x[0], x[1, 0, 0], x[1, 0, 1:], x[2] = 127, 127, -128, x[2, 0, 0]
        mult, shift, diff_min = softmax_params_s8(s, beta)
        ref = np.stack(tflm_run(_softmax_s16_model([1, depth], (s, zp), beta), list(x)))
        got = softmax_s8(x, mult, shift, diff_min, "int16")
        assert ref.dtype == got.dtype == np.int16 and np.array_equal(ref, got), (s, zp, beta, depth)


@CHEAP
@given(seed=st.integers(0, 2 ** 16), rows=st.integers(1, 4), depth=st.integers(1, 80),
       beta=st.sampled_from([1.0, 1.0, 0.25, 3.0]))
def test_softmax_int8_to_int16_equals_tflm(tmp_path, seed, rows, depth, beta):
    rng = np.random.default_rng(seed)
    q = (_f32(10 ** rng.uniform(-3, 0.7)), int(rng.integers(-128, 128)))
    x = rng.integers(-128, 128, (200, rows, depth)).astype(np.int8)
    x[0], x[1] = -128, 127                    # all equal: 1/depth each
    x[2, :, 0], x[2, :, 1:] = 127, -128       # one-hot: the 16-bit top and the skipped -32768
    r = compare_generated(_softmax_s16_model([rows, depth], q, beta), [x], _workdir(tmp_path),
                          f"softmax int8->int16 {q} beta {beta}")
    assert "qe_softmax_s8_s16(" in r["gm"].c_path.read_text()


def test_softmax_int8_to_int16_refusals(tmp_path):
    path = tmp_path / "s.tflite"
    path.write_bytes(_softmax_s16_model([1, 4], (0.1, 0), 1.0, out_q=(1 / 65536, 0)))
    with pytest.raises(UnsupportedOpError,
                       match=r"op 0 SOFTMAX \(int8 -> int16\).*zero point 0.*1/65536.*-32768"):
        cgen.generate(path, tmp_path / "g")
    path.write_bytes(_softmax_s16_model([1, 4], (0.1, 0), 1.0, out_q=(1 / 32768, -32768)))
    with pytest.raises(UnsupportedOpError, match=r"SOFTMAX.*scale 3.05176e-05"):
        cgen.generate(path, tmp_path / "g2")
    # int16 -> int8 is no pair TFLM has
    opt = S.SoftmaxOptionsT()
    opt.beta = 1.0
    path.write_bytes(op_model("SOFTMAX", [dict(shape=[1, 4], dtype="int16", q=(0.1, 0))],
                              [dict(shape=[1, 4], dtype="int8", q=(1 / 256, -128))], opt))
    with pytest.raises(UnsupportedOpError, match=r"op 0 SOFTMAX \(int16 -> int8\)"):
        cgen.generate(path, tmp_path / "g3")


# ---------------------------------------------------------------------------------- SVDF
def _svdf_model(rng, batches, input_size, units, rank, memory, state, with_bias):
    """One SVDF: random int8 feature weights, time weights of the state's type, scales drawn so
    the state and the output neither vanish nor always saturate."""
    filters = units * rank
    s_in = _f32(10 ** rng.uniform(-2, 0))
    s_wf = _f32(10 ** rng.uniform(-3, -1))
    dot = 60.0 * np.sqrt(input_size) * 127 * s_in * s_wf      # a typical feature dot, real
    sv = 10 ** (rng.uniform(0.5, 2.5) if state == "int8" else rng.uniform(1, 4))   # its state int
    s_state = _f32(dot / sv)
    s_wt = _f32(10 ** rng.uniform(-3, -1))
    s_bias = _f32(np.float32(s_state) * np.float32(s_wt))
    wt_typ = 70 if state == "int8" else 1700
    tdot = np.sqrt(memory * rank) * min(sv, 100 if state == "int8" else 30000) * wt_typ * s_state * s_wt
    s_out = _f32(tdot / 10 ** rng.uniform(0.7, 2))
    z_in, z_out = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    z_state = int(rng.integers(-20, 21)) if state == "int8" else 0
    wf = rng.integers(-127, 128, (filters, input_size)).astype(np.int8)
    wt = (rng.integers(-127, 128, (filters, memory)) if state == "int8"
          else rng.integers(-3000, 3001, (filters, memory))).astype(state)
    bias = rng.integers(-20000, 20001, units).astype(np.int32)
    opt = S.SVDFOptionsT()
    opt.rank = rank
    ins = [dict(shape=[batches, input_size], dtype="int8", q=(s_in, z_in)),
           dict(shape=[filters, input_size], dtype="int8", q=(s_wf, 0), data=wf),
           dict(shape=[filters, memory], dtype=state, q=(s_wt, 0), data=wt),
           dict(shape=[units], dtype="int32", q=(s_bias, 0), data=bias) if with_bias else None,
           dict(shape=[batches, memory * filters], dtype=state, q=(s_state, z_state),
                variable=True)]
    return op_model("SVDF", ins, [dict(shape=[batches, units], dtype="int8", q=(s_out, z_out))], opt)


@CHEAP
@given(seed=st.integers(0, 2 ** 16), batches=st.integers(1, 2), input_size=st.integers(1, 24),
       units=st.integers(1, 8), rank=st.integers(1, 3), memory=st.integers(1, 12),
       state=st.sampled_from(["int16", "int8"]), reset_every=st.sampled_from([0, 7]))
def test_svdf_int8_equals_tflm(tmp_path, seed, batches, input_size, units, rank, memory, state,
                               reset_every):
    rng = np.random.default_rng(seed)
    model = _svdf_model(rng, batches, input_size, units, rank, memory, state, True)
    x = rng.integers(-128, 128, (60, batches, input_size)).astype(np.int8)
    r = compare_generated(model, [x], _workdir(tmp_path),
                          f"svdf {state} b{batches} i{input_size} u{units} r{rank} m{memory}",
                          reset_every=reset_every)
    fn = "qe_svdf_s8_s16(" if state == "int16" else "qe_svdf_s8_s8("
    assert fn in r["gm"].c_path.read_text()


def test_svdf_refusals(tmp_path):
    path = tmp_path / "s.tflite"
    rng = np.random.default_rng(3)
    # the state not a variable tensor (a graph input instead)
    opt = S.SVDFOptionsT()
    opt.rank = 1
    ins = [dict(shape=[1, 4], dtype="int8", q=(0.1, 0)),
           dict(shape=[2, 4], dtype="int8", q=(0.01, 0), data=rng.integers(-9, 9, (2, 4))),
           dict(shape=[2, 3], dtype="int16", q=(0.01, 0), data=rng.integers(-9, 9, (2, 3))),
           None,
           dict(shape=[1, 6], dtype="int16", q=(0.001, 0))]
    path.write_bytes(op_model("SVDF", ins, [dict(shape=[1, 2], dtype="int8", q=(0.1, 0))], opt))
    with pytest.raises(UnsupportedOpError, match=r"op 0 SVDF .*no bias: TFLM's int8 SVDF"):
        cgen.generate(path, tmp_path / "g0")
    ins[3] = dict(shape=[2], dtype="int32", q=(1e-5, 0), data=np.arange(2))
    path.write_bytes(op_model("SVDF", ins, [dict(shape=[1, 2], dtype="int8", q=(0.1, 0))], opt))
    with pytest.raises(UnsupportedOpError, match=r"op 0 SVDF .*state 'in4' is not a variable"):
        cgen.generate(path, tmp_path / "g")
    # float32 SVDF
    fl = [dict(shape=d["shape"], dtype="float32", data=d.get("data"),
               variable=k == 4) if d else None for k, d in enumerate(ins)]
    path.write_bytes(op_model("SVDF", fl, [dict(shape=[1, 2], dtype="float32")], opt))
    with pytest.raises(UnsupportedOpError, match=r"op 0 SVDF \(float32.*float32 SVDF; supported: int8"):
        cgen.generate(path, tmp_path / "g2")
    # time weights of another type than the state
    ins[4] = dict(ins[4], variable=True, dtype="int8", q=(0.001, 0))
    path.write_bytes(op_model("SVDF", ins, [dict(shape=[1, 2], dtype="int8", q=(0.1, 0))], opt))
    with pytest.raises(UnsupportedOpError, match=r"time weights int16, state int8"):
        cgen.generate(path, tmp_path / "g3")


# ------------------------------------------------------------------ the public KWS models
def _every_op_an_output(src: Path, dst: Path) -> Path:
    """The model with every op's output a graph output (the same ops and weights): the scrambled
    weights saturate the final softmax to one value for every input, while the SVDF outputs
    inside still vary with the input, so those are compared too."""
    import flatbuffers
    m = S.ModelT.InitFromObj(S.Model.GetRootAsModel(src.read_bytes(), 0))
    sg = m.subgraphs[0]
    sg.outputs = np.array([int(op.outputs[0]) for op in sg.operators], np.int32)
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    dst.write_bytes(bytes(b.Output()))
    return dst


@pytest.mark.parametrize("name", ["keyword_scrambled", "keyword_scrambled_8bit"])
@pytest.mark.parametrize("board", ["host", "mps2-an386"])
def test_tflm_keyword_model_validates_bit_exact(tmp_path, name, board):
    model = FIXTURES / f"{name}.tflite"
    res = qe.validate(model, board, random=24, seed=1, out=tmp_path / "build")
    assert res.n == 24 and res.bit_exact and res.differing == 0, res
    # every op's output, against TFLM's
    every = _every_op_an_output(model, tmp_path / f"{name}_every.tflite")
    res = qe.validate(every, board, random=24, seed=2, out=tmp_path / "build2",
                      save_outputs=tmp_path / "y.npz")
    assert res.n == 24 and res.bit_exact and res.differing == 0, res
    assert len(res.outputs) == 15
    if name == "keyword_scrambled":      # (the 8-bit one saturates everywhere)
        ys = np.load(tmp_path / "y.npz")
        varying = [k for k in ys.files if len({r.tobytes() for r in ys[k]}) > 1]
        assert len(varying) >= 4, varying


@pytest.mark.parametrize("board", ["host", "mps2-an386"])
def test_mlperf_tiny_kws_validates_bit_exact(tmp_path, board):
    res = qe.validate(MLPERF_KWS, board, random=16, seed=3, out=tmp_path / "build",
                      save_outputs=tmp_path / "y.npy")
    assert res.n == 16 and res.bit_exact and res.differing == 0, res
    y = np.load(tmp_path / "y.npy").reshape(16, 12)
    assert len({r.tobytes() for r in y}) > 8       # the 12 class scores vary with the input


@pytest.mark.parametrize("name", ["keyword_scrambled", "keyword_scrambled_8bit"])
def test_keyword_models_are_clean_under_asan_and_ubsan(tmp_path, name):
    """SVDF (its state shift, scratch) and SOFTMAX int8 -> int16 under AddressSanitizer and
    UBSan over 200 records with the state carried over: no report, the plain build's bytes."""
    import subprocess

    from helpers_models import DRIVER, compile_c, core_sources
    from test_sanitizers import SAN
    cgen.generate(FIXTURES / f"{name}.tflite", tmp_path / "gen")
    sources = [tmp_path / "gen" / "model.c", *core_sources(), DRIVER]
    plain = compile_c(sources, tmp_path / "plain")
    sanitized = compile_c(sources, tmp_path / "san", SAN)
    x = np.random.default_rng(4).integers(-32768, 32768, (200, 96)).astype(np.int16)
    x[0], x[1] = -32768, 32767
    runs = [subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, timeout=120)
            for exe in (plain, sanitized)]
    assert runs[1].returncode == 0, runs[1].stderr.decode(errors="replace")[-2000:]
    assert b"runtime error" not in runs[1].stderr and b"ERROR: AddressSanitizer" not in runs[1].stderr
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout) == 200 * 2 * 4
