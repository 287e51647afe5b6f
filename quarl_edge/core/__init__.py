"""The foundation every other package of quarl_edge stands on, and which imports nothing of
quarl_edge outside itself: the run directory contract (run.py) and its networks (nets.py), the
errors, the schema checker, the file writer, the names the CLI offers, where the non-Python parts
are (resources.py), the host TFLite interpreter and TensorFlow compatibility, noise, and the
Gymnasium environments and action heads (envs/)."""
