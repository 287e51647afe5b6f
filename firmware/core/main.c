/* Firmware entry point, the same for every board: the port sets up its link (UART, stdio, ...)
 * and then runs the harness, which answers the host's requests until the link goes away.
 * The harness is started through qe_port_run() so a port can choose the stack it runs on (the
 * host port uses its own painted stack to measure the high-water mark); most ports just call it. */
#include "qe_protocol.h"
#include "qe_port.h"
#include "harness.h"

int main(void)
{
    qe_port_init();
    qe_port_run(qe_harness_run);
    return 0;
}
