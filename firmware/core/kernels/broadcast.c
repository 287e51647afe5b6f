/* See broadcast.h. */
#include <stdint.h>

#include "broadcast.h"

void qe_broadcast_begin(qe_broadcast_it_t *it)
{
    int i;
    for (i = 0; i < QE_BROADCAST_MAX_DIMS; ++i) {
        it->index[i] = 0;
    }
    it->off1 = 0;
    it->off2 = 0;
}

void qe_broadcast_next(const qe_broadcast_t *b, qe_broadcast_it_t *it)
{
    int d;
    if (b->ndims == 0) {
        ++it->off1;
        ++it->off2;
        return;
    }
    for (d = (int)b->ndims - 1; d >= 0; --d) {
        ++it->index[d];
        it->off1 += b->stride1[d];
        it->off2 += b->stride2[d];
        if (it->index[d] < b->dims[d]) {
            return;
        }
        it->off1 -= b->stride1[d] * b->dims[d];
        it->off2 -= b->stride2[d] * b->dims[d];
        it->index[d] = 0;
    }
}
