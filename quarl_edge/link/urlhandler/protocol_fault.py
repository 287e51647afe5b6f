"""fault://: the fault-injecting port of quarl_edge/link/fault.py, under the module name
pyserial looks for."""
from ..fault import Serial  # noqa: F401
