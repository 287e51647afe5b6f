"""The commands README.md and docs/*.md show, and the checks of each against what it names
(issue 25: docs that cannot rot); tests/test_docs_commands.py and tests/test_docs_runs.py use them.

Every shell command in a code block or an inline code span (quarl-edge, make, python, pytest,
scripts by path) is a Command; CHECKS holds the check of each kind: quarl-edge's own argument
parser (command, options, choices, types, board ids, repository paths; a whole command must
parse), the Makefile's targets and variables, a script's or module's --help, pyproject's markers.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import quarl_edge as qe
from quarl_edge.cli import parser as cli_parser      # the parser `quarl-edge` runs (cli.main)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~)")


# Every shell command in README.md and docs/*.md, in a fenced block (sh, bash, console or
# untagged) or an inline code span: `quarl-edge ...` (also .venv/bin/quarl-edge), `make ...`,
# `python ...` (a script or -m module), `pytest ...`, and scripts named by their path
# (benchmarks/, scripts/, tests/). A span that is only a program's name is not a command.
PROGRAMS = {"quarl-edge": "quarl-edge", ".venv/bin/quarl-edge": "quarl-edge", "make": "make",
            "python": "python", "python3": "python", ".venv/bin/python": "python",
            "pytest": "pytest"}
SCRIPT = re.compile(r"^(benchmarks|scripts|tests)/[\w/.-]+\.(py|sh)$")
ASSIGN = re.compile(r"^[A-Z_][A-Z0-9_]*=")
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
# Synopsis notation and placeholders: [optional], a|b, ..., RUN, N, MODEL.tflite, HEAD:6379,
# KEY=VALUE, ALGO/ENV.
META = re.compile(r"[\[\]|]|\.\.")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?:[./:=][\w./:-]*)?")


@dataclass(frozen=True)
class Command:
    where: str                  # page:line
    argv: tuple[str, ...]       # the words as a shell splits them, comment dropped
    fenced: bool                # in a code block (a whole command) or inline (maybe a fragment)

    @property
    def start(self) -> int:     # the program's index, after VAR=value assignments
        return next(i for i, t in enumerate(self.argv) if not ASSIGN.match(t))

    @property
    def kind(self) -> str:
        prog = self.argv[self.start]
        return PROGRAMS.get(prog) or "script"

    @property
    def args(self) -> list[str]:
        return list(self.argv[self.start + 1:])

    @property
    def text(self) -> str:
        return " ".join(self.argv)

    @property
    def concrete(self) -> bool:
        """A whole command: no synopsis notation or placeholder, and more than a command's
        name (`quarl-edge import` in prose names the command)."""
        if not self.fenced and self.kind == "quarl-edge" and len(self.args) <= 1:
            return False
        return not any(META.search(t) or PLACEHOLDER.fullmatch(t) for t in self.args)


def _command(text: str, where: str, fenced: bool) -> Command | None:
    try:
        argv = shlex.split(text, comments=True)
    except ValueError:                         # an unbalanced quote: keep the words
        argv = text.split()
    i = next((i for i, t in enumerate(argv) if not ASSIGN.match(t)), None)
    if i is None or not (argv[i] in PROGRAMS or SCRIPT.match(argv[i])):
        return None
    if argv[i] in PROGRAMS and len(argv) == i + 1:
        return None                            # the program's name in prose
    return Command(where, tuple(argv), fenced)


def documented_commands(pages=PAGES) -> list[Command]:
    out = []
    for page in pages:
        name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
        prose, fenced, lang = [], False, ""
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if FENCE.match(line.lstrip()):
                fenced = not fenced
                lang = line.lstrip()[3:].strip() if fenced else ""
                prose.append("")
            elif fenced:
                prose.append("")
                if lang in SHELL_FENCES and (c := _command(line, f"{name}:{n}", True)):
                    out.append(c)
            else:
                prose.append(line)
        text = "\n".join(prose)
        for m in re.finditer(r"`([^`]+)`", text):       # a span may wrap onto the next line
            if "\n\n" not in m.group(1):
                span = m.group(1).replace("\\|", "|").replace("\n", " ")
                where = f"{name}:{text.count(chr(10), 0, m.start()) + 1}"
                if c := _command(span, where, False):
                    out.append(c)
    return out


COMMANDS = documented_commands()


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction))


def parse_error(args: list[str]) -> str | None:
    """What `quarl-edge`'s own parser (cli.main's) says of these arguments; None if it takes
    them."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli_parser().parse_args(args)
    except SystemExit as e:
        if e.code not in (0, None):
            return err.getvalue().strip() or f"exit {e.code}"
    return None


@functools.cache
def board_ids() -> frozenset[str]:
    return frozenset(b.id for b in qe.boards())


def _value_problems(command: str, action: argparse.Action, value: str) -> list[str]:
    if META.search(value) or PLACEHOLDER.fullmatch(value):
        return []
    opt = "/".join(action.option_strings) or action.dest
    if action.choices is not None and value not in action.choices:
        return [f"{command} {opt}: {value!r} is not one of {', '.join(map(str, action.choices))}"]
    if callable(action.type) and action.type is not str:
        try:
            action.type(value)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
            return [f"{command} {opt}: {value!r}: {e}"]
    boards = board_ids()
    if action.dest == "board" and value not in boards:
        return [f"{command} --board: no board {value!r}"]
    if action.dest == "boards":
        return [f"{command} --boards: no board {b!r}" for b in value.split(",")
                if b not in boards | {"all-emulated"}]
    return []


def cli_problems(c: Command) -> list[str]:
    """The command against the real parser: the command exists, every option exists for it,
    every concrete value is one of its choices and of its type, every --board names a board,
    every repository path it reads exists; a whole command (in a code block, or inline without
    placeholders) parses as it stands."""
    p = cli_parser()
    subs = _subparsers(p)
    words = [t.strip("[]") for t in c.args]
    words = [t for t in words if t and t not in ("|", "...", "..")]
    problems, current, name, i = [], p, "quarl-edge", 0
    while i < len(words):
        w = words[i]
        i += 1
        if w == "--":
            break
        if w.startswith("-") and not re.match(r"^-\d", w):
            opt, eq, value = w.partition("=")
            action = current._option_string_actions.get(opt)
            if action is None:
                problems.append(f"{name}: no option {opt}")
                continue
            values = [value] if eq else []
            if not eq and action.nargs != 0:
                want = 1 if action.nargs is None else action.nargs
                while i < len(words) and not (words[i].startswith("-") and not
                                              re.match(r"^-\d", words[i])):
                    if isinstance(want, int) and len(values) == want:
                        break
                    values.append(words[i])
                    i += 1
            for v in values:
                problems += _value_problems(name, action, v)
        elif current is p:
            if w not in subs:
                problems.append(f"no command {w!r} (commands: {', '.join(subs)})")
                return problems
            current, name = subs[w], f"quarl-edge {w}"
        elif w.split("/")[0] in REPO_DIRS and not (ROOT / w).exists():
            problems.append(f"{name}: {w} does not exist")
    if (c.fenced or c.concrete) and (err := parse_error(c.args)):
        problems.append(err)
    return problems


REPO_DIRS = {"benchmarks", "boards", "docs", "examples", "firmware", "results", "scripts",
             "studies", "tests"}
MAKEFILE = (ROOT / "Makefile").read_text()
MAKE_TARGETS = {t for m in re.finditer(r"^([\w.-]+(?:[ \t]+[\w.-]+)*)[ \t]*:(?!=)", MAKEFILE, re.M)
                for t in m.group(1).split()}


def make_problems(c: Command) -> list[str]:
    """Every target is a rule of the Makefile and every VAR=value a variable it uses (make
    takes an unknown one silently)."""
    problems = []
    for w in (t.strip("[]") for t in c.argv[c.start + 1:]):
        if w in ("", "|", "...", ".."):
            continue
        if ASSIGN.match(w):
            var = w.split("=")[0]
            if not re.search(rf"\$\({var}\)|^{var}\s*[?:+]?=|^export\b.*\b{var}\b", MAKEFILE, re.M):
                problems.append(f"make: the Makefile has no variable {var}")
        elif w not in MAKE_TARGETS:
            problems.append(f"make: no target {w!r}")
    return problems


@functools.cache
def script_help(argv: tuple[str, ...]) -> str:
    """What `python SCRIPT --help` prints (a script without argparse prints its usage line,
    maybe with exit 1)."""
    out = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    return out.stdout + out.stderr


def script_problems(c: Command) -> list[str]:
    """A script or module exists, and every --option shown is in its own --help."""
    args = [t.strip("[]") for t in (c.args if c.kind == "python" else c.argv[c.start:])]
    if ">" in args:                         # the redirection's file is an output
        args = args[:args.index(">")]
    if args[:1] == ["-m"]:
        if importlib.util.find_spec(args[1]) is None:
            return [f"python -m {args[1]}: no such module"]
        program, rest = ("-m", args[1]), args[2:]
    else:
        if not (ROOT / args[0]).is_file():
            return [f"{args[0]} does not exist"]
        program, rest = (args[0],), args[1:]
    flags = [w.split("=")[0] for w in rest if w.startswith("--") and w not in ("--", "--help")]
    if not flags or program[0].endswith(".sh"):
        return []
    text = script_help(program)
    return [f"{' '.join(program)}: no option {f} in its --help" for f in flags
            if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]


def pytest_problems(c: Command) -> list[str]:
    """Every marker of -m is declared in pyproject.toml and every path exists."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {m.split(":")[0].strip() for m in config["markers"]}
    problems, args = [], c.args
    for i, w in enumerate(args):
        if i and args[i - 1] == "-m":
            problems += [f"pytest: no marker {m!r}" for m in re.findall(r"[\w-]+", w)
                         if m not in ("and", "or", "not") and m not in declared]
        elif "/" in w and not (ROOT / w).exists():
            problems.append(f"pytest: {w} does not exist")
    return problems


CHECKS = {"quarl-edge": cli_problems, "make": make_problems, "python": script_problems,
          "script": script_problems, "pytest": pytest_problems}
