"""A run directory opened as the runner opens it (this module holds no tests)."""

from __future__ import annotations

from pathlib import Path

from agent.store.directory import RunDirectory


def opened(run_dir: Path) -> RunDirectory:
    """`run_dir` locked and repaired, as an invocation starts (a resume loads its saved records
    here); use it as a context manager to close it."""
    store = RunDirectory(run_dir)
    store.lock()
    store.repair()
    return store
