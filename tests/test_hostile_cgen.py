"""Issue 36: a model file never runs code through the C we generate from it, and the .tflite
reader refuses malformed flatbuffers in one line, bounded in time and memory.

The attack: a tensor name ending in `*\\` newline `/` (or, under -std=c99's trigraphs, `*??/`
newline `/`) splices the C comment it is printed in shut, and the rest of the name is code;
here an `__asm__` that registers a constructor running `touch MARKER` (valid both at file scope
and inside qe_model_invoke, where the name is printed too). Every case goes through
tests/helpers_hostile.py's run_hostile (QE_HOSTILE_TABLE=FILE collects the table).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from helpers_hostile import assert_bounded, assert_refused, assert_unchanged, run_hostile, snapshot
from helpers_tflite import build_tflite, quant, schema, tensor

from quarl_edge.converters import cgen
from quarl_edge.converters.safe_text import SAFE, safe_text

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "firmware" / "core"
INT8 = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"


def asm_payload(marker: Path) -> bytes:
    """C that, once out of its comment, runs `touch marker` when the program starts."""
    return (b'__asm__(".pushsection .init_array,\\"aw\\"\\n.quad 1f\\n.popsection\\n'
            b'.pushsection .text.qe,\\"ax\\"\\n1: push %rbp\\nlea 2f(%rip), %rdi\\ncall system@PLT\\n'
            b'pop %rbp\\nret\\n2: .asciz \\"touch ' + str(marker).encode() + b'\\"\\n.popsection");')


def hostile_strings(marker: Path) -> dict[str, bytes]:
    code = asm_payload(marker)
    return {
        "splice": b"w*\\\n/ " + code + b" /\\\n*",
        "trigraph": b"w*??/\n/ " + code + b" /??/\n*",
        "close": b"w */ " + code + b" /* x",
        "quote": b'w"); ' + code + b' ("',
        "bytes": b"w\n\x00\r\t\x0c\x1b[31m %41 \xc3\xa9 \xff\xfe\x80 ??= ??( // ' \\",
    }


def fc_strings_model(names: list[bytes], description: bytes = b"", extra: bytes = b"") -> bytes:
    """int8 input -> FULLY_CONNECTED (weights, bias) -> output, its four tensor names `names`,
    and, when given, every other string of the file: description, subgraph name, a metadata
    entry's name, a signature's key and tensor names."""
    s = schema()
    w = (np.arange(8, dtype=np.int8) - 4).reshape(2, 4)
    ts = [tensor(names[0], [1, 4], s.TensorType.INT8, 1, quant(0.1, 0)),
          tensor(names[1], [2, 4], s.TensorType.INT8, 2, quant(0.05, 0)),
          tensor(names[2], [1, 2], s.TensorType.INT8, 3, quant(0.2, -3)),
          tensor(names[3], [2], s.TensorType.INT32, 4, quant(np.float32(0.1) * np.float32(0.05), 0))]
    data = build_tflite(ts, [None, None, w.tobytes(), None, np.array([7, -9], np.int32).tobytes()],
                        [("FULLY_CONNECTED", [0, 1, 3], [2], s.FullyConnectedOptionsT())], [0], [2])
    if not (description or extra):
        return data
    import flatbuffers
    m = s.ModelT.InitFromPackedBuf(data, 0)
    m.description = description
    m.subgraphs[0].name = extra
    meta = s.MetadataT()
    meta.name, meta.buffer = extra, 0
    m.metadata = [meta]
    sig = s.SignatureDefT()
    sig.signatureKey = extra
    inp, out = s.TensorMapT(), s.TensorMapT()
    inp.name, inp.tensorIndex, out.name, out.tensorIndex = extra, 0, extra + b"o", 2
    sig.inputs, sig.outputs = [inp], [out]
    m.signatureDefs = [sig]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


PLAIN = [b"input", b"dense/kernel", b"output", b"dense/bias"]


# ---------------------------------------------------------------- the one gate: safe_text
def test_safe_text_keeps_the_names_tensorflow_writes():
    for name in ["serving_default_observation:0", "sequential/dense/MatMul;sequential/dense/BiasAdd",
                 "StatefulPartitionedCall:0", "qnet/q_values/MatMul1", "a b-c.d_e=f,(g)[h]"]:
        assert safe_text(name) == name


@pytest.mark.parametrize("raw", list(hostile_strings(Path("/tmp/M")).values())
                         + ["é☃".encode(), b"%2A", bytes(range(256))])
def test_safe_text_leaves_nothing_that_can_end_a_comment_or_a_string(raw):
    out = safe_text(raw)
    assert set(out) <= SAFE | set("%0123456789ABCDEF")
    assert not any(bad in out for bad in ("*", "\\", "?", '"', "\n", "\0"))
    assert urllib.parse.unquote_to_bytes(out) == raw      # nothing lost: %XX is the byte XX
    assert safe_text(raw.decode("utf-8", "surrogateescape")) == out


# --------------------------------------------------------------- generated C tokenises as meant
def gcc(*args, cwd=None) -> str:
    return subprocess.run(["gcc", "-std=c99", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def tokens(c_path: Path) -> str:
    """model.c as the compiler sees it: preprocessed (comments gone, splices and trigraphs
    applied), with what legitimately differs between two models normalised: the constants'
    identifiers made from tensor names, and the file's hash."""
    text = gcc("-E", "-P", f"-I{CORE}", str(c_path))
    text = re.sub(r"\b([bcw]\d+_)\w+", r"\1NAME", text)
    return re.sub(r"\{ (0x[0-9a-f]{2}, ){7}0x[0-9a-f]{2} \}", "{ HASH }", text)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_every_hostile_string_stays_in_its_comment(tmp_path):
    """Every string field of the file holds splices, trigraphs, */, quotes, newlines, NUL and
    non-UTF-8; the file's own name too. The C compiles cleanly under -pedantic -Wtrigraphs and
    the compiler sees exactly the tokens of the same model with plain names."""
    strings = hostile_strings(tmp_path / "MARKER")
    plain = tmp_path / "m.tflite"
    plain.write_bytes(fc_strings_model(PLAIN))
    hostile_dir = tmp_path / "hostile"
    hostile_dir.mkdir()
    names = [strings["splice"], strings["trigraph"], strings["close"], strings["quote"]]
    for k, (key, extra) in enumerate(strings.items()):
        hostile = hostile_dir / 'm*\\\n??="%.tflite'
        hostile.write_bytes(fc_strings_model(names[k:] + names[:k], extra, extra))
        for kernels in ("reference", "cortex-m-dsp", "cortex-m0"):
            want = cgen.generate(plain, tmp_path / "plain" / kernels, kernels=kernels)
            got = cgen.generate(hostile, tmp_path / key / kernels, kernels=kernels)
            c = got.c_path.read_text()
            assert "\\" not in c and "??" not in c and c.isascii(), key
            gcc("-Wall", "-Wextra", "-Werror", "-Wtrigraphs", "-pedantic", "-fsyntax-only",
                f"-I{CORE}", str(got.c_path))
            assert tokens(got.c_path) == tokens(want.c_path), (key, kernels)
    assert not (tmp_path / "MARKER").exists()


def test_the_tflm_array_takes_a_hostile_file_name(tmp_path):
    from quarl_edge.converters.tflm_export import export
    src = tmp_path / 'x*\\\n??="*.tflite'
    src.write_bytes(INT8.read_bytes())
    c_path, _ = export(src, tmp_path / "g_model")
    text = c_path.read_text()
    assert "\\" not in text and "??" not in text and "x%2A%5C%0A%3F%3F=%22%2A.tflite" in text
    with pytest.raises(Exception, match="may hold letters"):
        export(src, tmp_path / "g\"model")


# --------------------------------------------------------------------- the attack, end to end
@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    d = tmp_path_factory.mktemp("evil")
    strings = hostile_strings(d / "MARKER")
    (d / "splice.tflite").write_bytes(fc_strings_model([b"input", strings["splice"], b"output", b"b"]))
    (d / "trigraph.tflite").write_bytes(
        fc_strings_model([b"input", strings["trigraph"], b"output", b"b"]))
    names = [strings["splice"], strings["trigraph"], strings["close"], strings["quote"]]
    (d / "everything.tflite").write_bytes(fc_strings_model(names, strings["bytes"], strings["splice"]))
    return d


@pytest.mark.parametrize("model", ["splice", "trigraph", "everything"])
def test_a_model_with_code_in_its_names_validates_without_effect(evil, model):
    out = evil / f"out-{model}"
    before = snapshot(evil)
    o = run_hostile(f"cgen-names-{model}", ["validate", f"{model}.tflite", "--board", "host",
                                            "--random", "3", "--out", str(out)], evil)
    assert o.exit == 0 and "bit-exact" in o.stdout, o.stdout + o.stderr
    assert_bounded(o)
    assert not (evil / "MARKER").exists()
    assert_unchanged(before, snapshot(evil), allowed=(out,))


# ------------------------------------------------------------- malformed flatbuffers: refused
def fc_model_t():
    """fc_strings_model(PLAIN) as a ModelT to edit."""
    return schema().ModelT.InitFromPackedBuf(fc_strings_model(PLAIN), 0)


def pack(m) -> bytes:
    import flatbuffers
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def edited(edit) -> bytes:
    m = fc_model_t()
    edit(m)
    return pack(m)


def patch_u32(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + int(value).to_bytes(4, "little") + data[at + 4:]


def vector_length_at(data: bytes, path) -> int:
    """Where the length of a vector lies in `data`: `path(model)` gives (table, slot)."""
    table, slot = path(schema().Model.GetRootAs(data, 0))
    return table._tab.Vector(table._tab.Offset(slot)) - 4


def shared_offsets(n_tensors: int, name_bytes: int, n_ops: int) -> bytes:
    """A small file whose tensor and op vectors repeat one offset: n_tensors tensors that are
    one tensor with a name_bytes name, n_ops ops that are one RELU."""
    import flatbuffers
    s = schema()
    b = flatbuffers.Builder(1024)
    name = b.CreateString(b"x" * name_bytes)
    shape = b.CreateNumpyVector(np.array([1, 4], np.int32))
    s.TensorStart(b)
    s.TensorAddShape(b, shape)
    s.TensorAddName(b, name)
    t = s.TensorEnd(b)
    io = b.CreateNumpyVector(np.array([0], np.int32))
    s.OperatorStart(b)
    s.OperatorAddInputs(b, io)
    s.OperatorAddOutputs(b, io)
    op = s.OperatorEnd(b)

    def repeat(n, off):
        b.StartVector(4, n, 4)
        for _ in range(n):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()
    tensors, ops = repeat(n_tensors, t), repeat(n_ops, op)
    s.SubGraphStart(b)
    s.SubGraphAddTensors(b, tensors)
    s.SubGraphAddOperators(b, ops)
    s.SubGraphAddInputs(b, io)
    s.SubGraphAddOutputs(b, io)
    subgraphs = repeat(1, s.SubGraphEnd(b))
    s.OperatorCodeStart(b)
    s.OperatorCodeAddBuiltinCode(b, s.BuiltinOperator.RELU)
    s.OperatorCodeAddDeprecatedBuiltinCode(b, s.BuiltinOperator.RELU)
    codes = repeat(1, s.OperatorCodeEnd(b))
    s.BufferStart(b)
    buffers = repeat(1, s.BufferEnd(b))
    s.ModelStart(b)
    s.ModelAddVersion(b, 3)
    s.ModelAddSubgraphs(b, subgraphs)
    s.ModelAddOperatorCodes(b, codes)
    s.ModelAddBuffers(b, buffers)
    b.Finish(s.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def relu_chain(ops) -> bytes:
    """float32 RELUs on tensors x (graph input), a, b; `ops`: (inputs, outputs) per op, the
    last op's output the graph's (a self-loop: an op reading its own output; a cycle: op 0
    reads what op 1 writes and op 1 what op 0 writes)."""
    s = schema()
    ts = [tensor(n, [1, 4], s.TensorType.FLOAT32, 0) for n in ("x", "a", "b")]
    return build_tflite(ts, [None], [("RELU", i, o, None) for i, o in ops], [0], ops[-1][1])


def long_chain(n_ops: int) -> bytes:
    """x -> RELU -> RELU ... (n_ops of them): a well-formed model past the op limit."""
    s = schema()
    ts = [tensor(f"t{k}", [1, 4], s.TensorType.FLOAT32, 0) for k in range(n_ops + 1)]
    return build_tflite(ts, [None], [("RELU", [k], [k + 1], None) for k in range(n_ops)],
                        [0], [n_ops])


def _set(obj, **fields):
    for k, v in fields.items():
        setattr(obj, k, v)


def _tensor_vector(data):
    return vector_length_at(data, lambda m: (m.Subgraphs(0), 4))


def _op_inputs_vector(data):
    return vector_length_at(data, lambda m: (m.Subgraphs(0).Operators(0), 6))


PLAIN_DATA = fc_strings_model(PLAIN)
MALFORMED = {
    "tflite-empty": (lambda: b"", "not a TFLite model"),
    "tflite-not-flatbuffer": (lambda: b"\x7fELF" + bytes(range(256)) * 4, "not a TFLite model"),
    "tflite-truncated": (lambda: INT8.read_bytes()[:len(INT8.read_bytes()) // 3], "malformed"),
    "tflite-root-out-of-range": (lambda: patch_u32(PLAIN_DATA, 0, 0xFFFFFF00), "malformed"),
    "tflite-tensors-past-limit": (lambda: patch_u32(PLAIN_DATA, _tensor_vector(PLAIN_DATA),
                                                    0x7FFFFFFF), "at most 100,000"),
    "tflite-vector-past-file": (lambda: patch_u32(PLAIN_DATA, _op_inputs_vector(PLAIN_DATA),
                                                  0x00FFFFFF), "malformed"),
    "tflite-2g-elements": (lambda: edited(lambda m: _set(m.subgraphs[0].tensors[2],
                                                         shape=[65536, 32768])), "elements"),
    "tflite-negative-dim": (lambda: edited(lambda m: _set(m.subgraphs[0].tensors[0], shape=[-1, 4])),
                            "negative dimension"),
    "tflite-rank-40": (lambda: edited(lambda m: _set(m.subgraphs[0].tensors[0], shape=[1] * 40)),
                       "40 dimensions"),
    "tflite-short-buffer": (lambda: edited(lambda m: _set(m.buffers[2], data=np.zeros(3, np.uint8))),
                            "needs 8 bytes"),
    "tflite-buffer-index": (lambda: edited(lambda m: _set(m.subgraphs[0].tensors[1], buffer=1000)),
                            "refers to buffer 1000"),
    "tflite-buffer-outside": (lambda: edited(lambda m: _set(m.buffers[2], data=None, offset=1 << 40,
                                                            size=8)), "lies outside the file"),
    "tflite-opcode-index": (lambda: edited(lambda m: _set(m.subgraphs[0].operators[0], opcodeIndex=7)),
                            "uses opcode 7"),
    "tflite-op-tensor-index": (lambda: edited(lambda m: _set(m.subgraphs[0].operators[0],
                                                             inputs=[0, 1, 99])), "tensor 99"),
    "tflite-graph-input-index": (lambda: edited(lambda m: _set(m.subgraphs[0], inputs=[42])),
                                 "graph input list refers to tensor 42"),
    "tflite-self-loop": (lambda: relu_chain([([1], [1])]), "before anything writes it"),
    "tflite-cycle": (lambda: relu_chain([([2], [1]), ([1], [2])]), "before anything writes it"),
    "tflite-shared-offsets": (lambda: shared_offsets(90_000, 200_000, 1), "malformed"),
    "tflite-ops-past-limit": (lambda: shared_offsets(1, 1, 100_000), "at most 5,000"),
    "tflite-custom-op-name": (lambda: edited(lambda m: _set(
        m.operatorCodes[0], builtinCode=32, deprecatedBuiltinCode=32,
        customCode=b"x*/\n\\\n??/\x00\xff")), "CUSTOM:x%2A/%0A%5C%0A%3F%3F/%00%FF"),
    "tflite-5001-op-chain": (lambda: long_chain(5001), "the model has 5001 ops; at most 5,000"),
}


@pytest.fixture(scope="module")
def malformed(tmp_path_factory):
    d = tmp_path_factory.mktemp("malformed")
    for case, (make, _) in MALFORMED.items():
        (d / f"{case}.tflite").write_bytes(make())
    return d


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_flatbuffer_is_one_line(malformed, case):
    before = snapshot(malformed)
    o = run_hostile(case, ["validate", f"{case}.tflite", "--board", "host", "--random", "2",
                           "--out", f"out-{case}"], malformed)
    assert_refused(o, MALFORMED[case][1])
    assert_unchanged(before, snapshot(malformed), allowed=(malformed / f"out-{case}",))


def test_random_byte_flips_never_traceback(tmp_path):
    """300 copies of the example model with 1 to 8 random bytes changed (seeded): each is read
    and, when the reader takes it, generated; anything refused is a QuarlError."""
    import signal
    from quarl_edge.converters.tflite_model import parse
    from quarl_edge.core.errors import QuarlError
    rng = np.random.default_rng(36)
    data = np.frombuffer(INT8.read_bytes(), np.uint8)
    outcomes = {"read": 0, "refused": 0}

    def too_slow(*_):
        raise TimeoutError("a mutant took too long")
    old = signal.signal(signal.SIGALRM, too_slow)
    try:
        for k in range(300):
            bad = data.copy()
            at = rng.integers(0, len(bad), rng.integers(1, 9))
            bad[at] = rng.integers(0, 256, len(at))
            path = tmp_path / "m.tflite"
            path.write_bytes(bad.tobytes())
            signal.alarm(20)
            try:
                parse(bad.tobytes(), "m.tflite")
                cgen.generate(path, tmp_path / "gen")
                outcomes["read"] += 1
            except QuarlError as e:
                assert "\n" not in str(e).split(". Supported")[0] or "ops cannot run" in str(e)
                outcomes["refused"] += 1
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert outcomes["refused"] > 0 and outcomes["read"] > 0, outcomes
