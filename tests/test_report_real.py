"""The report of real, committed results: the classic grid's (figures bounded and embedded,
claims as tables of their numbers, only unexpected skips listed) and the board study's (scheme x
board tables, Pareto plots, the int8 claim per board, intervals over seeds). Synthetic rows in
test_report.py; the smoke study's real ones in test_study.py."""
from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path

import pytest

from quarl_edge.study.report import write_report
from quarl_edge.study.results import Results, latest_rows, read_results


# ------------------------------------------------------------ the committed classic results
CLASSIC = Path(__file__).resolve().parents[1] / "results" / "classic" / "results.jsonl"


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def classic(tmp_path_factory):
    """The committed classic grid's report, with one unexpected skip and one failed cell
    added (an int8 cell of a DQN run: int8 applies to every task)."""
    rows = [json.loads(line) for line in CLASSIC.read_text().splitlines() if line.strip()]
    extra = [{"kind": "cell", "study": "classic", "algo": "dqn", "env": "Acrobot-v1", "seed": 7,
              "scheme": "int8", "status": "skipped", "reason": "no run for seed 7"},
             {"kind": "cell", "study": "classic", "algo": "dqn", "env": "Acrobot-v1", "seed": 8,
              "scheme": "fp16", "status": "error", "reason": "converter crashed"}]
    path = tmp_path_factory.mktemp("classic") / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    out = write_report(path, path.parent / "report")
    return rows, out


def test_classic_report_figures_are_bounded_and_embedded(classic):
    _, out = classic
    assert {f.name for f in out["figures"]} == {"return_vs_scheme.png", "return_vs_bits.png",
                                                "weight_histograms.png", "model_size.png"}
    for f in out["figures"]:
        width, height = _png_size(f)
        assert 300 < width <= 1600 and height <= 1600, (f.name, width, height)
    page = out["html"].read_text()
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) == 4 and all(s.startswith("data:image/png;base64,") for s in sources)
    for src, f in zip(sources, ("return_vs_scheme", "return_vs_bits", "weight_histograms",
                                "model_size")):
        assert base64.b64decode(src.split(",", 1)[1]) == (out["html"].parent / f"{f}.png").read_bytes()
    assert "http" not in page.replace('charset="utf-8"', "") and "<script" not in page


def test_classic_report_claims_are_a_table_of_their_numbers(classic):
    rows, out = classic
    md = out["markdown"].read_text()
    found = json.loads(out["claims"].read_text())
    assert "| claim | our data | n | the numbers |" in md
    for c in found:
        n = f"{c['n']} ({c['n_seeds']} seeds × {c['episodes_per_seed']} episodes)"
        assert f"| {c['claim']} | **{c['verdict']}** | {n} | {c['summary']} |" in md
        assert f"Rule: {c['rule']}" in md and f"Test: {c['test']}." in md
        assert c["tables"] and all(t["rows"] for t in c["tables"])
    assert " ".join(found[0]["evidence"]) not in md            # no wall of text
    # claim 2's method table: the counts of by_method, from the rows
    c2 = found[1]
    rl = c2["by_method"]["qat-int8"]
    assert f"| qat-int8 (RL-loop QAT) | {rl['n']} | {rl['ok']} |" in md
    # claim 1's per-setting counts add up to n
    assert sum(int(r[1]) for r in found[0]["tables"][1]["rows"]) == found[0]["n"]
    # and its per-task interval table: a row per task, then the pooled row with n seeds
    pooled = found[0]["tables"][0]["rows"][-1]
    assert pooled[0] == "**pooled**" and pooled[1] == str(found[0]["n_seeds"])
    assert "percentile bootstrap, 4000 resamples of the training seeds" in md


def test_classic_report_lists_only_unexpected_skips(classic):
    rows, out = classic
    md = out["markdown"].read_text()
    section = md[md.index("## Skipped and failed"):]
    skipped = [r for r in latest_rows(rows).values() if r.get("status") == "skipped"]
    table = section[section.index("| schemes | why | not applicable to | cells |"):].split("\n\n")[0]
    lines = table.splitlines()[2:]
    assert [line.split(" | ")[0].lstrip("| ") for line in lines] == [
        "qat-int8", "int8-centred, int8-acc, int8-centred-acc, int8-i16head"]
    assert sum(int(line.rstrip(" |").rsplit("| ", 1)[1]) for line in lines) == len(skipped)
    assert "PPO CartPole-v1" in lines[0] and "PPO CartPole-v1" not in lines[1]  # discrete PPO
    # only the two rows added by the fixture are listed one by one
    listed = [line for line in section.splitlines() if line.startswith("| cell |")]
    assert listed == ["| cell | DQN Acrobot-v1 | 7 | int8 | skipped | no run for seed 7 |",
                      "| cell | DQN Acrobot-v1 | 8 | fp16 | error | converter crashed |"]


# ------------------------------------------------------------------------ board cells (real)
BOARDS_EXAMPLE = Path(__file__).resolve().parents[1] / "results" / "boards-example" / "results.jsonl"
# A real does-not-fit row: the example run's int8 model on a copy of the host board file with
# 16 KiB of flash (cells.run_board_cell; tests/test_study.py makes such rows end to end)
NO_FIT = {"kind": "board", "study": "boards-example", "algo": "dqn", "env": "CartPole-v1",
          "seed": 0, "scheme": "int8", "board": "host-tiny", "node": None, "host": "vm",
          "pid": 13520, "status": "does-not-fit",
          "reason": "firmware for host-tiny needs 40263 B of flash; the board has 16384 B",
          "board_flash_bytes": 16384, "board_ram_bytes": 0, "needs_flash_bytes": 40263,
          "arena_bytes": 128, "weight_bytes": 5000, "seconds": 12.48}


def test_board_tables_pareto_plots_and_the_int8_claim_from_real_rows(tmp_path, monkeypatch):
    """The committed board study (the shipped example run on five boards) through the report:
    per task one scheme x board table, one Pareto plot per board embedded in the HTML (with a
    µJ axis on the boards with energy figures), and the int8-vs-fp32 line per board whose
    numbers are the rows' own."""
    from matplotlib.axes import Axes
    rows = read_results(BOARDS_EXAMPLE)
    boards = [r for r in rows if r["kind"] == "board" and r["status"] == "ok"]
    assert len({r["board"] for r in boards}) >= 4
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + [NO_FIT]))
    energy_axes = []                   # (the panel's title, cost -> µJ) of each top axis drawn
    real = Axes.secondary_xaxis

    def spy(ax, location, functions=None, **kw):
        energy_axes.append((ax, functions[0]))
        return real(ax, location, functions=functions, **kw)
    monkeypatch.setattr(Axes, "secondary_xaxis", spy)
    out = write_report(path, tmp_path / "rep")
    # the Pareto plots' energy axis: only the atmega328p has figures among these boards, and its
    # top axis reads a cost of C cycles as C x 5 V x 650 µA/MHz / 1e6 µJ (boards/atmega328p.toml)
    assert len(energy_axes) == 1 and energy_axes[0][0].get_title() == "DQN CartPole-v1"
    assert energy_axes[0][1](66_475.0) == pytest.approx(66_475 * 5 * 650 / 1e6, rel=1e-9)
    md = out["markdown"].read_text()
    section = md[md.index("## On the board"):]
    header = ("| board | scheme | seeds (n) × episodes | return (mean ± std) | normalised loss | agreement | "
              "= tflite-runtime (ref. kernels) | = tflite-runtime (optimized) | "
              "= TF Lite Micro | bit-exact | cost / inference | "
              "µs / inference | µJ / inference (est.) | flash (B) | "
              "RAM (B) | arena (B) | stack (B) |")
    assert "### DQN CartPole-v1: scheme × board" in section and header in section
    for r in boards:     # every board cell is a row of the table with its own numbers
        line = next(ln for ln in section.splitlines()
                    if ln.startswith(f"| {r['board']} | {r['scheme']} | 1"
                                     + (f" × {r['episodes']}" if r.get("episodes") else "") + " |"))
        assert f"{r['mean_return']:,.1f} ± {r['std_return']:,.1f}" in line
        assert f"{r['cost_mean']:,.0f} {r['unit']}" in line and f"{r['flash_bytes']:,}" in line
        tflite = "yes" if r["matches_tflite"] else "NO"
        ref = {True: "yes", False: "NO", None: "-"}[r.get("matches_tflite_ref")]
        # = tflite-runtime's reference kernels ("-": the row predates them), its optimized
        # kernels, = TF Lite Micro, bit-exact
        assert f"| {ref} | {tflite} | yes | yes |" in line
        # the energy estimate from the board file's datasheet figures (docs/boards.md)
        if r["board"] in ("atmega328p", "arduino-uno"):
            assert f"| {r['cost_mean'] * 5 * 650 / 1e6:,.1f} | {r['flash_bytes']:,} |" in line
        else:
            assert f"| - | {r['flash_bytes']:,} |" in line
    # the count of board cells equal to each host interpreter, per family, from the rows
    int8 = [r for r in boards if r["scheme"] not in ("fp32", "int16x8") and r.get("episodes")]
    ref = [r for r in int8 if r.get("matches_tflite_ref") is not None]
    ref_part = (f"tflite-runtime's reference kernels in "
                f"{sum(bool(r['matches_tflite_ref']) for r in ref)} of {len(ref)}; " if ref else "")
    assert int8 and (f"{len(int8)} int8 cells ({', '.join(sorted({r['scheme'] for r in int8}))}"
                     "): the same returns as " + ref_part + "its optimized kernels in "
                     f"{sum(bool(r['matches_tflite']) for r in int8)} of {len(int8)}; TF Lite "
                     f"Micro in {len(int8)} of {len(int8)}") in section
    assert ("| host-tiny | int8 | - | does not fit (needs 40,263 B flash; arena 128 B; "
            "weights 5,000 B) |") in section
    assert "40,263 / 16,384" in section
    # the claim, per board with fp32 and int8, computed from those rows
    by = {(r["board"], r["scheme"]): r for r in boards}
    for board in {b for b, s in by if s == "int8" and (b, "fp32") in by}:
        q, f = by[(board, "int8")], by[(board, "fp32")]
        speed = f["cost_mean"] / q["cost_mean"]
        faster = f"{speed:.2f}× faster" if speed >= 1 else f"{1 / speed:.2f}× slower"
        claim = next(ln for ln in section.splitlines()
                     if ln.startswith(f"DQN CartPole-v1 on {board} "))
        assert f"int8 is {faster}" in claim
        assert f"{f['flash_bytes'] / q['flash_bytes']:.2f}× smaller in flash" in claim
        assert "with a return loss of" in claim
    # a Pareto plot per board, bounded, embedded in the self-contained page
    pareto = sorted(f for f in out["figures"] if f.name.startswith("pareto_"))
    assert [f.name for f in pareto] == sorted(f"pareto_{b}.png" for b in {r["board"] for r in boards})
    for f in pareto:
        width, height = _png_size(f)
        assert 300 < width <= 1600 and height <= 1600
        assert f"]({f.name})" in md
    page = out["html"].read_text()
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) == len(out["figures"]) and all(s.startswith("data:image/png;base64,")
                                                       for s in sources)
    assert "http" not in page.replace('charset="utf-8"', "") and "<script" not in page
    # boards.json: the same cells and lines, for scripts
    data = json.loads(out["boards"].read_text())
    assert len(data["cells"]) == len({(r["board"], r["scheme"]) for r in boards}) + 1
    assert all(line in section for line in data["int8_vs_fp32"])
    # the not-deployable schemes are said once, not listed as failures
    assert "Not run on a board: dyn-int8 (dynamic-range" in section
    assert "## Skipped and failed" not in md          # nothing failed


def test_board_cells_carry_the_interval_over_seeds_the_pareto_bars_draw():
    from quarl_edge.study.board_section import board_cells, int8_vs_fp32
    rows = read_results(BOARDS_EXAMPLE)
    one = [c for c in board_cells(Results(rows)) if c["fits"] and c["return"] is not None]
    assert one and all(c["seeds"] == 1 and c["return_ci"] is None for c in one)
    # the same study again as seed 1, every board return 10 higher: the 2-seed interval spans
    # both seeds' returns (a resample of 2 seeds is one of them 1/4 of the time each)
    again = [dict(r, seed=1, **({"mean_return": r["mean_return"] + 10.0}
                                if r["kind"] == "board" and r.get("mean_return") is not None
                                else {})) for r in rows]
    two = [c for c in board_cells(Results(rows + again)) if c["fits"] and c["return"] is not None]
    assert len(two) == len(one)
    key = lambda c: (c["task"], c["board"], c["scheme"])   # noqa: E731
    for c, c1 in zip(sorted(two, key=key), sorted(one, key=key)):
        assert key(c) == key(c1) and c["seeds"] == 2 and c["return_ci"] == pytest.approx([c1["return"], c1["return"] + 10])
        assert c1["loss_ci"] is None
        if c["loss"] is not None:   # the loss's interval spans the two seeds' losses too
            lo, hi = sorted([c1["loss"], 2 * c["loss"] - c1["loss"]])
            assert c["loss_ci"] == pytest.approx([lo, hi])
    # and the int8-vs-fp32 line of each board states that interval, one seed's line none
    lines = int8_vs_fp32(two)
    assert lines and all(", 95 % CI over seeds [" in ln for ln in lines)
    assert not any("CI" in ln for ln in int8_vs_fp32(one))


def test_int4_against_int8_per_board_from_the_rows():
    """The section's 4-bit paragraph: per board the median ratio of int8x4's flash and cost to
    int8's over the tasks with both, from the rows; a cell where int8 did not fit says whether
    int8x4 does. The boards-example rows, with an int8x4 twin of each int8 board row."""
    from quarl_edge.study.board_section import board_cells, int4_vs_int8
    rows = read_results(BOARDS_EXAMPLE)
    assert int4_vs_int8(board_cells(Results(rows))) == []     # no int8x4 cells: nothing said
    int8 = [r for r in rows if r["kind"] == "board" and r["scheme"] == "int8"
            and r["status"] == "ok"]
    twins = [dict(r, scheme="int8x4", flash_bytes=r["flash_bytes"] - 1000,
                  cost_mean=r["cost_mean"] * 1.5) for r in int8]
    no_fit = dict(int8[0], scheme="int8", board="tiny-board", status="does-not-fit",
                  needs_flash_bytes=40_000, board_flash_bytes=32_768)
    rescued = dict(int8[0], scheme="int8x4", board="tiny-board", flash_bytes=30_000)
    blocks = int4_vs_int8(board_cells(Results(rows + twins + [no_fit, rescued])))
    text = blocks[0][1]
    for r in int8:
        ratio = (r["flash_bytes"] - 1000) / r["flash_bytes"]
        assert f"{r['board']}: flash {ratio:.2f}×, cost 1.50× over 1 task" in text
    assert ("Where int8 did not fit: DQN CartPole-v1 on tiny-board: int8 needs 40,000 B of "
            "flash of the board's 32,768 B; int8x4 fits (30,000 B, return") in blocks[1][1]
    assert blocks[2][0] == "details" and len(blocks[2][2][2]) == len(int8)
