"""Energy per inference: cycles x supply x run current per MHz, from cited board-file figures."""
import shutil

import pytest

from quarl_edge.core.errors import BoardError
from quarl_edge.measure.energy import energy, label, no_figures
from quarl_edge.measure.hil import _energy
from quarl_edge.targets.boards import all_boards, get_board, load_board_file


def test_every_board_has_cited_figures_or_says_why_not():
    for b in all_boards().values():
        assert b.energy is not None, f"{b.id}: no [energy] table"
        if "none" in b.energy:
            assert len(b.energy["none"]) > 40 and no_figures(b) == b.energy["none"]
        else:
            assert "Table" in b.energy["source"] and b.energy["supply_v"] > 0, b.id
            assert b.cost_unit != "ns"


def test_the_atmega328p_estimate_is_cycles_times_volts_times_current_per_mhz():
    avr = get_board("atmega328p")
    e = energy(avr, 66475)          # the int8 CartPole policy's cycles
    # 66,475 cycles / 16 MHz = 4,154.7 µs at 5 V x 10.4 mA (650 µA/MHz x 16 MHz) = 216.0 µJ
    assert e["uj"] == pytest.approx(66475 / 16e6 * 5.0 * 650e-6 * 16 * 1e6)
    assert e["uj"] == pytest.approx(216.04, abs=0.01) and e["estimate"] is True
    assert "Table 29-12" in e["source"] and "5.2 mA" in e["source"]
    assert label(e) == "216.0 µJ (estimate)"
    # hil: per inference from the mean step, per episode from every step's cost / episodes
    h = _energy(avr, [66475] * 30, 3)
    assert h["uj"] == pytest.approx(216.04, abs=0.01)
    assert h["uj_per_episode"] == pytest.approx(10 * h["uj"])


def test_boards_without_figures_say_so():
    for board in ("host", "mps2-an386", "microbit"):
        e = energy(get_board(board), 1000)
        assert e["uj"] is None and e["none"] and label(e) == "no energy figures"
    assert "FPGA" in energy(get_board("mps2-an386"), 10)["none"]


def _board_file(tmp_path, src, energy_toml):
    text = (all_boards()[src].path.read_text().split("\n[energy]")[0] + "\n" + energy_toml)
    p = tmp_path / f"{src}.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("src, table, words", [
    ("atmega328p", "[energy]\nsupply_v = 5.0\nrun_ua_per_mhz = 650\nmode = \"x\"\n",
     r"\[energy\]: missing source"),
    ("microbit", "[energy]\nsupply_v = 3.0\nrun_ua_per_mhz = 200\nmode = \"x\"\nsource = \"y\"\n",
     "missing cpi, cpi_note"),                  # instructions need a stated CPI and its error
    ("atmega328p", "[energy]\nnone = \"why\"\nsupply_v = 5.0\n", "it takes no figures"),
    ("atmega328p", "[energy]\nsupply_v = -5\n", "supply_v"),
    ("atmega328p", "[energy]\nvolts = 5\n", "volts"),
])
def test_the_loader_refuses_an_energy_table_without_its_figures(tmp_path, src, table, words):
    with pytest.raises(BoardError, match=words):
        load_board_file(_board_file(tmp_path, src, table))


def test_an_instructions_board_with_a_stated_cpi_gets_an_estimate(tmp_path):
    p = _board_file(tmp_path, "microbit",
                    "[energy]\nsupply_v = 3.0\nrun_ua_per_mhz = 200\nmode = \"run\"\n"
                    "source = \"a datasheet, Table 1\"\ncpi = 1.5\ncpi_note = \"a guess, +-50 %\"\n")
    b = load_board_file(p)
    e = energy(b, 1000)
    assert e["uj"] == pytest.approx(1000 * 1.5 * 3.0 * 200 / 1e6)
    assert "CPI 1.5: a guess, +-50 %" in e["basis"]
    shutil.rmtree(tmp_path)
