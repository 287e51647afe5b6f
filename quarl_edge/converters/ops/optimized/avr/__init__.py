"""The avr variant's lowerings (firmware/core/kernels/optimized/avr/): FULLY_CONNECTED as a chunked
stream of 16-bit sums."""
