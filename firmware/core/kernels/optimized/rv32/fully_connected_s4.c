/* FULLY_CONNECTED with int4 weights, optimized variant "rv32" (see ../README.md): the cortex-m0
 * variant's file, plain C for 32-bit cores without SIMD multiply-accumulate; the generator's
 * lowering is cortex-m0's (the row-pair layout of ../../fully_connected_s4.h). */
#include "../cortex-m0/fully_connected_s4.c"
