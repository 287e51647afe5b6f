/* MAX_POOL_2D, see pooling.h. Also holds qe_pool_window, shared with average_pool.c. */
#include <stdint.h>

#include "pooling.h"

void qe_pool_window(const qe_window_t *g, int32_t oy, int32_t ox, qe_pool_window_t *w)
{
    w->iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
    w->ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
    w->y_start = (w->iy0 < 0) ? -w->iy0 : 0;
    w->x_start = (w->ix0 < 0) ? -w->ix0 : 0;
    w->y_end = (int32_t)g->in_h - w->iy0;
    if (w->y_end > (int32_t)g->k_h) {
        w->y_end = (int32_t)g->k_h;
    }
    w->x_end = (int32_t)g->in_w - w->ix0;
    if (w->x_end > (int32_t)g->k_w) {
        w->x_end = (int32_t)g->k_w;
    }
}

void qe_max_pool_s8(const qe_pool_s8_params_t *p, const int8_t *input, int8_t *output)
{
    const qe_window_t *g = &p->g;
    int32_t b, oy, ox, c, fy, fx;
    qe_pool_window_t w;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            for (ox = 0; ox < g->out_w; ++ox) {
                qe_pool_window(g, oy, ox, &w);
                for (c = 0; c < g->in_c; ++c) {
                    int32_t mx = -128;
                    for (fy = w.y_start; fy < w.y_end; ++fy) {
                        for (fx = w.x_start; fx < w.x_end; ++fx) {
                            const int32_t v = input[(((uint32_t)b * g->in_h + (uint32_t)(w.iy0 + fy))
                                                     * g->in_w + (uint32_t)(w.ix0 + fx)) * g->in_c
                                                    + (uint32_t)c];
                            if (v > mx) {
                                mx = v;
                            }
                        }
                    }
                    if (mx < p->activation_min) {
                        mx = p->activation_min;
                    }
                    if (mx > p->activation_max) {
                        mx = p->activation_max;
                    }
                    output[(((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w + (uint32_t)ox)
                           * g->out_c + (uint32_t)c] = (int8_t)mx;
                }
            }
        }
    }
}

void qe_max_pool_f32(const qe_pool_f32_params_t *p, const float *input, float *output)
{
    const qe_window_t *g = &p->g;
    int32_t b, oy, ox, c, fy, fx;
    qe_pool_window_t w;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            for (ox = 0; ox < g->out_w; ++ox) {
                qe_pool_window(g, oy, ox, &w);
                for (c = 0; c < g->in_c; ++c) {
                    float mx = -3.40282347e+38f;   /* std::numeric_limits<float>::lowest() */
                    for (fy = w.y_start; fy < w.y_end; ++fy) {
                        for (fx = w.x_start; fx < w.x_end; ++fx) {
                            const float v = input[(((uint32_t)b * g->in_h + (uint32_t)(w.iy0 + fy))
                                                   * g->in_w + (uint32_t)(w.ix0 + fx)) * g->in_c
                                                  + (uint32_t)c];
                            if (mx < v) {          /* std::max(mx, v): NaN inputs are skipped */
                                mx = v;
                            }
                        }
                    }
                    if (mx < p->activation_min) {
                        mx = p->activation_min;
                    }
                    if (p->activation_max < mx) {
                        mx = p->activation_max;
                    }
                    output[(((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w + (uint32_t)ox)
                           * g->out_c + (uint32_t)c] = mx;
                }
            }
        }
    }
}
