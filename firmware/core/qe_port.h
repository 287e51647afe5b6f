/* What a board family's port (firmware/ports/<family>/) provides to the portable core.
 * A port is small: a UART (or stdio on the host), a cost counter, stack measurement. */
#ifndef QE_PORT_H
#define QE_PORT_H

#include <stdint.h>

/* Set by the build from boards/<id>.toml (-D...). */
#ifndef QE_BOARD_ID
#define QE_BOARD_ID "unknown"
#endif
#ifndef QE_CLOCK_HZ
#define QE_CLOCK_HZ 0u
#endif
#ifndef QE_COST_UNIT
#define QE_COST_UNIT QE_COST_NS
#endif
#ifndef QE_MAX_PAYLOAD
#define QE_MAX_PAYLOAD 1024u
#endif

void qe_port_init(void);
/* Run fn (the harness) and return when it returns. An MCU port with nothing special to do
 * implements it as `{ fn(); }`; the host port runs fn on its own painted stack to measure the
 * stack high-water mark (firmware/ports/host/port.c). */
void qe_port_run(void (*fn)(void));
/* Blocking read of one byte; returns -1 when the link is gone (the harness then returns). */
int qe_port_read_byte(void);
void qe_port_write(const uint8_t *data, uint32_t n);
/* Cost counter in the board's unit (QE_COST_UNIT): restart, then read. */
void qe_port_cost_start(void);
uint32_t qe_port_cost_stop(void);
/* Memory the board can measure itself; 0 where it cannot (the host reads the ELF). */
uint32_t qe_port_flash_bytes(void);
uint32_t qe_port_ram_bytes(void);
uint32_t qe_port_stack_used(void);
uint32_t qe_port_stack_size(void);

#endif /* QE_PORT_H */
