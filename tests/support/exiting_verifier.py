"""A `--verifier` module that ends the process as it is imported (for the start-up check's test)."""

import sys

sys.exit(0)  # on purpose: the run must not end with this module's exit code
