"""Stage 5, link: the serial protocol between host and board (docs/protocol.md).

protocol.py is its single source (frames, commands, payloads, and the C header
firmware/core/qe_protocol.h generated from it), runner.py the host side (`BoardLink`: one
command, one reply; on framing.py's port and frames), session.py a whole session with a board (build, start, connect,
handshake, stop: `BoardSession`), agent.py the board side in Python for linux boards.
This package's __init__ imports nothing: agent.py runs on a board with only the protocol."""
