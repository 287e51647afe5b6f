/* UNIDIRECTIONAL_SEQUENCE_LSTM, float32, bit-exact with TF Lite Micro's reference kernel
 * (unidirectional_sequence_lstm.cc -> lstm_eval.h EvalLstm / LstmStep, float instantiation):
 * the standard LSTM without peephole, projection or layer norm (TFLM refuses those variants,
 * and so does the generator).
 *
 * For each batch row and time step, with x the step's input and h, c the state (variable
 * tensors in the arena that persist across invocations):
 *   gate[u] = fc(x, W_x[gate], bias[gate])[u] + fc(h, W_h[gate], none)[u]
 *     where fc is TFLM's float FullyConnected: a sum in input order from 0.0f, plus the bias
 *     (0.0f when there is none), clamped to [-FLT_MAX, FLT_MAX] (activation NONE);
 *   i, f, o = sigmoid(gate) (TFLM's float Logistic: its cutoffs, expf);
 *   g = tanh(gate) (the op's fused activation: TANH is the only one TFLM runs);
 *   c = clamp(f * c) + clamp(i * g), then, if cell_clip > 0, max(min(cell_clip, c), -cell_clip);
 *   h = clamp(tanh(c) * o), and h is the step's output.
 * All gates of a step read the old h. time_major: input [time][batch][input] and output
 * [time][batch][units]; otherwise [batch][time][...]. Rows of a batch are independent, so
 * TFLM's batch-at-once time-major steps and these row-at-a-time steps give the same bits.
 *
 * tanh and exp are passed in by the generated code (as for the float activations), so only a
 * model that uses them links with -lm. */
#ifndef QE_LSTM_H
#define QE_LSTM_H

#include <stdint.h>

#include "activations_f32.h"

#define QE_LSTM_GATE_I 0
#define QE_LSTM_GATE_F 1
#define QE_LSTM_GATE_C 2
#define QE_LSTM_GATE_O 3

typedef struct {
    uint16_t batches;
    uint16_t time_steps;
    uint16_t input_size;
    uint16_t units;
    uint8_t time_major;
    float cell_clip;                /* <= 0: no clipping */
    const float *input_weights[4];      /* [units][input_size] per gate (i, f, c, o) */
    const float *recurrent_weights[4];  /* [units][units] per gate */
    const float *bias[4];               /* [units] per gate */
} qe_lstm_f32_params_t;

/* scratch: 4 * units floats (the gates of one step); hidden_state and cell_state:
 * [batches][units], read and updated in place; output: the hidden state of every step. */
void qe_lstm_f32(const qe_lstm_f32_params_t *p, qe_f32_fn tanh_fn, qe_f32_fn exp_fn,
                 const float *input, float *output, float *hidden_state, float *cell_state,
                 float *scratch);

#endif
