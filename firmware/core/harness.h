/* The on-device harness: answers the host's HELLO, INFER, BENCH, MEM and ECHO requests
 * (docs/protocol.md) for the generated model (qe_model.h) over the port's byte link (qe_port.h). */
#ifndef QE_HARNESS_H
#define QE_HARNESS_H

/* Reads bytes with qe_port_read_byte() and answers frames until it returns -1, then returns. */
void qe_harness_run(void);

#endif /* QE_HARNESS_H */
