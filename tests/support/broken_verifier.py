"""A `--verifier` module that cannot be imported (for the start-up check's test)."""

raise ImportError("this verifier module is broken on purpose")
