"""The avr variant's lowerings (firmware/core/kernels/optimized/avr/): FULLY_CONNECTED as a chunked
stream of 16-bit sums, int8 weights (fully_connected.py) or int4 (fully_connected_s4.py)."""
