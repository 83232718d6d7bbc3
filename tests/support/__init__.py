"""Helpers shared by test modules (they hold no tests); no test module imports another."""
