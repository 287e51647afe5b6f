/* Internal to the Cortex-M ports. */
#ifndef QE_CORTEXM_PORT_H
#define QE_CORTEXM_PORT_H

#define QE_STACK_PAINT 0xC5C5C5C5u

#endif /* QE_CORTEXM_PORT_H */
