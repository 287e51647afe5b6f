"""README.md is the front door and docs/*.md hold the details (issue 25: docs that cannot rot).

- Every relative Markdown link between them points to an existing file and, for a #anchor, to a
  heading of that file (GitHub's anchor rules). The README stays short and keeps CI's test
  command literal.
- The site (`make docs`: mkdocs.yml, README.md as its home page) builds with --strict and
  prints no warning.

The shell commands they show are checked in test_docs_commands.py (against what each names)
and test_docs_runs.py (the cheap ones, run for real), with tests/helpers_docs.py.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_docs import FENCE, PAGES, ROOT

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


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
