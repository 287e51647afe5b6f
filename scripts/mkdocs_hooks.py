"""mkdocs hook (mkdocs.yml `hooks:`): the site's home page is README.md itself, and the links
written for GitHub work on the site, with no copy of any page kept by hand.

README.md sits at the top of the repository and links `docs/x.md`; the pages in docs/ link
`../README.md`. mkdocs reads only docs/, so at build time
- README.md becomes the page `index.md` (read from its own file, so `mkdocs serve` sees edits);
- in that page, `docs/x.md` becomes `x.md`; in the docs pages, `../README.md` becomes `index.md`;
- any other repository file a page links (e.g. `results/bench/vs_tflm.md`) is added to the site at
  its repository path (`../results/...` from a docs page becomes `results/...`), outside the nav.
Nothing is written into the checkout. `make docs` builds with `--strict`, and
tests/test_docs.py checks that the build has no warning.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

ROOT = Path(__file__).resolve().parent.parent
HOME = "index.md"

LINK = re.compile(r"(?<!!)(\[[^\]]*\]\()([^)\s]+)(\))")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|#)")     # http:, mailto:, a bare #anchor


def site_path(path: str) -> str:
    """Where a repository file (a POSIX path from the top) is on the site: its src_uri."""
    if path == "README.md":
        return HOME
    if path.startswith("docs/"):
        return path[len("docs/"):]
    return path


def rewrite(markdown: str, page: str) -> tuple[str, set[str]]:
    """The Markdown of the page at repository path `page`, with its relative links moved to the
    site's layout, and the repository files outside docs/ that it links (to be added to the
    site). Fenced code is left alone; a link above the repository is left to mkdocs."""
    extra: set[str] = set()
    here = posixpath.dirname(site_path(page))

    def one(m: re.Match) -> str:
        target = m.group(2)
        if EXTERNAL.match(target):
            return m.group(0)
        file_part, hash_, anchor = target.partition("#")
        path = posixpath.normpath(posixpath.join(posixpath.dirname(page), file_part))
        if path.startswith("../"):
            return m.group(0)
        if not path.startswith("docs/") and path != "README.md":
            extra.add(path)
        new = posixpath.relpath(site_path(path), here or ".")
        return f"{m.group(1)}{new}{hash_}{anchor}{m.group(3)}"

    out, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
        else:
            out.append(line if fenced else LINK.sub(one, line))
    return "".join(out), extra


def _repo_path(file: File) -> str:
    return Path(file.abs_src_path).resolve().relative_to(ROOT).as_posix()


def on_files(files, config):
    files.append(File.generated(config, HOME, abs_src_path=str(ROOT / "README.md"),
                                inclusion=InclusionLevel.INCLUDED))
    # the repository files the pages link outside docs/, at their repository paths
    for page in list(files.documentation_pages()):
        path = _repo_path(page)
        for linked in sorted(rewrite(Path(page.abs_src_path).read_text(encoding="utf-8"), path)[1]):
            if files.get_file_from_path(linked) is None and (ROOT / linked).is_file():
                files.append(File.generated(config, linked, abs_src_path=str(ROOT / linked),
                                            inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown, page, config, files):
    return rewrite(markdown, _repo_path(page.file))[0]
