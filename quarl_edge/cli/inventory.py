"""The commands that list what is here: boards (with their tools) and serial ports, and the
emulation of a real board. Each command's options, then its handler: it calls the API (`qe`)
and prints the result."""
from __future__ import annotations

import time

from .options import command, json_option
from .output import as_json, emit_json, kib, mhz, note, table


def add_commands(sub) -> None:
    """boards, ports and emulate, in --help's order."""
    _add_boards(sub)
    _add_ports(sub)
    _add_emulate(sub)


# -------------------------------------------------------------------------------- boards
def _add_boards(sub) -> None:
    """boards: every board, its memory, clock and tools."""
    s = command(sub, "boards", "list the boards (shipped and the user's board files), their "
                               "memory, clocks and whether their tools are installed",
                "quarl-edge boards", cmd_boards)
    json_option(s)


def cmd_boards(a, qe):
    """boards: one row per board, with its toolchain and flasher."""
    boards = qe.boards()
    if a.json:
        return emit_json({b.id: as_json(b) for b in boards})
    rows = []
    for b in boards:
        toolchain = ("installed" if not b.missing_build else
                     "; ".join(f"missing {m['what']} ({m['install']})" for m in b.missing_build))
        rows.append([b.id, b.kind, b.cpu, mhz(b.clock_hz), kib(b.flash_bytes or None),
                     kib(b.ram_bytes or None), b.cost_unit, toolchain, b.flasher_text])
    table(["board", "kind", "cpu", "clock", "flash", "RAM", "unit", "toolchain", "flasher"], rows,
          right=("clock", "flash", "RAM"))


# --------------------------------------------------------------------------------- ports
def _add_ports(sub) -> None:
    """ports: the serial ports, and which of our boards each is."""
    s = command(sub, "ports", "list attached serial ports and recognise our boards by USB id",
                "quarl-edge ports", cmd_ports)
    json_option(s)


def cmd_ports(a, qe):
    """ports: one row per serial port and the boards it may be."""
    ports = qe.ports()
    if a.json:
        return emit_json([{"device": p.device, "usb": p.usb_id, "description": p.description,
                           "serial_number": p.serial_number, "boards": p.boards} for p in ports])
    if not ports:
        print("no serial ports found (a board over USB shows up as /dev/ttyACM* or /dev/ttyUSB*; "
              "on Linux your user needs the 'dialout' group)")
        return
    table(["device", "usb", "board", "description"],
          [[p.device, p.usb_id, ", ".join(p.boards) or "?", p.description] for p in ports])


# ------------------------------------------------------------------------------- emulate
def _add_emulate(sub) -> None:
    """emulate: a real board in an emulator, reached by --port as the real one."""
    s = command(sub, "emulate", "emulate a real board as it comes (its boot loader waiting, or "
                                "its debug probe's GDB server) until Ctrl-C; the first line "
                                "printed is its port",
                "quarl-edge emulate arduino-uno", cmd_emulate)
    s.add_argument("board", metavar="BOARD",
                   help="arduino-uno, or a QEMU board (netduinoplus2, mps2-an386, ...)")


def cmd_emulate(a, qe):
    """emulate: print the port, keep the emulator up until Ctrl-C / SIGTERM, stop it."""
    with qe.emulate(a.board) as em:
        for line in em.lines:
            print(line, flush=True)
        for n in em.notes:
            note(n)
        try:
            while em.alive():
                time.sleep(0.2)
        except KeyboardInterrupt:        # Ctrl-C and SIGTERM (cli.main's handler): a clean stop
            return
        why = "; ".join(ln.strip() for ln in em.describe_exit().splitlines() if ln.strip())
        raise qe.BoardError(f"the emulation of {a.board} stopped: {why}")
