"""pyserial URL handlers of quarl-edge (pyserial imports `<package>.protocol_<scheme>` for
`<scheme>://` URLs; link/framing.py adds this package to serial.protocol_handler_packages)."""
