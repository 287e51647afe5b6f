/* The default qe_model_reset_state() (qe_model.h) for a model without variable tensors: it has
 * no state to reset. A model with state defines its own, which the linker takes instead. */
#include "qe_model.h"

#if defined(__GNUC__)
__attribute__((weak))
#endif
void qe_model_reset_state(void)
{
}
