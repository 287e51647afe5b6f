"""The report's document as Markdown and as one self-contained HTML page, and the formatting of
its numbers. A document is a list of blocks:

    ("h", level, text)   ("p", text)   ("img", file, alt)   ("table", columns, rows)
    ("details", summary, block)

Text may hold **bold** and `code`, as in Markdown; the HTML page embeds each image as a data: URI.
"""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import numpy as np


def fmt(x, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    return f"{x:,.{digits}f}"


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def fmt_bytes(x) -> str:
    return f"{x:,.0f}" if x else "-"


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks) -> str:
    out = []
    for b in blocks:
        if b[0] == "h":
            out.append("#" * b[1] + " " + b[2])
        elif b[0] == "p":
            out.append(b[1])
        elif b[0] == "img":
            out.append(f"![{b[2]}]({b[1]})")
        elif b[0] == "table":
            out.append("| " + " | ".join(b[1]) + " |")
            out.append("|" + "|".join("---" for _ in b[1]) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b[2])
        elif b[0] == "details":
            out.append(f"<details><summary>{b[1]}</summary>\n")
            out.append(to_markdown([b[2]]).rstrip())
            out.append("\n</details>")
        out.append("")
    return "\n".join(out)


def _inline(s: str) -> str:
    s = html.escape(str(s))
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", s)


CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid
#ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f2f2f2}img{max-width:100%}
code{background:#f4f4f4;padding:0 3px}"""


def to_html(blocks, title: str, image_dir: Path = Path(".")) -> str:
    """The blocks as one HTML page; images are read from `image_dir` and embedded as data:
    URIs."""
    body = []
    for b in blocks:
        if b[0] == "h":
            body.append(f"<h{b[1]}>{_inline(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            body.append(f"<p>{_inline(b[1])}</p>")
        elif b[0] == "img":   # embedded: the page is one self-contained file
            data = base64.b64encode((image_dir / b[1]).read_bytes()).decode("ascii")
            body.append(f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(b[2])}">'
                        "</p>")
        elif b[0] == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                           for row in b[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif b[0] == "details":
            body.append(f"<details><summary>{_inline(b[1])}</summary>"
                        f"{to_html([b[2]], title, image_dir).split('<body>')[1].split('</body>')[0]}</details>")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n")

