"""The spawn target of worker processes, kept light: the parent never imports the worker's
dependencies (the `openai` SDK alone costs ~2 s of CPU to import)."""

from __future__ import annotations

from typing import Any


def main(*args: Any) -> None:
    from agent.batch.worker import main as worker_main

    worker_main(*args)
