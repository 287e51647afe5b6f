/* UNIDIRECTIONAL_SEQUENCE_LSTM, int8: int8 input, output and hidden state, int8 weights (per
 * tensor), int32 biases, int16 cell state. Bit-exact with TF Lite Micro's integer LSTM
 * (unidirectional_sequence_lstm.cc -> lstm_eval.h EvalLstm<int8_t, int8_t, int16_t, int32_t>,
 * parameters from lstm_eval_common.cc PrepareGateParametersInteger): the standard LSTM without
 * peephole, projection or layer norm.
 *
 * For each batch row and time step, x the step's int8 input, h (int8) and c (int16) the state:
 *   gate[u] = sat16(fc_x[u] + fc_h[u]) for each gate (i, f, g, o), where
 *     fc_x[u] = clamp16(MBQM(sum_d (W_x[u][d] + w_x_offset) * (x[d] + x_offset) + bias[u],
 *                            m_x, s_x))                    (TFLM's FullyConnected int8 -> int16)
 *     fc_h[u] = clamp16(MBQM(sum_d (W_h[u][d] + w_h_offset) * (h[d] + h_offset), m_h, s_h))
 *   with m, s the QuantizeMultiplier of (double)in_scale * (double)w_scale / 2^-12: every gate's
 *   pre-activation is int16 at scale 2^-12 (Q3.12), whatever the converter's intermediates say;
 *   i, f, o = sigmoid16(gate), g = tanh16(gate) (int16 at scale 2^-15);
 *   c = sat16(mul16(f, c, forget_cell) + mul16(i, g, input_cell)), then if clipping,
 *       max(min(clip, c), -clip) (clip = the cell clip in cell-state steps);
 *   h = clamp8(h_zero_point + MBQM(tanh16_cell(c) * o, m_hidden, s_hidden)), the step's output.
 *   mul16(a, b, p) = clamp16(MBQM(a * b, p.multiplier, p.shift)).
 * MBQM is requant.h's qe_multiply_by_quantized_multiplier (TFLM's default double rounding).
 *
 * sigmoid16 / tanh16 are TFLM's int16 LOGISTIC / TANH (reference_integer_ops::Logistic and
 * ::Tanh): the input is scaled, v = (x * multiplier + round) >> shift (round = 2^(shift-1) when
 * shift > 0), so that v / 2^9 (sigmoid) or v / 2^8 (tanh) indexes a 256-entry uint16 table of
 * sigmoid(i/24), interpolated linearly in the remaining bits; symmetric for negative v. The
 * gates use multiplier 3, shift 0 (Q3.12 input); tanh of the cell state uses the multiplier and
 * shift the generator derives from the cell state's power-of-two scale. The table is passed in
 * (the generator emits it: converters/sigmoid_table_u16.py, measured from TFLM).
 *
 * Rows of a batch are independent, so TFLM's batch-at-once time-major steps and these
 * row-at-a-time steps give the same bits. All gates of a step read the old h. */
#ifndef QE_LSTM_INT8_H
#define QE_LSTM_INT8_H

#include <stdint.h>

#include "../qe_flash.h"

#define QE_LSTM_S8_GATE_I 0
#define QE_LSTM_S8_GATE_F 1
#define QE_LSTM_S8_GATE_G 2
#define QE_LSTM_S8_GATE_O 3

typedef struct {
    const QE_FLASH int8_t *input_weights;      /* [units][input_size] */
    const QE_FLASH int8_t *recurrent_weights;  /* [units][units] */
    const QE_FLASH int32_t *bias;              /* [units], or QE_FLASH_NULL */
    int32_t input_weights_offset;              /* -zero point of input_weights */
    int32_t recurrent_weights_offset;          /* -zero point of recurrent_weights */
    int32_t input_multiplier;                  /* input FC -> Q3.12 */
    int32_t input_shift;
    int32_t recurrent_multiplier;              /* recurrent FC -> Q3.12 */
    int32_t recurrent_shift;
} qe_lstm_s8_gate_t;

typedef struct {
    int32_t multiplier;
    int32_t shift;
} qe_lstm_s8_scale_t;

typedef struct {
    uint16_t batches;
    uint16_t time_steps;
    uint16_t input_size;
    uint16_t units;
    uint8_t time_major;
    uint8_t cell_clip_on;            /* 1: clip the cell state to [-cell_clip, cell_clip] */
    int16_t cell_clip;               /* in cell-state steps */
    int32_t input_offset;            /* -zero point of the input */
    int32_t hidden_offset;           /* -zero point of the hidden state (the recurrent FC input) */
    int32_t hidden_zero_point;       /* +zero point of the hidden state (its output stage) */
    qe_lstm_s8_gate_t gate[4];       /* i, f, g, o */
    qe_lstm_s8_scale_t forget_cell;  /* f * c -> c */
    qe_lstm_s8_scale_t input_cell;   /* i * g -> c */
    qe_lstm_s8_scale_t hidden;       /* tanh(c) * o -> h */
    int32_t cell_tanh_multiplier;    /* tanh16 of the cell state: v = (c * m + round) >> s */
    int32_t cell_tanh_shift;
    const QE_FLASH uint16_t *sigmoid_table;    /* 256 entries */
} qe_lstm_s8_params_t;

/* scratch: 4 * units int16 (2-byte aligned); hidden_state [batches][units] int8 and
 * cell_state [batches][units] int16 are read and updated in place; output: the hidden state of
 * every step. */
void qe_lstm_s8(const qe_lstm_s8_params_t *p, const int8_t *input, int8_t *output,
                int8_t *hidden_state, int16_t *cell_state, int16_t *scratch);

/* TFLM's int16 LOGISTIC and TANH of one value (exposed for the tests). */
int16_t qe_lstm_sigmoid_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift,
                            int16_t x);
int16_t qe_lstm_tanh_s16(const QE_FLASH uint16_t *table, int32_t multiplier, int32_t shift,
                         int16_t x);

#endif
