/* See lstm_int8.h. */
#include <stdint.h>
#include <string.h>

#include "../requant.h"
#include "lstm_int8.h"

#define QE_S16_MIN (-32768)
#define QE_S16_MAX 32767

static int16_t sat16(int32_t v)
{
    return (int16_t)((v < QE_S16_MIN) ? QE_S16_MIN : (v > QE_S16_MAX) ? QE_S16_MAX : v);
}

/* v = (x * multiplier + round) >> shift: the scaling both table functions start with */
static int32_t table_input(int32_t multiplier, int32_t shift, int16_t x)
{
    const int32_t round = (shift > 0) ? ((int32_t)1 << (shift - 1)) : 0;
    return ((int32_t)x * multiplier + round) >> shift;
}

int16_t qe_lstm_sigmoid_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift,
                            int16_t x)
{
    const int32_t v = table_input(multiplier, shift, x);
    const uint32_t mag = (uint32_t)((v < 0) ? -v : v);
    const uint32_t idx = mag >> 9;          /* 3x at Q3.12 over 2^9: x in steps of 1/24 */
    uint32_t r;
    if (idx >= 255u) {
        r = (uint32_t)0x7FFF << 10;
    } else {
        const uint32_t lo = table[idx], hi = table[idx + 1u];
        r = (lo << 9) + (mag & 0x1FFu) * (hi - lo);
    }
    /* 1 - sigmoid(|v|) for negative v, rounded back to Q0.15 */
    r = (v >= 0) ? (r + (1u << 9)) : (((uint32_t)1 << 25) - r + (1u << 9) - 1u);
    return (int16_t)(r >> 10);
}

int16_t qe_lstm_tanh_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift,
                         int16_t x)
{
    /* tanh(x) = 2 sigmoid(2x) - 1: the same table, indexed one bit finer */
    const int32_t v = table_input(multiplier, shift, x);
    const uint32_t mag = (uint32_t)((v < 0) ? -v : v);
    const uint32_t idx = mag >> 8;          /* sigmoid(2x): one bit finer */
    int32_t r;
    if (idx >= 255u) {
        r = (int32_t)((uint32_t)0xFFFF << 8);
    } else {
        const uint32_t lo = table[idx], hi = table[idx + 1u];
        r = (int32_t)((lo << 8) + (mag & 0xFFu) * (hi - lo));
    }
    r = (v >= 0) ? (r - ((int32_t)1 << 23) + ((int32_t)1 << 7))
                 : (-r + ((int32_t)1 << 23) + ((int32_t)1 << 7) - 1);
    return (int16_t)(r >> 8);   /* arithmetic shift (requant.h) */
}

/* one FC output of a gate: int8 vector . int8 weight row, int32 accumulator, to Q3.12 */
static int16_t gate_fc(const int8_t *v, int32_t v_offset, const QE_FLASH int8_t *w, int32_t w_offset,
                       uint32_t depth, int32_t bias, int32_t multiplier, int32_t shift)
{
    int32_t acc = 0;
    uint32_t d;
    for (d = 0; d < depth; ++d) {
        acc += ((int32_t)w[d] + w_offset) * ((int32_t)v[d] + v_offset);
    }
    acc += bias;
    return (int16_t)qe_requantize_output(acc, multiplier, shift, 0, QE_S16_MIN, QE_S16_MAX);
}

/* a gate's pre-activation for all units: sat16(input FC + recurrent FC) */
static void gate_preactivation(const qe_lstm_s8_params_t *p, const qe_lstm_s8_gate_t *g,
                               const int8_t *x, const int8_t *h, int16_t *out)
{
    const uint32_t n_in = p->input_size, units = p->units;
    uint32_t u;
    for (u = 0; u < units; ++u) {
        const int32_t bias = (g->bias != QE_FLASH_NULL) ? g->bias[u] : 0;
        const int16_t a = gate_fc(x, p->input_offset, g->input_weights + u * n_in,
                                  g->input_weights_offset, n_in, bias, g->input_multiplier,
                                  g->input_shift);
        const int16_t b = gate_fc(h, p->hidden_offset, g->recurrent_weights + u * units,
                                  g->recurrent_weights_offset, units, 0, g->recurrent_multiplier,
                                  g->recurrent_shift);
        out[u] = sat16((int32_t)a + (int32_t)b);
    }
}

static int16_t mul16(int16_t a, int16_t b, const qe_lstm_s8_scale_t *s)
{
    return (int16_t)qe_requantize_output((int32_t)a * (int32_t)b, s->multiplier, s->shift, 0,
                                         QE_S16_MIN, QE_S16_MAX);
}

void qe_lstm_s8(const qe_lstm_s8_params_t *p, const int8_t *input, int8_t *output,
                int8_t *hidden_state, int16_t *cell_state, int16_t *scratch)
{
    const uint32_t n_b = p->batches, n_t = p->time_steps, n_in = p->input_size, units = p->units;
    const QE_FLASH uint16_t *table = p->sigmoid_table;
    int16_t *gi = scratch, *gf = scratch + units, *gg = scratch + 2u * units;
    int16_t *go = scratch + 3u * units;
    uint32_t b, t, u;
    for (b = 0; b < n_b; ++b) {
        int8_t *h = hidden_state + b * units;
        int16_t *c = cell_state + b * units;
        for (t = 0; t < n_t; ++t) {
            const uint32_t row = p->time_major ? t * n_b + b : b * n_t + t;
            const int8_t *x = input + row * n_in;
            gate_preactivation(p, &p->gate[QE_LSTM_S8_GATE_I], x, h, gi);
            gate_preactivation(p, &p->gate[QE_LSTM_S8_GATE_F], x, h, gf);
            gate_preactivation(p, &p->gate[QE_LSTM_S8_GATE_G], x, h, gg);
            gate_preactivation(p, &p->gate[QE_LSTM_S8_GATE_O], x, h, go);
            for (u = 0; u < units; ++u) {
                int16_t v;
                const int16_t i_u = qe_lstm_sigmoid_s16(table, 3, 0, gi[u]);
                const int16_t f_u = qe_lstm_sigmoid_s16(table, 3, 0, gf[u]);
                const int16_t g_u = qe_lstm_tanh_s16(table, 3, 0, gg[u]);
                v = sat16((int32_t)mul16(f_u, c[u], &p->forget_cell)
                          + (int32_t)mul16(i_u, g_u, &p->input_cell));
                if (p->cell_clip_on) {
                    const int16_t lo = (int16_t)-p->cell_clip;
                    v = (v < p->cell_clip) ? v : p->cell_clip;     /* std::min(clip, v) */
                    v = (v < lo) ? lo : v;                         /* std::max(., -clip) */
                }
                c[u] = v;
            }
            for (u = 0; u < units; ++u) {
                const int16_t o_u = qe_lstm_sigmoid_s16(table, 3, 0, go[u]);
                const int16_t tc = qe_lstm_tanh_s16(table, p->cell_tanh_multiplier,
                                                    p->cell_tanh_shift, c[u]);
                h[u] = (int8_t)qe_requantize_output((int32_t)tc * (int32_t)o_u,
                                                    p->hidden.multiplier, p->hidden.shift,
                                                    p->hidden_zero_point, -128, 127);
            }
            memcpy(output + row * units, h, units * sizeof(int8_t));
        }
    }
}
