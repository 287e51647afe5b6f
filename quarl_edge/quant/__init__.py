"""Stage 2, quant: a run's network as .tflite models, one per scheme (fp32, fp16, int8,
dyn-int8, int16x8, QAT, the tie remedies), with the real TFLite converter.

Entry points: `quarl_edge.quant.schemes.quantize` (RUN/models/<scheme>.tflite) and
`quarl_edge.quant.nbit.nbit_sweep` (QuaRL's n-bit sweep). calibration.py collects the
observations the integer schemes are calibrated on; remedies.py holds the int8 tie remedies
for argmax heads."""
