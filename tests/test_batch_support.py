"""Moved to tests/support/batch.py; this re-export stays only until tests/test_shared_limit.py
(being changed on another branch) imports from there. It holds no tests."""

from tests.support.batch import BatchCLI, kill_started, wait_until, write_dataset

__all__ = ["BatchCLI", "kill_started", "wait_until", "write_dataset"]
