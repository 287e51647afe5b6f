"""The cortex-m-dsp variant's lowerings (firmware/core/kernels/optimized/cortex-m-dsp/): SMLAD on
packed int16 pairs, for FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D."""
