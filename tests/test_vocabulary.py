"""One word per concept (issue 40): docs/layout.md's Vocabulary table is the source; the CLI's
flags, the JSON keys of the results and rows, the Python API's keywords and the README/docs
are checked against it. The old spellings still work and say they are deprecated: a flag on
one stderr line (the real CLI, in a subprocess), an API keyword with a DeprecationWarning.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "layout.md"
CONCEPTS = {"scheme", "model", "policy", "run directory", "board", "action head",
            "accumulator readout", "serial port", "firmware family", "kernel variant",
            "head node"}


# ------------------------------------------------------------------------ the page
def vocabulary_section() -> str:
    text = LAYOUT.read_text()
    start = text.index("\n## Vocabulary\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def vocabulary() -> dict[str, dict]:
    """word -> {"spelt": [...], "never": [...]}: the table's backquoted items per column."""
    out = {}
    for line in vocabulary_section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("word", "") or set(cells[0]) <= {"-"}:
            continue
        out[cells[0]] = {"spelt": re.findall(r"`([^`]+)`", cells[2]),
                         "never": re.findall(r"`([^`]+)`", cells[3])}
    return out


def never_items():
    """The forbidden spellings, by kind: flags (--x), flags with a metavar (--x METAVAR),
    phrases (words with a space), identifiers (with _ or a capital) and bare words (keys)."""
    kinds = {"flag": set(), "flag_metavar": set(), "phrase": set(), "identifier": set(),
             "word": set()}
    for entry in vocabulary().values():
        for item in entry["never"]:
            if item.startswith("--"):
                kinds["flag_metavar" if " " in item else "flag"].add(item)
            elif " " in item:
                kinds["phrase"].add(item)
            elif "_" in item or item != item.lower():
                kinds["identifier"].add(item)
            else:
                kinds["word"].add(item)
    return kinds


def test_the_page_names_every_concept_once_with_its_forbidden_words():
    v = vocabulary()
    assert CONCEPTS <= set(v), CONCEPTS - set(v)
    assert v["scheme"]["never"][:1] == ["precision"] and "--model SCHEME" in v["scheme"]["never"]
    assert "target" in v["policy"]["never"] and "--head" in v["head node"]["never"]
    spelt = [s for e in v.values() for s in e["spelt"] if s.startswith("--")]
    assert len(spelt) == len(set(spelt)), "a flag is the spelling of two concepts"
    # what one concept forbids is not another's spelling
    allowed = {s for e in v.values() for s in e["spelt"]}
    assert not allowed & {n for e in v.values() for n in e["never"]}


# ------------------------------------------------------------------------- the CLI
def cli_options():
    """(command, action) for every option and positional of every command."""
    from quarl_edge.cli import parser
    p = parser()
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                for action in sub._actions:
                    yield name, action
        else:
            yield "", a


def visible(action) -> bool:
    return action.help is not argparse.SUPPRESS


def test_no_cli_flag_uses_a_word_the_vocabulary_forbids():
    never = never_items()
    bad_flags = never["flag"] | {f"--{w}" for w in never["word"]}
    bad_metavar = {tuple(x.split(" ", 1)) for x in never["flag_metavar"]}
    checked = 0
    for cmd, a in cli_options():
        if not visible(a):
            continue
        checked += 1
        for opt in a.option_strings:
            assert opt not in bad_flags, f"{cmd} {opt}"
            assert (opt, a.metavar) not in bad_metavar, f"{cmd} {opt} {a.metavar}"
            assert opt.lstrip("-") not in never["word"], f"{cmd} {opt}"
        if a.metavar == "SCHEME" or a.dest == "scheme":       # a scheme is --scheme
            assert a.option_strings == ["--scheme"], f"{cmd}: {a.option_strings} {a.dest}"
        # a positional's name (its dest) is the concept too; RUN (a run directory) is one
        assert a.dest not in never["word"] - {"run"}, f"{cmd} {a.dest}"
    assert checked > 100


def test_every_flag_the_page_spells_exists():
    flags = {o for _, a in cli_options() if visible(a) for o in a.option_strings}
    spelt = {s.split()[0] for e in vocabulary().values() for s in e["spelt"]
             if s.startswith("--")}
    assert spelt and spelt <= flags, spelt - flags
    # where a command takes a scheme, it is --scheme, with --model its hidden old spelling
    for cmd in ("build", "flash", "hil", "export"):
        opts = {o: a for c, a in cli_options() if c == cmd for o in a.option_strings}
        assert visible(opts["--scheme"]) and not visible(opts["--model"]), cmd
        assert opts["--model"].dest == opts["--scheme"].dest == "scheme"


def test_api_keywords_follow_the_page():
    import quarl_edge.api as api
    params = {n for name in api.__all__ if inspect.isfunction(getattr(api, name))
              for n in inspect.signature(getattr(api, name)).parameters}
    spelt = {s[:-1] for e in vocabulary().values() for s in e["spelt"] if s.endswith("=")}
    assert spelt and spelt <= params, spelt - params
    never = never_items()
    assert not params & (never["word"] - {"run", "model"}), params & never["word"]
    # `model` is a .tflite (validate); where it meant a scheme or a policy it is renamed
    for fn in (api.hil, api.export, api.build, api.session):
        assert "model" not in inspect.signature(fn).parameters and "model" in fn.renamed
    assert "scheme" in inspect.signature(api.hil).parameters


# ------------------------------------------------------------------------ JSON keys
def result_fields() -> dict[str, list[str]]:
    import quarl_edge.api_results as r
    from quarl_edge.measure import rows
    from quarl_edge.study.status import StudyStatus
    classes = [c for c in vars(r).values() if dataclasses.is_dataclass(c)]
    classes += [rows.HilResult, rows.BenchRow, rows.BoardCellRow, rows.Latency, StudyStatus]
    return {c.__name__: [f.name for f in dataclasses.fields(c)] for c in classes}


def all_keys(value) -> set:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in all_keys(v)}
    return set()


def test_result_and_row_keys_follow_the_page():
    words = never_items()["word"]
    fields = result_fields()
    assert {"ExportResult", "HilResult", "BenchRow", "BuildResult"} <= set(fields)
    for cls, names in fields.items():
        assert not set(names) & words, (cls, set(names) & words)
    assert "action_head" in fields["ExportResult"] and "run_dir" in fields["BenchRow"]
    assert "scheme" in fields["HilResult"] and "scheme" in fields["BenchRow"]


def test_old_rows_are_read_with_todays_keys():
    """Committed rows written under the old names (bench's precision and run) read as today's
    (rows.migrate); a study's results file too (study/results.read_results)."""
    from quarl_edge.measure.rows import migrate
    from quarl_edge.study.results import read_results
    assert migrate({"run": "r", "board": "host", "precision": "int8"}) == {
        "run_dir": "r", "board": "host", "scheme": "int8"}
    words = never_items()["word"]
    old = ROOT / "results" / "bench-cartpole-dqn" / "episodes" / "bench.jsonl"
    raw = [json.loads(line) for line in old.read_text().splitlines() if line.strip()]
    assert any(all_keys(r) & words for r in raw), "the committed file has old keys no more"
    rows = [migrate(r) for r in raw]
    assert rows and all(not all_keys(r) & words and "scheme" in r and "run_dir" in r
                        for r in rows)
    study = read_results(ROOT / "results" / "classic-boards" / "results.jsonl")
    assert study and all(not set(r) & words for r in study)


# ------------------------------------------------------------------------ the pages
def docs_text() -> dict[Path, str]:
    pages = {p: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    pages[LAYOUT] = pages[LAYOUT].replace(vocabulary_section(), "")
    return pages


def test_readme_and_docs_use_the_words():
    never = never_items()
    from quarl_edge.core.names import SCHEMES
    schemes = "|".join(map(re.escape, SCHEMES))
    for path, text in docs_text().items():
        for phrase in never["phrase"]:
            assert phrase.lower() not in text.lower(), (path.name, phrase)
        for flag in never["flag"]:     # `ray start --head` is Ray's own command, not ours
            hits = [m for m in re.finditer(re.escape(flag) + r"(?![\w-])", text)
                    if not text[:m.start()].endswith("ray start ")]
            assert not hits, (path.name, flag)
        for item in never["flag_metavar"]:
            flag = item.split()[0]
            assert not re.search(re.escape(flag) + rf" ({schemes}|SCHEME)\b", text), \
                (path.name, item)
        for ident in never["identifier"]:
            assert not re.search(rf"\b{re.escape(ident)}\b", text), (path.name, ident)


def test_no_old_identifier_is_left_in_the_code():
    idents = never_items()["identifier"]
    assert {"HilTarget", "hil_target", "port_dirs"} <= idents
    for folder in ("quarl_edge", "converters", "benchmarks", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == Path(__file__).name:
                continue
            text = path.read_text()
            for ident in idents:
                assert not re.search(rf"\b{re.escape(ident)}\b", text), (str(path), ident)


def test_kernel_variants_are_spelt_with_hyphens():
    from quarl_edge.targets.boards import all_boards, kernel_variants
    variants = kernel_variants()
    assert "cortex-m-dsp" in variants and all("_" not in v for v in variants)
    assert {b.kernels for b in all_boards().values()} <= set(variants)


# ------------------------------------------------------------- the old spellings work
def cli(*args, cwd=ROOT):
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)], cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr.splitlines()


def warning_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if "deprecated" in ln]


@pytest.mark.parametrize("old, new", [
    (["build", "examples/cartpole_dqn", "--model", "int8", "--board", "host", "--json"],
     ["build", "examples/cartpole_dqn", "--scheme", "int8", "--board", "host", "--json"]),
    (["hil", "no-such-run", "--model", "int8"], ["hil", "no-such-run", "--scheme", "int8"]),
    (["hil", "no-such-run", "--action", "argmax"],
     ["hil", "no-such-run", "--action-head", "argmax"]),
    (["export", "no-such-run", "--model", "int8", "--name", "x", "--out", "lib"],
     ["export", "no-such-run", "--scheme", "int8", "--name", "x", "--out", "lib"]),
    (["hil", "examples/cartpole_dqn", "--model", "nonsense"],
     ["hil", "examples/cartpole_dqn", "--scheme", "nonsense"]),
    (["farm-node", "--head", "--print", "--json"],
     ["farm-node", "--head-node", "--print", "--json"]),
    (["farm-node", "--head-node", "--port", "6390", "--print", "--json"],
     ["farm-node", "--head-node", "--ray-port", "6390", "--print", "--json"]),
])
def test_a_deprecated_flag_works_and_says_so_on_one_line(old, new, tmp_path):
    if old[0] == "build":
        old, new = old + ["--out", tmp_path / "a"], new + ["--out", tmp_path / "b"]
    rc_old, out_old, err_old = cli(*old)
    rc_new, out_new, err_new = cli(*new)
    assert rc_old == rc_new, (err_old, err_new)
    said = warning_lines(err_old)
    flag = next(a for a in old if a.startswith("--") and a not in new)
    renamed = next(a for a in new if a.startswith("--") and a not in old)
    if "nonsense" in old:    # a usage error: argparse's one line, naming what was typed
        assert rc_old == 2 and not said and len(err_old) == len(err_new) == 1
        assert f"argument {flag}: invalid choice: 'nonsense'" in err_old[0]
        return
    assert said == [f"quarl-edge: warning: {flag} is deprecated; use {renamed}"], err_old
    assert err_old.index(said[0]) == 0 and not warning_lines(err_new)
    assert err_old[1:] == err_new or rc_new == 0, (err_old, err_new)
    if rc_new == 0:
        a, b = json.loads(out_old), json.loads(out_new)
        assert a.keys() == b.keys()
        if old[0] == "farm-node":
            assert a["command"] == b["command"]
            assert ("--port=6390" in a["command"]) == ("6390" in old)
        else:
            assert a["memory"] == b["memory"] and a["model"] == b["model"]
    else:
        assert rc_new == 2 and len(err_new) == 1


def test_old_api_keywords_warn_and_still_work():
    import quarl_edge as qe
    with pytest.warns(DeprecationWarning, match=r"farm_node\(port=...\) is deprecated; use "
                                               r"ray_port="):
        with pytest.warns(DeprecationWarning, match=r"farm_node\(head=...\).*head_node="):
            old = qe.farm_node(head=True, port=6390, dry_run=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = qe.farm_node(head_node=True, ray_port=6390, dry_run=True)
    assert old["command"] == new["command"] and "--port=6390" in new["command"]
    for call, new_call in (
            (lambda: qe.hil(run="no-such-run", model="int8"),
             lambda: qe.hil(policy="no-such-run", scheme="int8")),
            (lambda: qe.hil("no-such-run", action="argmax"),
             lambda: qe.hil("no-such-run", action_head="argmax")),
            (lambda: qe.build(model="no-such-run"), lambda: qe.build(policy="no-such-run")),
            (lambda: qe.export("no-such-run", model="int8", name="x", out="lib"),
             lambda: qe.export("no-such-run", scheme="int8", name="x", out="lib"))):
        with pytest.warns(DeprecationWarning, match="is deprecated; use"):
            with pytest.raises(qe.QuarlError) as old_error:
                call()
        with pytest.raises(qe.QuarlError) as new_error:
            new_call()
        assert str(old_error.value) == str(new_error.value)
    with pytest.raises(TypeError, match="both model= .* and scheme="):
        qe.hil("no-such-run", model="int8", scheme="int8")
