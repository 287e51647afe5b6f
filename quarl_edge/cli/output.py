"""How the CLI reports: its exit codes, aligned tables and results on stdout, notes on stderr,
sizes and costs with their units, and --json."""
from __future__ import annotations

import dataclasses
import json
import re
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

EXIT_OK, EXIT_MISMATCH, EXIT_USER_ERROR, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_TERMINATED = 143        # 128 + SIGTERM, as a shell reports a process SIGTERM ended


# What must not reach a terminal raw from a board's or a model's text: C0 controls (ESC starts
# the sequences that clear the screen, set the title or move the cursor; CR and BS overwrite
# what was printed), DEL, C1 controls (CSI 0x9b), the bidi overrides and isolates that reorder
# what follows, and line and paragraph separators.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                          "\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text) -> str:
    """`text` with every control character escaped as Python writes it (\\x1b, \\r, \\u202e):
    what a board, a model or any input file says is printed as one line that cannot clear the
    screen, move the cursor or reorder what follows."""
    return _UNPRINTABLE.sub(_escape, str(text))


def _console():
    """A rich console on stdout; when not a terminal (a pipe, a file, a test) wide enough that
    no table row wraps, and without colour."""
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if tty else 240, no_color=not tty,
                   highlight=False, soft_wrap=not tty)


def table(columns: list[str], rows: list[list], right: tuple[str, ...] = ()) -> None:
    """An aligned table on stdout: one header row, no frame (easy to read and to grep)."""
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", no_wrap=True)
    for r in rows:
        t.add_row(*(Text("-" if v is None else printable(v)) for v in r))   # (no markup)
    _console().print(t)


def note(text: str) -> None:
    """A line for the user on stderr (where files went, what was skipped)."""
    print("\n".join(map(printable, str(text).split("\n"))), file=sys.stderr, flush=True)


def kib(n) -> str:
    """Bytes as KiB (to one decimal below 10 KiB), or B for small counts."""
    if n is None:
        return "-"
    if n < 1024:
        return f"{n:,} B"
    return f"{n / 1024:,.1f} KiB" if n < 10 * 1024 else f"{n / 1024:,.0f} KiB"


def mhz(hz) -> str:
    """A clock in MHz ("180 MHz", "16 MHz", "1.5 MHz"), "-" when unknown."""
    if not hz:
        return "-"
    return f"{hz / 1e6:,.0f} MHz" if hz % 1_000_000 == 0 else f"{hz / 1e6:,.3g} MHz"


def cost(value, unit: str) -> str:
    """A cost in its board's unit ("6,688 instructions"), "-" when unmeasured."""
    return "-" if value is None else f"{value:,.0f} {unit}"


def share(used, total) -> str:
    """'12,128 B (0.6 % of 2,048 KiB)'; without a known total (0 or None) just the bytes."""
    if used is None:
        return "-"
    return f"{used:,} B" + (f" ({100 * used / total:.1f} % of {kib(total)})" if total else "")


def emit_json(data) -> None:
    """--json: the data on stdout, nothing else."""
    print(json.dumps(data, indent=2, default=str))


def as_json(result):
    """An API result (a dataclass, or a list of them) as plain JSON data."""
    if isinstance(result, list):
        return [as_json(r) for r in result]
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result
