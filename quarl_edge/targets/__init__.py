"""Stage 4, targets: boards and what makes firmware run on them.

boards.py is the registry (one TOML file per board in boards/), build.py turns a .tflite into a
firmware ELF for a board (the generated C of quarl_edge.converters plus firmware/), launch.py
starts it (host behind a pty, QEMU, simavr, a flashed real board, the linux agent, an SSH
deploy), flash.py and flash_tools.py flash real boards with their vendor tools, ports.py finds
attached boards by USB VID:PID."""
