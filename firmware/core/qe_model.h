/* The contract between a generated model (converters/ writes model.c) and the harness.
 *
 * The generator emits, for one .tflite:
 *   - const weights, biases and kernel parameters (in flash),
 *   - one statically planned activation arena (`qe_arena`), tensors placed at fixed offsets,
 *   - `qe_model_invoke()`: the static schedule, one kernel call per op, in order,
 *   - `qe_model_info`: name, hash and the input/output tensor specs the harness reports in HELLO.
 * The harness copies INFER payloads to the inputs' arena offsets, calls qe_model_invoke() and
 * sends the outputs back. No heap, no recursion. */
#ifndef QE_MODEL_H
#define QE_MODEL_H

#include <stdint.h>

#include "qe_flash.h"   /* QE_FLASH: the qualifier of the generated const arrays */

#define QE_MAX_DIMS 6

#if defined(__GNUC__)
#define QE_ALIGNED(n) __attribute__((aligned(n)))
#else
#define QE_ALIGNED(n)
#endif

typedef struct {
    uint8_t dtype;                /* QE_DTYPE_* from qe_protocol.h */
    uint8_t ndims;
    uint16_t dims[QE_MAX_DIMS];
    float scale;                  /* 0 for float tensors */
    int32_t zero_point;
    uint32_t arena_offset;        /* where the tensor lives in qe_arena */
    uint32_t bytes;
} qe_tensor_spec_t;

typedef struct {
    const char *name;
    uint8_t hash[8];              /* first 8 bytes of the .tflite's SHA-256 */
    uint32_t arena_bytes;
    uint8_t n_inputs;
    uint8_t n_outputs;
    const qe_tensor_spec_t *inputs;
    const qe_tensor_spec_t *outputs;
} qe_model_info_t;

extern const qe_model_info_t qe_model_info;
extern uint8_t qe_arena[];
void qe_model_invoke(void);
/* Set the model's variable tensors (state kept across invocations, e.g. an LSTM's hidden and
 * cell state) to zero, as TFLM's MicroInterpreter::Reset. A model with state defines it (and
 * its first qe_model_invoke() calls it); for a model without, qe_model_state.c's weak default
 * does nothing. */
void qe_model_reset_state(void);

/* Per-op cost (docs/protocol.md, "Per-op cost"): only a build with -DQE_PER_OP, whose model.c
 * the generator wrote with per_op=True, times each op of the schedule with the board's cost
 * counter (the one the whole inference is timed with, qe_port.h). The harness starts the
 * counter before qe_model_invoke() as always; after each kernel call QE_OP_END(slot) reads it
 * into qe_op_costs[slot] and restarts it, so the windows tile the whole run: slot 0 also holds
 * the schedule's entry, and the harness's final read (the tail) its return. Without
 * QE_PER_OP the marks are empty, and a normal build's model.c has none: its code and size
 * are unchanged. */
#if defined(QE_PER_OP)
#include "qe_port.h"
extern uint32_t qe_op_costs[];          /* the last run's cost of each slot */
extern uint32_t qe_op_min[];            /* PEROP: the smallest over its runs */
extern const uint16_t qe_op_count;      /* slots: the ops with a kernel call, in order */
#define QE_OP_BEGIN(slot) ((void)0)
#define QE_OP_END(slot) (qe_op_costs[(slot)] = qe_port_cost_stop(), qe_port_cost_start())
#else
#define QE_OP_BEGIN(slot) ((void)0)
#define QE_OP_END(slot) ((void)0)
#endif

#endif /* QE_MODEL_H */
