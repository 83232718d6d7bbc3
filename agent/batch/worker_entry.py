"""The spawn target of worker processes, kept light: the parent never imports the worker's
dependencies (the `openai` SDK alone costs ~2 s of CPU to import)."""

from __future__ import annotations

from typing import Any

from agent.common.secrets import set_not_dumpable


def main(*args: Any) -> None:
    # First: the pickled config holds the API key, and a command of our user must not read
    # this process's memory or environ (an exec'd image is dumpable again, so set it here).
    set_not_dumpable()
    from agent.batch.worker import main as worker_main

    worker_main(*args)
