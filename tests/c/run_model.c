/* Batch driver for tests and benchmarks: links a generated model.c and the core kernels.
 *
 *   run_model < records > outputs
 *
 * stdin holds N records, each the model's inputs' raw bytes concatenated in input order; for
 * each record the outputs' raw bytes (concatenated in output order) go to stdout. A trailing
 * partial record is an error (exit 1). `run_model --info` prints the model info as one line:
 *   name hash16 arena_bytes n_inputs n_outputs input_bytes output_bytes
 * `run_model --reset-every N` calls qe_model_reset_state() before every N-th record (0, N, ...):
 * the state of a model with variable tensors (an LSTM's) starts over there. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "qe_model.h"

/* weak: the driver also links with source lists that leave out qe_model_state.c (a model
 * without state defines no qe_model_reset_state, and --reset-every is then a no-op) */
#if defined(__GNUC__)
extern void qe_model_reset_state(void) __attribute__((weak));
#endif

static uint32_t total_bytes(const qe_tensor_spec_t *specs, uint8_t n)
{
    uint32_t sum = 0;
    uint8_t i;
    for (i = 0; i < n; ++i) {
        sum += specs[i].bytes;
    }
    return sum;
}

int main(int argc, char **argv)
{
    const qe_model_info_t *m = &qe_model_info;
    unsigned long records = 0;
    unsigned long reset_every = 0;

    if (argc > 1 && strcmp(argv[1], "--info") == 0) {
        int i;
        printf("%s ", m->name);
        for (i = 0; i < 8; ++i) {
            printf("%02x", m->hash[i]);
        }
        printf(" %lu %u %u %lu %lu\n", (unsigned long)m->arena_bytes, (unsigned)m->n_inputs,
               (unsigned)m->n_outputs, (unsigned long)total_bytes(m->inputs, m->n_inputs),
               (unsigned long)total_bytes(m->outputs, m->n_outputs));
        return 0;
    }

    if (argc > 2 && strcmp(argv[1], "--reset-every") == 0) {
        reset_every = strtoul(argv[2], NULL, 10);
    }

    for (;;) {
        uint8_t i;
        if (reset_every != 0 && records % reset_every == 0 && qe_model_reset_state != NULL) {
            qe_model_reset_state();
        }
        for (i = 0; i < m->n_inputs; ++i) {
            const qe_tensor_spec_t *t = &m->inputs[i];
            size_t got = fread(qe_arena + t->arena_offset, 1, t->bytes, stdin);
            if (got != t->bytes) {
                if (i == 0 && got == 0 && feof(stdin)) {
                    return 0;  /* clean end of input */
                }
                fprintf(stderr, "run_model: partial record %lu (input %u: %lu of %lu bytes)\n",
                        records, (unsigned)i, (unsigned long)got, (unsigned long)t->bytes);
                return 1;
            }
        }
        qe_model_invoke();
        for (i = 0; i < m->n_outputs; ++i) {
            const qe_tensor_spec_t *t = &m->outputs[i];
            if (fwrite(qe_arena + t->arena_offset, 1, t->bytes, stdout) != t->bytes) {
                fprintf(stderr, "run_model: cannot write output\n");
                return 1;
            }
        }
        ++records;
    }
}
