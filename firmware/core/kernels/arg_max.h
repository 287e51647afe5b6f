/* ARG_MAX along one axis, as TF Lite Micro's reference_ops::ArgMinMax with std::greater: the
 * first index of the largest value wins (ties go to the lowest index; float NaNs never win
 * unless they come first). The input is viewed as [outer][axis][inner]; int32 output. */
#ifndef QE_ARG_MAX_H
#define QE_ARG_MAX_H

#include <stdint.h>

typedef struct {
    uint32_t outer;
    uint32_t axis;
    uint32_t inner;
} qe_arg_max_params_t;

void qe_arg_max_s8(const qe_arg_max_params_t *p, const int8_t *input, int32_t *output);
void qe_arg_max_f32(const qe_arg_max_params_t *p, const float *input, int32_t *output);

#endif
