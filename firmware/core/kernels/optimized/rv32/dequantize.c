/* DEQUANTIZE, optimized variant "rv32" (see ../README.md): the cortex-m0 variant's file, whose
 * portable C (the paths taken without __ARM_ARCH_6M__) serves 32-bit cores without SIMD
 * multiply-accumulate (RISC-V rv32imc/rv32imac). The generator's lowerings are cortex-m0's
 * (converters/ops/optimized/__init__.py), so the weight layouts are the same too. */
#include "../cortex-m0/dequantize.c"
