"""README.md is the front door and docs/*.md hold the details (issue 25: docs that cannot rot).

- Every relative Markdown link between them points to an existing file and, for a #anchor, to a
  heading of that file (GitHub's anchor rules). The README stays short and keeps CI's test
  command literal.
- The site (`make docs`: mkdocs.yml, README.md as its home page) builds with --strict and
  prints no warning.
- Every shell command they show (code blocks and inline code: quarl-edge, make, python,
  pytest, scripts by path) is checked against what it names: quarl-edge's own argument parser
  (command, options, choices, types, board ids, repository paths; a whole command must parse),
  the Makefile's targets and variables, a script's or module's --help, pyproject's markers. The
  cheap ones run for real (RUNS); every other one says why not (PARSE_ONLY).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

import quarl_edge as qe
from quarl_edge.cli import parser as cli_parser      # the parser `quarl-edge` runs (cli.main)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    bad = []
    for line in _prose(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                bad.append(f"{target}: no file {dest}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    fences = [l for l in page.read_text().splitlines() if FENCE.match(l.lstrip())]
    assert len(fences) % 2 == 0, "an unclosed code fence hides the rest of the page"
    assert broken_links(page) == []


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A page\n\n## Some section (v2)\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md) [ok](a.md#some-section-v2) [ok](#here) [web](https://x.org/y)\n"
                    "# Here\n[gone](missing.md) [bad](a.md#nowhere)\n"
                    "```\n[in code](missing2.md)\n```\n")
    bad = broken_links(page)
    assert len(bad) == 2 and "missing.md" in bad[0] and "#nowhere" in bad[1], bad


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make test" in text            # .ci/run runs the README's test command
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", text))
    assert {p.name for p in PAGES[1:]} <= linked, "a docs page the README does not link"


# ------------------------------------------------------------------ the site (mkdocs, `make docs`)
def mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the checkout at `root` (its mkdocs.yml) into `site`."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=root, capture_output=True, text=True, timeout=300)


needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None,
    reason="mkdocs is not installed (the `docs` extra; `make setup` installs it from the lock)")


@needs_mkdocs
def test_the_site_builds_strict_without_a_warning(tmp_path):
    """`make docs`'s build: no warning (strict would stop on one, and none is printed), README.md
    the home page with its docs/ links moved to the site's pages, and the pages' ../README.md
    links to the home page."""
    out = mkdocs_build(ROOT, tmp_path)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "WARNING" not in log, log
    home = (tmp_path / "index.html").read_text()
    assert "Take a reinforcement-learning policy from training to a microcontroller" in home
    for page in PAGES[1:]:
        assert f'href="{page.stem}/"' in home, f"the home page does not link {page.name}"
        assert (tmp_path / page.stem / "index.html").is_file()
    assert 'href="results/bench/vs_tflm/"' in home       # a repository file, added to the site
    assert (tmp_path / "results" / "bench" / "vs_tflm" / "index.html").is_file()
    back = [p for p in PAGES[1:] if "[← README](../README.md)" in p.read_text()]
    assert len(back) >= 9
    for page in back:
        assert '<a href="../">← README</a>' in (tmp_path / page.stem / "index.html").read_text()


@needs_mkdocs
def test_the_site_build_fails_on_a_broken_link_or_anchor(tmp_path):
    """The strict build is a check: the same sources with one broken link, or one anchor that
    is no heading, fail it."""
    for broken, named in (("[gone](docs/nowhere.md)", "nowhere.md"),
                          ("[bad](docs/pipeline.md#no-such-heading)", "no-such-heading")):
        src = tmp_path / "src"
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(ROOT / "docs", src / "docs")
        for f in ("README.md", "mkdocs.yml", "scripts/mkdocs_hooks.py", "results/bench/vs_tflm.md"):
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / f, src / f)
        (src / "README.md").write_text((ROOT / "README.md").read_text() + f"\n{broken}\n")
        out = mkdocs_build(src, tmp_path / "site")
        assert out.returncode != 0, broken
        assert named in out.stdout + out.stderr


# ------------------------------------------------------------------ the commands the docs show
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


def test_the_documented_commands_are_found():
    """The collector sees the commands where the docs show them: code blocks, table cells,
    spans that wrap a line; a program's bare name or an output table is not a command."""
    texts = {c.text for c in COMMANDS}
    assert "make demo" in texts and "make test" in texts                        # README, a block
    assert "quarl-edge boards" in texts                                         # README, a span
    assert "quarl-edge report results/classic/results.jsonl" in texts           # wraps a line
    assert ("quarl-edge validate MODEL.tflite --board BOARD [--inputs X.npy|X.npz | --random N] "
            "[--save-outputs Y.npy|Y.npz] [--out DIR] --json") in texts         # a table cell, \|
    assert "quarl-edge farm-node --address HEAD:6379 --instances 4 --resources " \
           '{"board:nucleo-f446re": 1}' in texts                                # quoted, # comment
    assert not any(c.argv in (("quarl-edge",), (".venv/bin/quarl-edge",), ("python3.11",),
                              ("make",), ("pytest",)) for c in COMMANDS)
    assert len(COMMANDS) >= 80, len(COMMANDS)


@pytest.mark.parametrize("c", COMMANDS, ids=lambda c: f"{c.where} {c.text}"[:100])
def test_a_documented_command_is_valid(c):
    assert CHECKS[c.kind](c) == []


def test_the_checks_find_a_renamed_flag_a_bad_choice_a_missing_target():
    """Each check fails on what would be a stale doc: an option or command renamed, a choice
    that is not one, a type, a board, a make target or variable, a script's option, a marker."""
    def bad(text, fenced=True):
        return CHECKS[_command(text, "x:1", fenced).kind](_command(text, "x:1", fenced))
    assert bad("quarl-edge quantize runs/x --scheme fp32 int8") == []
    assert "no option --schemes" in bad("quarl-edge quantize runs/x --schemes int8")[0]
    assert "'int7' is not one of" in bad("quarl-edge quantize runs/x --scheme fp32 int7")[0]
    assert "no command 'quantise'" in bad("quarl-edge quantise runs/x")[0]
    assert "'many'" in bad("quarl-edge hil RUN --episodes many")[0]
    assert "no board 'toaster'" in bad("quarl-edge hil RUN --board toaster")[0]
    assert "required" in bad("quarl-edge import policy.onnx --env Pendulum-v1")[0]   # no --out
    assert bad("quarl-edge import SOURCE [--env ID]", fenced=False) == []           # a synopsis
    assert "no option --pretrain" in bad("quarl-edge demo [--pretrain]", fenced=False)[0]
    assert "studies/nothing.toml does not exist" in bad("quarl-edge study studies/nothing.toml")[0]
    assert bad("make test-core PYTHON=python3.13") == []
    assert "no target 'tests'" in bad("make tests")[0]
    assert "no variable ZOOO" in bad("make rl-zoo-table ZOOO=DIR")[0]
    assert "no option --tflm" in bad("benchmarks/vs_tflm.py --tflm DIR")[0]
    assert "benchmarks/nothing.py does not exist" in bad("python benchmarks/nothing.py")[0]
    assert "no such module" in bad("python -m quarl_edge.nothing")[0]
    assert "no marker 'sloow'" in bad("pytest -m 'not sloow'")[0]


# ------------------------------------------------------------------ the cheap ones, run
@dataclass(frozen=True)
class Run:
    """A documented command run for real in a scratch directory: exit 0 and a line of its
    output. `needs` makes the files its example names from committed ones (scratch path: repo
    path); `argv` is what runs when the docs show a synopsis (RUN, [--out DIR]) rather than a
    command; `after` is a command whose output this one reads."""
    shown: str
    expect: str                                  # a regex for a line of stdout
    needs: tuple[tuple[str, str], ...] = ()
    argv: tuple[str, ...] = ()
    after: str = ""


EXAMPLE = "examples/cartpole_dqn"
RUNS = [
    Run("quarl-edge boards", r"^board\s+kind\s+cpu.*\n(.*\n)*host\s+host\b"),
    Run("quarl-edge ports", r"^(device\s+usb\s+board|no serial ports found)"),
    Run("quarl-edge --version", r"^quarl-edge \d+\.\d+"),
    Run("quarl-edge import ppo-LunarLander-v3.zip --out runs/lunar",
        r"^imported the stable-baselines3 PPO policy ppo-LunarLander-v3.zip for LunarLander-v3",
        needs=(("ppo-LunarLander-v3.zip", "tests/fixtures/sb3/ppo_lunar.zip"),)),
    Run("quarl-edge quantize runs/lunar --scheme fp32 int8 int16x8",
        r"^int16x8\s+runs/lunar/models/int16x8.tflite",
        after="quarl-edge import ppo-LunarLander-v3.zip --out runs/lunar"),
    Run("quarl-edge import policy.onnx --env Pendulum-v1 --out runs/p",
        r"^imported the onnx policy policy.onnx for Pendulum-v1",
        needs=(("policy.onnx", "tests/fixtures/sb3/onnx_pendulum_actor.onnx"),)),
    Run("quarl-edge import rl-trained-agents/ppo/MountainCar-v0_1/ --out runs/mc",
        r"^imported the stable-baselines3 PPO policy .* for MountainCar-v0",
        needs=(("rl-trained-agents/ppo/MountainCar-v0_1", "tests/fixtures/rl-zoo/ppo/MountainCar-v0_1"),)),
    Run("quarl-edge hil my_policy.tflite --env CartPole-v1 --board host --episodes 20",
        r"^the board's returns equal TF Lite Micro's, episode by episode",
        needs=(("my_policy.tflite", f"{EXAMPLE}/models/int8.tflite"),)),
    Run("quarl-edge farm-node --head --print", r"ray start --head --port=6379"),
    Run("quarl-edge validate MODEL.tflite --board BOARD [--inputs X.npy|X.npz | --random N] "
        "[--save-outputs Y.npy|Y.npz] [--out DIR] --json", r'^  "bit_exact": true,',
        needs=(("int8.tflite", f"{EXAMPLE}/models/int8.tflite"),),
        argv=("quarl-edge", "validate", "int8.tflite", "--board", "host", "--random", "50",
              "--out", "build", "--json")),
    Run("quarl-edge report RESULTS.jsonl [--out DIR] [--bench BENCH.jsonl]",
        r"^report: report/report.md",
        argv=("quarl-edge", "report", str(ROOT / "results/smoke/results.jsonl"), "--out", "report")),
    Run("python tests/test_layout.py", r"^\d+ modules, \d+ imports, \d+ import levels"),
    Run("python -m quarl_edge.converters.cgen --help", r"^- FULLY_CONNECTED int8"),
    Run("python -m quarl_edge.link.protocol --header > firmware/core/qe_protocol.h", ""),
]

# The others are parsed and checked only, each for the first reason that matches it.
PARSE_ONLY = [
    (r"^quarl-edge (train|study|sweep|demo)\b",
     "trains a policy, a grid of them, or plays many episodes per model: minutes to hours"),
    (r"--board (arduino-uno|microbit-v1|nucleo-\S+|pico|teensy41)\b|--port /dev/",
     "needs a real board on USB"),
    (r"^quarl-edge farm-node --(head|address)",
     "starts a Ray node that keeps running (`farm-node --head --print` runs)"),
    (r"^quarl-edge hil runs/lunar --model int8 --board mps2-an386",
     "20 LunarLander episodes on QEMU (and 60 on the host references): a minute or more; the host board's hil runs"),
    (r"^quarl-edge import (saved_policy|actor\.keras)",
     "loads a SavedModel or Keras model in TensorFlow: ~25-30 s each on a loaded 2-core machine "
     "(tests/test_import.py runs both importers)"),
    (r"^quarl-edge report results/classic/",
     "the 486-row classic grid's report takes ~85 s; `report` runs on results/smoke instead"),
    (r"^(\S+=\S+ )*make (setup|demo|demo-pretrained|test|test-core|test-slow|wheel|fuzz|docs)\b",
     "runs scripts/setup.sh (apt packages, the venv from the lock), then the demo, the suite, "
     "a wheel, fuzzing or the site (its build: test_the_site_builds_strict_without_a_warning)"),
    (r"^make ray-sim$",
     "starts five Ray nodes and runs a study twice: ~4 min (tests/test_ray_sim.py, marker slow)"),
    (r"^make (sb3-fixtures|onnx-fixtures|rl-zoo-table|tflm-integration|vs-tflm)\b",
     "makes side venvs with torch, or needs source checkouts (ZOO, TFLM, ...): tens of minutes"),
    (r"^make (header|clean)$",
     "writes or deletes files in the checkout (`make header`'s command runs above)"),
    (r"^pytest\b", "the test suite itself"),
    (r"^(scripts/setup\.sh|benchmarks/\S+\.py)",
     "installs system packages, or benchmarks for minutes (their options: checked in --help)"),
    (r"^tests/\S+\.py$", "a test file named in prose (it exists)"),
]


def parse_only_reason(c: Command) -> str | None:
    why = next((why for pattern, why in PARSE_ONLY if re.search(pattern, c.text)), None)
    if why is None and c.kind == "quarl-edge" and not c.concrete:
        why = ("a synopsis or example with placeholders (RUN, BOARD, N, [--option]), or a "
               "command's name in prose (validate, hil and report run above)")
    return why


RUN_BY_TEXT = {r.shown: r for r in RUNS}


def test_every_documented_command_is_run_or_says_why_not():
    """A command added to the docs is either run below (RUNS) or matches a reason in
    PARSE_ONLY; each of RUNS is still shown in the docs."""
    texts = {c.text for c in COMMANDS}
    assert [r.shown for r in RUNS if r.shown not in texts] == [], "no longer in the docs"
    unclassified = [f"{c.where}: {c.text}" for c in COMMANDS
                    if c.text not in RUN_BY_TEXT and parse_only_reason(c) is None]
    assert unclassified == [], "run it (RUNS) or say why not (PARSE_ONLY)"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("documented"), set()


def _run(run: Run, scratch) -> subprocess.CompletedProcess:
    work, done = scratch
    if run.after and run.after not in done:
        _run(RUN_BY_TEXT[run.after], scratch)
    for dest, src in run.needs:
        if not (work / dest).exists():
            (work / dest).parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (ROOT / src).is_dir() else shutil.copy)(ROOT / src, work / dest)
    argv = list(run.argv or shlex.split(run.shown))
    if ">" in argv:
        argv = argv[:argv.index(">")]
    if PROGRAMS.get(argv[0]) == "quarl-edge":
        argv, cwd = [sys.executable, "-m", "quarl_edge.cli", *argv[1:]], work
    else:                                           # python: a repository script or module
        argv, cwd = [sys.executable, *argv[1:]], ROOT
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{run.shown}: exit {out.returncode}\n{out.stderr[-3000:]}"
    done.add(run.shown)
    return out


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.shown[:60])
def test_a_cheap_documented_command_runs(run, scratch):
    """The documented commands that take seconds (up to ~25 s on a loaded 2-core machine), run
    as shown in a scratch directory, with the committed files their examples name (the SB3,
    ONNX and RL Zoo fixtures for ppo-LunarLander-v3.zip, policy.onnx and the Zoo folder; the
    example run's int8.tflite for my_policy.tflite), exit 0 and a key line of output:
    boards, ports, --version; import (SB3 zip, ONNX, RL Zoo folder), then quantize of the
    imported run; hil of a bare .tflite on the host board; farm-node --head --print; the
    validate and report synopses on the host board and on results/smoke; test_layout.py,
    cgen --help, and the protocol header, which must equal the committed one.

    Parse-only (PARSE_ONLY says which matches what): train, study, sweep and demo (minutes to
    hours of training or episodes); anything on a real USB board (flash, hil and validate with
    nucleo-*, arduino-uno, microbit-v1, pico, --port /dev/...); farm-node --head/--address (a
    Ray node that keeps running); hil on mps2-an386 (QEMU, a minute or more); import of a
    SavedModel or .keras (~25-30 s of TensorFlow each; test_import.py covers them); the report
    of the 486-row classic grid (~85 s); synopses with placeholders and bare command names;
    every make target (setup.sh first, then the suite, demo, wheel, fuzzing, side venvs with
    torch or source checkouts; header and clean write into the checkout); pytest (the suite
    itself); scripts/setup.sh and the benchmarks (their options are checked in --help)."""
    out = _run(run, scratch)
    if ">" in run.shown:        # the file it writes is the committed one
        target = run.shown.split(">")[1].strip()
        assert out.stdout == (ROOT / target).read_text(), f"{target} is not what it prints"
    else:
        assert re.search(run.expect, out.stdout, re.M), f"{run.shown}:\n{out.stdout[-3000:]}"
