/* See lstm.h. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "lstm.h"

/* TFLM's ActivationFunctionWithMinMax for activation NONE: std::min(std::max(x, lowest), max)
 * (NaN passes through). */
static float clamp_none(float x)
{
    x = (x < -FLT_MAX) ? -FLT_MAX : x;
    return (FLT_MAX < x) ? FLT_MAX : x;
}

/* one gate before its activation: fc(x, W_x, bias) + fc(h, W_h, no bias) */
static void gate_preactivation(const float *x, uint32_t n_in, const float *w_x, const float *bias,
                               const float *h, uint32_t units, const float *w_h, float *out)
{
    uint32_t u, d;
    for (u = 0; u < units; ++u) {
        float a = 0.0f, b = 0.0f;
        const float *wx = w_x + u * n_in;
        const float *wh = w_h + u * units;
        for (d = 0; d < n_in; ++d) {
            a += x[d] * wx[d];
        }
        a = clamp_none(a + bias[u]);
        for (d = 0; d < units; ++d) {
            b += h[d] * wh[d];
        }
        b = clamp_none(b + 0.0f);   /* TFLM adds a bias of 0.0f when there is none (-0 -> +0) */
        out[u] = a + b;
    }
}

void qe_lstm_f32(const qe_lstm_f32_params_t *p, qe_f32_fn tanh_fn, qe_f32_fn exp_fn,
                 const float *input, float *output, float *hidden_state, float *cell_state,
                 float *scratch)
{
    const uint32_t n_b = p->batches, n_t = p->time_steps, n_in = p->input_size, units = p->units;
    float *gi = scratch, *gf = scratch + units, *gc = scratch + 2u * units, *go = scratch + 3u * units;
    uint32_t b, t, u;
    for (b = 0; b < n_b; ++b) {
        float *h = hidden_state + b * units;
        float *c = cell_state + b * units;
        for (t = 0; t < n_t; ++t) {
            const uint32_t row = p->time_major ? t * n_b + b : b * n_t + t;
            const float *x = input + row * n_in;
            gate_preactivation(x, n_in, p->input_weights[QE_LSTM_GATE_I], p->bias[QE_LSTM_GATE_I],
                               h, units, p->recurrent_weights[QE_LSTM_GATE_I], gi);
            gate_preactivation(x, n_in, p->input_weights[QE_LSTM_GATE_F], p->bias[QE_LSTM_GATE_F],
                               h, units, p->recurrent_weights[QE_LSTM_GATE_F], gf);
            gate_preactivation(x, n_in, p->input_weights[QE_LSTM_GATE_C], p->bias[QE_LSTM_GATE_C],
                               h, units, p->recurrent_weights[QE_LSTM_GATE_C], gc);
            gate_preactivation(x, n_in, p->input_weights[QE_LSTM_GATE_O], p->bias[QE_LSTM_GATE_O],
                               h, units, p->recurrent_weights[QE_LSTM_GATE_O], go);
            qe_logistic_f32(units, exp_fn, gi, gi);
            qe_logistic_f32(units, exp_fn, gf, gf);
            qe_tanh_f32(units, tanh_fn, gc, gc);
            qe_logistic_f32(units, exp_fn, go, go);
            for (u = 0; u < units; ++u) {
                const float kept = clamp_none(gf[u] * c[u]);
                const float added = clamp_none(gi[u] * gc[u]);
                float v = kept + added;
                if (p->cell_clip > 0.0f) {
                    const float lo = -p->cell_clip;
                    v = (v < p->cell_clip) ? v : p->cell_clip;   /* std::min(clip, v) */
                    v = (v < lo) ? lo : v;                       /* std::max(., -clip) */
                }
                c[u] = v;
            }
            qe_tanh_f32(units, tanh_fn, c, gi);                  /* gi: free again */
            for (u = 0; u < units; ++u) {
                h[u] = clamp_none(gi[u] * go[u]);
            }
            memcpy(output + row * units, h, units * sizeof(float));
        }
    }
}
