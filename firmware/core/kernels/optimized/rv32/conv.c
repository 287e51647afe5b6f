/* CONV_2D, optimized variant "rv32" (see ../README.md): the cortex-m0 variant's file, whose
 * paths without __ARM_ARCH_6M__ serve 32-bit cores without SIMD multiply-accumulate: on RISC-V
 * with M (rv32imc/rv32imac) its asm walk of the widened image's rows, two channel groups a pass
 * (two_groups, one_group); the generator's lowering is cortex-m0's (the rows filter of
 * ../../conv.h, qe_conv_s8_rows). */
#include "../cortex-m0/conv.c"
