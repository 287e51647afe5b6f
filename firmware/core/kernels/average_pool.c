/* AVERAGE_POOL_2D, see pooling.h. */
#include <stdint.h>

#include "pooling.h"

void qe_average_pool_s8(const qe_pool_s8_params_t *p, const int8_t *input, int8_t *output)
{
    const qe_window_t *g = &p->g;
    int32_t b, oy, ox, c, fy, fx;
    qe_pool_window_t w;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            for (ox = 0; ox < g->out_w; ++ox) {
                int32_t count;
                qe_pool_window(g, oy, ox, &w);
                count = (w.y_end - w.y_start) * (w.x_end - w.x_start);
                for (c = 0; c < g->in_c; ++c) {
                    int32_t acc = 0;
                    for (fy = w.y_start; fy < w.y_end; ++fy) {
                        for (fx = w.x_start; fx < w.x_end; ++fx) {
                            acc += input[(((uint32_t)b * g->in_h + (uint32_t)(w.iy0 + fy))
                                          * g->in_w + (uint32_t)(w.ix0 + fx)) * g->in_c
                                         + (uint32_t)c];
                        }
                    }
                    /* the generator guarantees count > 0 (every window overlaps the image) */
                    acc = (acc > 0) ? (acc + count / 2) / count : (acc - count / 2) / count;
                    if (acc < p->activation_min) {
                        acc = p->activation_min;
                    }
                    if (acc > p->activation_max) {
                        acc = p->activation_max;
                    }
                    output[(((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w + (uint32_t)ox)
                           * g->out_c + (uint32_t)c] = (int8_t)acc;
                }
            }
        }
    }
}

void qe_average_pool_f32(const qe_pool_f32_params_t *p, const float *input, float *output)
{
    const qe_window_t *g = &p->g;
    int32_t b, oy, ox, c, fy, fx;
    qe_pool_window_t w;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            for (ox = 0; ox < g->out_w; ++ox) {
                float count;
                qe_pool_window(g, oy, ox, &w);
                count = (float)((w.y_end - w.y_start) * (w.x_end - w.x_start));
                for (c = 0; c < g->in_c; ++c) {
                    float total = 0.0f;
                    float avg;
                    for (fy = w.y_start; fy < w.y_end; ++fy) {
                        for (fx = w.x_start; fx < w.x_end; ++fx) {
                            total += input[(((uint32_t)b * g->in_h + (uint32_t)(w.iy0 + fy))
                                            * g->in_w + (uint32_t)(w.ix0 + fx)) * g->in_c
                                           + (uint32_t)c];
                        }
                    }
                    avg = total / count;
                    if (avg < p->activation_min) {
                        avg = p->activation_min;
                    }
                    if (p->activation_max < avg) {
                        avg = p->activation_max;
                    }
                    output[(((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w + (uint32_t)ox)
                           * g->out_c + (uint32_t)c] = avg;
                }
            }
        }
    }
}
