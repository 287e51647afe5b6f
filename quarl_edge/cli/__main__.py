"""`python -m quarl_edge.cli`: the `quarl-edge` command."""
import sys

from . import main

sys.exit(main())
