"""The argument parser's parts that every command group uses: the parser and help classes,
integer argument types, a subcommand with its description and example, and the options several
commands share (--board/--board-file, --json, --flasher/--drive, --port)."""
from __future__ import annotations

import argparse
import sys

from ..core.names import SCHEMES
from .output import EXIT_USER_ERROR


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line on stderr like every other user error
    (exit 2): what is wrong, and where the usage is."""

    def error(self, message):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help with each option's default (when it has a real one) and the examples kept as
    written."""

    def _get_help_string(self, action):
        if action.default in (None, False, argparse.SUPPRESS) or action.default == []:
            return action.help
        return super()._get_help_string(action)


# ------------------------------------------------------------------------ argument types
def int_in(low: int, high: int | None = None):
    """An argparse type: an integer in low..high (the API checks the same: it is public)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            want = f"in {low}..{high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be an integer {want}, got {text!r}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


positive_int = int_in(1)         # counts: episodes, steps, inputs, workers
nonnegative_int = int_in(0)      # seeds (Gymnasium's are >= 0)


# ----------------------------------------------------------------- commands and options
def command(sub, name: str, help_: str, example: str, fn):
    """The subcommand `name` of `sub`: its help line, which is also its description, its
    example, and `fn`, the handler main calls with the parsed arguments and quarl_edge."""
    s = sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".",
                       epilog="example:\n  " + example.strip().replace("\n", "\n  "),
                       formatter_class=HelpFormatter)
    s.set_defaults(fn=fn)
    return s


def board_option(s, default: str = "host") -> None:
    """--board ID or --board-file PATH, one of them."""
    g = s.add_mutually_exclusive_group()
    g.add_argument("--board", default=default, metavar="BOARD",
                   help="board id: a file boards/BOARD.toml, shipped or the user's "
                        "(`quarl-edge boards` lists them); an id, never a path")
    g.add_argument("--board-file", default=None, metavar="PATH",
                   help="a board file elsewhere (PATH/ID.toml) instead of --board: a board file "
                        "names the compiler that runs, so a path is taken only here")


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option, kept working: it stores into the new option's dest and says
    on one stderr line that it is deprecated and which option to use (docs/layout.md,
    Vocabulary). Hidden from --help."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        self.new = new
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"quarl-edge: warning: {option_string} is deprecated; use {self.new}",
              file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def deprecated_alias(s, old: str, new: str, dest: str, **kw) -> None:
    """`old` as a hidden, deprecated spelling of the option `new` (whose dest is `dest`); a
    flag's alias (new is store_true) passes nargs=0, const=True."""
    s.add_argument(old, dest=dest, action=DeprecatedAlias, new=new, help=argparse.SUPPRESS,
                   default=argparse.SUPPRESS, **kw)


def scheme_option(s, default: str | None = "int8", help_: str = "",
                  choices: tuple | None = SCHEMES) -> None:
    """--scheme SCHEME (hil, build, flash, export), and --model SCHEME, its deprecated alias."""
    s.add_argument("--scheme", default=default, choices=choices, metavar="SCHEME",
                   help=help_ or f"the scheme of the run's model (RUN/models/SCHEME.tflite), of: "
                                 f"{', '.join(SCHEMES)}")
    deprecated_alias(s, "--model", "--scheme", "scheme", choices=choices, metavar="SCHEME")


def json_option(s) -> None:
    """--json: the API's result as JSON on stdout."""
    s.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout (the Python API's dataclass), "
                        "nothing else")


def flash_options(s) -> None:
    """--flasher and --drive: how a real board is flashed."""
    s.add_argument("--flasher", default=None, metavar="TOOL",
                   help="real boards: the flash tool to use, one of the board's [flash] tools "
                        "(default: the first one installed)")
    s.add_argument("--drive", default=None, metavar="PATH",
                   help="real boards flashed by copying (DAPLink, UF2): the board's mounted USB "
                        "drive (default: found by its volume label)")


def port_option(s) -> None:
    """--port: a board that already runs the model."""
    s.add_argument("--port", default=None,
                   help="the serial port (a device or a pyserial URL) of a board that already "
                        "runs this model (default: build, start or flash the board; a real "
                        "board's port is found by its USB VID:PID)")

