"""Energy per inference: cycles x supply x run current per MHz, from cited board-file figures."""
import shutil

import pytest

from quarl_edge.cli.on_board import energy_table
from quarl_edge.core.errors import BoardError
from quarl_edge.measure.energy import energy, label, markdown, no_figures
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
            # where it was read and, derived or not, how the figure became µA/MHz
            assert b.energy["url"].startswith("http") and b.energy["basis"], b.id
            e = energy(b, 1000)
            assert e["uj"] > 0 and e["source"] == b.energy["source"], b.id


def test_the_boards_given_figures_since_issue_42_say_how_they_were_read():
    for board in ("netduinoplus2", "esp32c3"):
        e = get_board(board).energy
        assert "search index" in e["found"] and ("not fetched" in e["found"]
                                                 or "nor the PDF" in e["found"]), board
    # the nucleo boards have none: their datasheets were not read, and they say so
    for board in ("nucleo-l4r5zi", "nucleo-f446re", "pico", "teensy41", "microbit"):
        assert get_board(board).energy.keys() == {"none"}, board
    assert "DS12023" in get_board("nucleo-l4r5zi").energy["none"]


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


def test_the_netduinoplus2_estimate_is_instructions_times_a_cpi_range_times_its_figures():
    """DS8626 Rev 12 Table 20: 40 mA at 168 MHz, 3.3 V (238.095 µA/MHz); CPI 1.5 in 1-2."""
    b = get_board("netduinoplus2")
    e = energy(b, 14227)        # the int8 CartPole policy's instructions (bench-cartpole-dqn)
    # by hand: 14,227 instructions x 1.5 = 21,340.5 cycles / 168 MHz = 127.0 µs, at 3.3 V x
    # 40 mA (132 mW): 16.77 µJ; at CPI 1 and 2: 11.18 and 22.36 µJ
    assert e["uj"] == pytest.approx(14227 * 1.5 / 168e6 * 3.3 * 40e-3 * 1e6, rel=1e-5)
    assert e["uj"] == pytest.approx(16.767, abs=1e-3)
    assert e["uj_range"] == pytest.approx([11.178, 22.357], abs=1e-3)
    assert e["cycles_per_unit"] == 1.5 and "CPI 1.5 (1-2)" in e["basis"]
    assert "DS8626 Rev 12" in e["source"] and "Table 20" in e["source"] and "40 mA" in e["source"]
    assert label(e) == "16.8 µJ (estimate, 11.2-22.4)"
    assert "| netduinoplus2 | int8 | 16.8 µJ (11.2-22.4) |" in markdown(
        [{"board": "netduinoplus2", "scheme": "int8", "energy": e}])
    h = _energy(b, [14227] * 4, 2)
    assert h["uj_range"] == e["uj_range"] and h["uj_per_episode"] == pytest.approx(2 * e["uj"])


def test_the_esp32c3_estimate_is_cycles_times_its_modem_sleep_figures():
    """ESP32-C3-MINI-1 datasheet v2.2 Table 6-6: 23 mA at 160 MHz, CPU running, 3.3 V."""
    e = energy(get_board("esp32c3"), 100_000)
    # by hand: 100,000 cycles / 160 MHz = 625 µs at 3.3 V x 23 mA (75.9 mW) = 47.44 µJ
    assert e["uj"] == pytest.approx(625e-6 * 3.3 * 23e-3 * 1e6)
    assert e["uj"] == pytest.approx(47.4375) and "uj_range" not in e
    assert "Table 6-6" in e["source"] and label(e) == "47.4 µJ (estimate)"


def test_bench_prints_the_range_beside_the_estimate(capsys):
    e = energy(get_board("netduinoplus2"), 14227)
    energy_table([("netduinoplus2", "int8", e), ("atmega328p", "int8",
                                                  energy(get_board("atmega328p"), 66475))])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "16.8 µJ (11.2-22.4)" in text and "216.0 µJ" in text and "216.0 µJ (" not in text


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
    ("atmega328p", "[energy]\nsupply_v = 5.0\nrun_ua_per_mhz = 650\nmode = \"x\"\nsource = \"y\"\n"
     "cpi_range = [1.0, 2.0]\n", "'cpi_range' is for boards that count instructions"),
    ("microbit", "[energy]\nsupply_v = 3.0\nrun_ua_per_mhz = 200\nmode = \"x\"\nsource = \"y\"\n"
     "cpi = 2.5\ncpi_note = \"z\"\ncpi_range = [1.0, 2.0]\n", r"low <= cpi \(2.5\) <= high"),
    ("microbit", "[energy]\nsupply_v = 3.0\nrun_ua_per_mhz = 200\nmode = \"x\"\nsource = \"y\"\n"
     "cpi = 1.5\ncpi_note = \"z\"\ncpi_range = [1.0]\n", r"must be \[low, high\]"),
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
