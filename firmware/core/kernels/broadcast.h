/* Element-wise binary ops (ADD, MUL) with numpy/TFLite broadcasting, up to 6 dimensions.
 *
 * The generator right-aligns both input shapes to the output's rank and gives, per output
 * dimension, each input's element stride (0 where that input has size 1 and is broadcast).
 * ndims == 0 means both inputs have the output's shape (a plain element-wise loop).
 * Inputs are RAM pointers: a constant operand is emitted as an ordinary const array (RAM on
 * AVR), not QE_FLASH, so one kernel serves arena and constant operands. */
#ifndef QE_BROADCAST_H
#define QE_BROADCAST_H

#include <stdint.h>

#define QE_BROADCAST_MAX_DIMS 6

typedef struct {
    uint32_t size;                              /* output elements */
    uint8_t ndims;                              /* 0: no broadcasting */
    uint16_t dims[QE_BROADCAST_MAX_DIMS];       /* output shape */
    uint32_t stride1[QE_BROADCAST_MAX_DIMS];    /* input 1 element strides (0: broadcast) */
    uint32_t stride2[QE_BROADCAST_MAX_DIMS];
} qe_broadcast_t;

/* Iterator state: the output index and both input offsets. */
typedef struct {
    uint16_t index[QE_BROADCAST_MAX_DIMS];
    uint32_t off1;
    uint32_t off2;
} qe_broadcast_it_t;

void qe_broadcast_begin(qe_broadcast_it_t *it);
/* Advance to the next output element (row-major), updating off1/off2. */
void qe_broadcast_next(const qe_broadcast_t *b, qe_broadcast_it_t *it);

#endif
