"""unix://PATH: a Unix-domain stream socket as a pyserial port (an emulated board's serial port:
targets/qemu.py's Qemu). pyserial's socket:// is TCP only; everything but opening is its
socket port's (non-blocking socket, select() waits), so reads, writes and timeouts behave alike.

A byte written to a loopback TCP socket goes through the whole TCP stack, acknowledgements
included, in the writer's thread; an emulated UART writes each byte on its own, so QEMU's vCPU
thread spent about a third of its time per CartPole step there (benchmarks/hil_speed.py)."""
from __future__ import annotations

import socket

from serial.serialutil import SerialException
from serial.urlhandler import protocol_socket

SCHEME = "unix://"


class Serial(protocol_socket.Serial):
    def open(self):
        self.logger = None
        if self._port is None:
            raise SerialException("Port must be configured before it can be used.")
        if self.is_open:
            raise SerialException("Port is already open.")
        path = self.from_url(self.portstr)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(protocol_socket.POLL_TIMEOUT)
            sock.connect(path)
        except OSError as e:
            sock.close()
            raise SerialException(f"Could not open port {self.portstr}: {e}") from None
        sock.setblocking(False)
        self._socket = sock
        self.is_open = True
        self.reset_input_buffer()
        self.reset_output_buffer()

    def from_url(self, url):
        if not str(url).startswith(SCHEME) or len(str(url)) == len(SCHEME):
            raise SerialException(f"expected unix://PATH (a Unix-domain socket), not {url!r}")
        return str(url)[len(SCHEME):]
