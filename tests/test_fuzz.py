"""The firmware's frame parser and command dispatch under libFuzzer with ASan and UBSan: a
short run in the default suite (`make fuzz` is the long one, tests/fuzz/fuzz.py)."""
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
import fuzz  # noqa: E402

pytestmark = pytest.mark.skipif(not any(shutil.which(c) for c in fuzz.CLANG),
                                reason="clang is not installed (scripts/setup.sh installs clang-19)")


@pytest.mark.parametrize("variant", sorted(fuzz.VARIANTS))
def test_a_short_fuzz_run_finds_nothing_and_reaches_every_command(tmp_path, variant):
    exe = fuzz.build(tmp_path, max_payload=fuzz.VARIANTS[variant])
    corpus = fuzz.seed_corpus(tmp_path / "corpus", 16)
    proc = fuzz.run(exe, corpus, runs=30_000, artifacts=tmp_path, counts=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ERROR: AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr
    assert not list(tmp_path.glob("crash-*"))
    m = re.search(r"fuzz replies: HELLO (\d+) INFER (\d+) BENCH (\d+) MEM (\d+) ECHO (\d+) "
                  r"IN_CHUNK (\d+) OUT_CHUNK (\d+) RESET (\d+) INFER_Z (\d+) ERROR (\d+)",
                  proc.stderr)
    assert m, proc.stderr[-2000:]
    counts = dict(zip(("HELLO", "INFER", "BENCH", "MEM", "ECHO", "IN_CHUNK", "OUT_CHUNK",
                       "RESET", "INFER_Z", "ERROR"), map(int, m.groups())))
    if variant == "frame":       # tensors fit one frame: no chunk is ever taken
        counts.pop("IN_CHUNK")
        counts.pop("OUT_CHUNK")
    # the mutations get past the CRC into every command, and into the error paths
    assert all(counts[k] > 0 for k in counts), counts


def test_the_fuzzer_finds_a_planted_out_of_bounds_read(tmp_path):
    """The same build with a deliberate bug (a read past the receive buffer when an ECHO says
    'boom'): the fuzzer, seeded with an ECHO, must report it. A fuzz test that cannot fail
    would prove nothing."""
    exe = fuzz.build(tmp_path, extra=["-DQE_FUZZ_PLANTED_BUG=1"])
    corpus = fuzz.seed_corpus(tmp_path / "corpus", 16)
    (corpus / "boom").write_bytes(fuzz.frame("ECHO", b"boom"))
    proc = fuzz.run(exe, corpus, runs=30_000, artifacts=tmp_path)
    assert proc.returncode != 0 and "AddressSanitizer" in proc.stderr, proc.stderr[-2000:]


def test_the_slow_units_bench_is_refused_by_the_fuzz_build(tmp_path):
    """tests/fuzz/slow/ holds the two inputs libFuzzer flagged as slow (2.5 and 3.7 s each): a
    mutated BENCH frame inside an IN_CHUNK's payload kept a valid CRC and asked for 8,448 runs.
    The fuzz build refuses BENCH n > QE_BENCH_MAX_N (4): each input now answers that BENCH with
    an ERROR frame and runs no BENCH at all."""
    exe = fuzz.build(tmp_path)
    for unit in sorted((Path(__file__).parent / "fuzz" / "slow").iterdir()):
        proc = fuzz.run(exe, unit, runs=1, counts=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        m = re.search(r"fuzz replies: .*BENCH (\d+) .*ERROR (\d+)", proc.stderr)
        assert m and int(m.group(1)) == 0 and int(m.group(2)) >= 1, (unit.name, proc.stderr[-800:])
