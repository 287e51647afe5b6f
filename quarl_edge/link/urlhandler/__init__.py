"""pyserial URL handlers of quarl-edge (pyserial imports `<package>.protocol_<scheme>` for
`<scheme>://` URLs; link/runner.py adds this package to serial.protocol_handler_packages)."""
