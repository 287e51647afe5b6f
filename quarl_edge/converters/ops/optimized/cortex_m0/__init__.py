"""The cortex-m0 variant's lowerings (firmware/core/kernels/optimized/cortex-m0/): FULLY_CONNECTED
as chunked row pairs."""
