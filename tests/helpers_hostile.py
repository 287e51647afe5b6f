"""Running quarl-edge on a hostile input the way issue 36 asks: a subprocess bounded in time and
memory, whose peak memory (its own VmHWM, read while it runs) and wall time are measured, whose
writes are checked against the folders it may write, and whose stderr must be one line.

Every hostile test goes through `run_hostile`; with QE_HOSTILE_TABLE=FILE each call appends a
JSON row (case, exit, peak MB, seconds) to FILE, and `python tests/helpers_hostile.py FILE`
prints the table the closing note of issue 36 asks for.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

LIMIT_SECONDS = 60
# The resident peak allowed: the machine's bound, not a tight fit. A benign `quantize` (TensorFlow
# loaded) peaks near 560 MB with TF 2.15 on Python 3.11 and near 710 MB with TF 2.21 on 3.13, so
# 700 MB was TensorFlow's own footprint; the bombs this guards against reached many GB.
LIMIT_MB = 1024
# The address-space cap keeps a memory bomb from taking the machine down while a test runs
# (TensorFlow maps a few GB of address space it never touches, so the cap is far above the
# LIMIT_MB asserted on the resident peak).
ADDRESS_SPACE = 12 << 30


@dataclass
class Outcome:
    case: str
    exit: int
    peak_mb: float
    seconds: float
    stdout: str
    stderr: str

    @property
    def line(self) -> str:
        return self.stderr.strip().splitlines()[-1] if self.stderr.strip() else ""


def _hwm_kb(pid: int) -> int:
    """The process's peak resident size so far (VmHWM, kB), 0 once it has exited. Not wait4's
    ru_maxrss: Linux carries the high-water mark of the memory a process leaves at exec into it,
    and a child forked from a pytest worker leaves a copy of the worker's (a GB and more late in
    a run), so ru_maxrss measured the test runner, not quarl-edge."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _limits():                                     # in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    os.setsid()


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under `roots` with what identifies its content (symlinks not followed)."""
    seen: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                seen[p] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    return seen


def run_hostile(case: str, args: list[str], cwd: Path, *, env: dict | None = None,
                timeout: float = LIMIT_SECONDS, stdin: str | None = None) -> Outcome:
    """`python -m quarl_edge.cli ARGS` in `cwd`; kills the process group at `timeout`."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+", errors="replace") as out_f, \
            tempfile.TemporaryFile("w+", errors="replace") as err_f:
        p = subprocess.Popen([sys.executable, "-m", "quarl_edge.cli", *args], cwd=cwd,
                             stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                             stdout=out_f, stderr=err_f, text=True,
                             env={**os.environ, **(env or {})}, preexec_fn=_limits)
        if stdin is not None:
            p.stdin.write(stdin)
            p.stdin.close()
        killed, peak_kb = False, 0
        while True:
            peak_kb = max(peak_kb, _hwm_kb(p.pid))
            pid, status, _ = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout and not killed:
                os.killpg(p.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.01)
        p.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    if killed:
        err += f"\n[killed after {timeout} s]"
    seconds = time.monotonic() - t0
    peak_mb = peak_kb / 1024
    o = Outcome(case, p.returncode, round(peak_mb, 1), round(seconds, 2), out, err)
    table = os.environ.get("QE_HOSTILE_TABLE")
    if table:
        row = {k: v for k, v in asdict(o).items() if k not in ("stdout", "stderr")}
        row["line"] = o.line[:160]
        with open(table, "a") as f:
            f.write(json.dumps(row) + "\n")
    return o


def assert_refused(o: Outcome, words: str | None = None, *, limit_mb: float = LIMIT_MB,
                   limit_s: float = LIMIT_SECONDS) -> None:
    """Exit 2, one line `quarl-edge: error: ...` (containing `words`), within the bounds."""
    lines = o.stderr.strip().splitlines()
    assert o.exit == 2, f"{o.case}: exit {o.exit}\n{o.stderr[-3000:]}"
    assert len(lines) == 1 and lines[0].startswith("quarl-edge: error:"), o.stderr[-3000:]
    if words:
        assert words in lines[0], lines[0]
    assert_bounded(o, limit_mb=limit_mb, limit_s=limit_s)


def assert_bounded(o: Outcome, *, limit_mb: float = LIMIT_MB,
                   limit_s: float = LIMIT_SECONDS) -> None:
    assert o.seconds <= limit_s, f"{o.case}: {o.seconds} s"
    assert o.peak_mb <= limit_mb, f"{o.case}: peak {o.peak_mb} MB"


def assert_unchanged(before: dict, after: dict, allowed: tuple[Path, ...] = ()) -> None:
    """Nothing changed in the snapshot but under `allowed` folders."""
    allowed_s = tuple(str(a) for a in allowed)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    outside = sorted(p for p in changed if not p.startswith(allowed_s))
    assert not outside, f"written outside the output: {outside[:10]}"


def print_table(path: str) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    print("| case | exit | peak MB | seconds | first line |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['case']} | {r['exit']} | {r['peak_mb']:.0f} | {r['seconds']:.1f} | "
              f"{r['line'].replace('|', '/')} |")


if __name__ == "__main__":
    print_table(sys.argv[1])
