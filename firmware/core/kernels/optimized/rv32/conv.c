/* CONV_2D, optimized variant "rv32" (see ../README.md): the cortex-m0 variant's file, whose
 * portable C (the paths taken without __ARM_ARCH_6M__) serves 32-bit cores without SIMD
 * multiply-accumulate; the generator's lowering is cortex-m0's (the rows filter of
 * ../../conv.h, qe_conv_s8_rows). */
#include "../cortex-m0/conv.c"
