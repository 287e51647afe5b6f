"""Stage 4, targets: boards and what makes firmware run on them.

boards.py is the registry (one TOML file per board in boards/), build.py turns a .tflite into a
firmware ELF for a board (the generated C of quarl_edge.converters plus firmware/), connect.py
says per connect method how a board is started and reached, and launch.py, qemu.py and
simavr.py start it (host behind a pty, QEMU, simavr, a flashed real board, the linux agent, an
SSH deploy), flash.py and flash_tools.py flash real boards with their vendor tools, usb.py and
ports.py find attached boards by USB VID:PID."""
