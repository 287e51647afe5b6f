"""A user's own board files: --boards-dir folders (add_board_dir), $QUARL_EDGE_BOARDS and
${XDG_CONFIG_HOME:-~/.config}/quarl-edge/boards/ are searched before the shipped boards/, a
user file overrides a shipped board of the same id, and an explicit directory is that
directory alone."""
import os

import pytest

from quarl_edge.core.errors import BoardError
from quarl_edge.core.resources import boards_dir
from quarl_edge.targets import boards
from quarl_edge.targets.boards import add_board_dir, all_boards, board_dirs, get_board
from test_boards import GOOD


def board(folder, bid, name="A board"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{bid}.toml").write_text(GOOD.format(id=bid).replace('"A board"', f'"{name}"'))
    return folder / f"{bid}.toml"


@pytest.fixture
def user(tmp_path, monkeypatch):
    """No added folders, no $QUARL_EDGE_BOARDS, an XDG config home of the test's own."""
    monkeypatch.setattr(boards, "_added_dirs", [])
    monkeypatch.delenv("QUARL_EDGE_BOARDS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "quarl-edge" / "boards"


def test_the_search_path_without_user_folders(user):
    assert board_dirs() == [user, boards_dir()]      # the XDG folder need not exist
    assert set(all_boards()) == {p.stem for p in boards_dir().glob("*.toml")}


def test_a_board_in_the_config_folder_is_found_and_overrides_a_shipped_one(user):
    board(user, "mine")
    board(user, "host", name="My host")
    found = all_boards()
    assert found["mine"].path == user / "mine.toml"
    assert found["host"].name == "My host" and get_board("host").path == user / "host.toml"
    assert "mps2-an386" in found                       # the other shipped boards stay
    assert list(found) == sorted(found)


def test_env_folders_come_before_the_config_folder_in_their_order(user, tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    board(user, "x", name="from config")
    board(b, "x", name="from b")
    board(a, "y", name="from a")
    board(b, "y", name="from b")
    monkeypatch.setenv("QUARL_EDGE_BOARDS", os.pathsep.join([str(a), str(b)]))
    assert board_dirs()[:3] == [a, b, user]
    assert get_board("x").name == "from b" and get_board("y").name == "from a"


def test_added_folders_come_first_the_last_added_first(user, tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    board(a, "x", name="from a")
    board(b, "x", name="from b")
    monkeypatch.setenv("QUARL_EDGE_BOARDS", str(tmp_path / "a"))
    add_board_dir(b)
    assert get_board("x").name == "from b"
    add_board_dir(a)
    assert board_dirs()[:2] == [a, b] and get_board("x").name == "from a"


def test_an_explicit_directory_is_that_directory_alone(user, tmp_path):
    board(user, "mine")
    only = tmp_path / "only"
    board(only, "alpha")
    assert set(all_boards(only)) == {"alpha"}
    with pytest.raises(BoardError, match=f"unknown board 'host'; known boards: alpha "
                                         rf"\(searched {only};"):
        get_board("host", only)


def test_an_unknown_board_lists_the_folders_searched(user):
    with pytest.raises(BoardError) as e:
        get_board("nonesuch")
    msg = str(e.value)
    assert "unknown board 'nonesuch'" in msg and "mps2-an386" in msg
    assert f"searched {user}, {boards_dir()}" in msg and "<id>.toml" in msg
    assert "\n" not in msg                              # the CLI prints one line


def test_folders_that_are_not_directories_are_refused(user, tmp_path, monkeypatch):
    with pytest.raises(BoardError, match="is not a directory"):
        add_board_dir(tmp_path / "nope")
    monkeypatch.setenv("QUARL_EDGE_BOARDS", str(tmp_path / "nope"))
    with pytest.raises(BoardError, match=r"\$QUARL_EDGE_BOARDS names .*nope, which is not a directory"):
        all_boards()


def test_a_broken_user_file_is_named(user):
    board(user, "mine").write_text('id = "mine"\n')
    with pytest.raises(BoardError, match="mine.toml: missing key"):
        get_board("mine")
