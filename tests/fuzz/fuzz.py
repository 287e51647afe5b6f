"""The firmware's libFuzzer target: build it, seed it with valid frames, run it.

    .venv/bin/python tests/fuzz/fuzz.py [--runs N | --seconds S] [--out DIR]      (make fuzz)

tests/fuzz/fuzz_harness.c is the port: each fuzz input is the byte stream a board receives. The
firmware is the host board's (firmware/core: protocol.c, harness.c, the kernels) with the
shipped CartPole int8 policy generated into it, compiled by clang with libFuzzer, AddressSanitizer
and UndefinedBehaviorSanitizer (every report is fatal). The seed corpus is one valid request of
each command (HELLO, INFER, BENCH, MEM, ECHO, IN_CHUNK, OUT_CHUNK, RESET, INFER_Z) and a few sequences of them, from the Python
encoder (quarl_edge.link.protocol), so mutations start inside the protocol, not from noise.
A finding leaves its input as OUT/crash-* and makes this exit non-zero.

clang-19 and libclang-rt-19-dev (the libFuzzer runtime) come from scripts/setup.sh."""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CLANG = ("clang-19", "clang")
SAN = ["-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all", "-g", "-O1"]
# The kernels and the generated model are built with the sanitizers but without libFuzzer's
# coverage and comparison tracing: what is fuzzed is the frame parser and the dispatch, and a
# traced FULLY_CONNECTED loop was 55 % of the time per input (perf), for nothing the mutator
# can use (its loop bounds are the model's, not the input's).
SAN_NO_COVERAGE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g", "-O1"]
NOT_FUZZED = ("requant.c", "qe_model_state.c")     # with the kernels and model.c


def clang() -> str:
    for name in CLANG:
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("fuzz: clang is not installed; as root: apt-get install -y "
                     "--no-install-recommends clang-19 libclang-rt-19-dev (scripts/setup.sh)")


# The two firmwares fuzzed: the host board's frames (4096 B: the policy's tensors fit one
# frame, so INFER carries them) and frames of 12 B, where its 16 B of inputs stream in IN_CHUNKs
# (protocol v3) and its 8 B of outputs still fit a reply.
VARIANTS = {"frame": None, "stream": 12}
# BENCH n above this is refused by the fuzzed firmware (the board's is 65535): BENCH 4 reaches
# every line BENCH 65535 does, in microseconds instead of seconds under ASan (tests/fuzz/slow/).
BENCH_MAX_N = 4
INTERRUPTED = 72      # libFuzzer's exit code after Ctrl-C / SIGINT (it still prints its stats)


def build(out: Path, extra: list[str] | None = None, max_payload: int | None = None) -> Path:
    """The fuzzer binary OUT/fuzz_harness (rebuilt every time: it is a few seconds); `extra`:
    more compiler flags (the test's -DQE_FUZZ_PLANTED_BUG=1); `max_payload`: the frame size
    instead of the host board's."""
    sys.path.insert(0, str(ROOT))
    from quarl_edge.converters.cgen import generate
    from quarl_edge.core.resources import examples_dir, firmware_dir
    from quarl_edge.targets.boards import get_board
    from quarl_edge.targets.build import board_defines

    out.mkdir(parents=True, exist_ok=True)
    model = examples_dir() / "cartpole_dqn" / "models" / "int8.tflite"
    gen = generate(model, out / "gen", name="fuzz")
    fw = firmware_dir()
    core = [f for f in sorted((fw / "core").glob("*.c")) if f.name != "main.c"]
    kernels = sorted((fw / "core" / "kernels").glob("*.c"))
    input_bytes = sum(t.nbytes for t in gen.inputs)
    exe = out / "fuzz_harness"
    defines = board_defines(get_board("host"))
    if max_payload is not None:
        defines = [d for d in defines if not d.startswith("-DQE_MAX_PAYLOAD=")] + \
            [f"-DQE_MAX_PAYLOAD={max_payload}u"]
    flags = ["-std=c99", f"-I{fw / 'core'}", *defines, f"-DQE_INPUT_COPY_BYTES={input_bytes}u",
             f"-DQE_BENCH_MAX_N={BENCH_MAX_N}u", *(extra or [])]
    plain = [f for f in core if f.name in NOT_FUZZED] + kernels + [out / "gen" / "model.c"]
    fuzzed = [f for f in core if f.name not in NOT_FUZZED] + [HERE / "fuzz_harness.c"]
    objects = []
    for src in plain:
        obj = out / "obj" / f"{src.parent.name}-{src.stem}.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        _compile([clang(), *flags, *SAN_NO_COVERAGE, "-c", str(src), "-o", str(obj)])
        objects.append(obj)
    _compile([clang(), *flags, *SAN, *map(str, fuzzed), *map(str, objects), "-o", str(exe), "-lm"])
    return exe


def _compile(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fuzz: the build failed:\n{' '.join(cmd)}\n{proc.stderr[-3000:]}")


def frame(command: str, payload: bytes, seq: int = 1) -> bytes:
    """One request as the host encodes it (quarl_edge.link.protocol)."""
    sys.path.insert(0, str(ROOT))
    from quarl_edge.link import protocol as p
    return p.encode_frame(p.COMMANDS[command], payload, seq=seq)


def seed_corpus(directory: Path, input_bytes: int) -> Path:
    """One valid request of each command and two sessions, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    x = struct.pack(f"<{input_bytes // 4}f", *([0.1] * (input_bytes // 4)))
    frames = {"hello": frame("HELLO", struct.pack("<I", 7), 1),
              "infer": frame("INFER", x, 2), "bench": frame("BENCH", struct.pack("<H", 3), 3),
              "mem": frame("MEM", b"", 4), "echo": frame("ECHO", b"quarl", 5),
              # streamed tensors (protocol v3): a chunk of the inputs, a piece of the outputs
              "in_chunk": frame("IN_CHUNK", struct.pack("<I", 0) + x[:8], 6),
              "in_chunk2": frame("IN_CHUNK", struct.pack("<I", 8) + x[8:16], 7),
              "infer_streamed": frame("INFER", b"", 8),
              "out_chunk": frame("OUT_CHUNK", struct.pack("<IH", 0, 4), 9),
              # protocol v4: RESET zeroes a recurrent model's state (this model has none)
              "reset": frame("RESET", b"", 10),
              # protocol v5: INFER with zero-run coded inputs (a sparse input: 0x00, run length)
              "infer_z": frame("INFER_Z", bytes([0, 4]) + x[4:8] + bytes([0, input_bytes - 8]),
                               11)}
    for name, data in frames.items():
        (directory / name).write_bytes(data)
    (directory / "session").write_bytes(b"".join(frames[k] for k in
                                                 ("hello", "reset", "infer", "infer", "bench",
                                                  "infer_z", "mem")))
    (directory / "stream").write_bytes(b"".join(frames[k] for k in (
        "hello", "in_chunk", "in_chunk", "in_chunk2", "infer_streamed", "out_chunk")))
    (directory / "retry").write_bytes(frames["hello"] + frames["infer"] * 2 + b"\x00\xa5" +
                                      frames["bench"])
    return directory


def run(exe: Path, corpus: Path, runs: int | None = None, seconds: int | None = None,
        artifacts: Path | None = None, counts: bool = False) -> subprocess.CompletedProcess:
    args = [str(exe), "-max_len=4200", "-print_final_stats=1"]
    args.append(f"-runs={runs}" if runs is not None else f"-max_total_time={seconds}")
    if artifacts is not None:
        args.append(f"-artifact_prefix={artifacts}/")
    env = {**os.environ, **({"QE_FUZZ_COUNTS": "1"} if counts else {})}
    return subprocess.run([*args, str(corpus)], capture_output=True, text=True, env=env)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--runs", type=int, default=None, help="executions (default: 10,000,000)")
    g.add_argument("--seconds", type=int, default=None, help="run this long instead")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz")
    ap.add_argument("--variant", choices=sorted(VARIANTS), action="append",
                    help="fuzz only this firmware (repeatable; default: all, the runs or the "
                         "time split evenly between them)")
    a = ap.parse_args(argv)
    runs = a.runs if a.runs is not None or a.seconds is not None else 10_000_000
    variants = {k: v for k, v in VARIANTS.items() if not a.variant or k in a.variant}
    total = 0
    for name, max_payload in variants.items():      # an even share of the runs (or the time)
        out = a.out / name
        exe = build(out, max_payload=max_payload)
        corpus = seed_corpus(out / "corpus", 16)    # kept between runs; the seeds re-added
        proc = run(exe, corpus, runs=None if runs is None else runs // len(variants),
                   seconds=None if a.seconds is None else a.seconds // len(variants),
                   artifacts=out, counts=True)
        stats = [ln for ln in proc.stderr.splitlines()
                 if ln.startswith(("stat::", "fuzz replies", "Done"))]
        print(f"== {name} (max_payload {max_payload or 'of the host board'})")
        print("\n".join(stats))
        done = [ln for ln in stats if ln.startswith("stat::number_of_executed_units")]
        total += int(done[0].split()[-1]) if done else 0
        if proc.returncode == INTERRUPTED:
            print(f"fuzz: interrupted after {total:,} inputs, no finding", file=sys.stderr)
            return proc.returncode
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            print(f"fuzz: a finding (exit {proc.returncode}); its input is in {out}/crash-*",
                  file=sys.stderr)
            return proc.returncode
    print(f"fuzz: {total:,} inputs, no finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
