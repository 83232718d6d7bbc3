"""The spawn target of worker processes, kept light: the parent never imports the worker's
dependencies (the `openai` SDK alone costs ~2 s of CPU to import)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.common.redaction import install, redact_streams
from agent.common.secrets import set_not_dumpable

if TYPE_CHECKING:
    from agent.config.run_config import RunConfig


def main(worker_id: int, config: RunConfig, *args: Any) -> None:
    # First: the pickled config holds the API key, and a command of our user must not read
    # this process's memory (an exec'd image is dumpable again, so each worker sets it). The keys
    # (model, search APIs) are the only secrets a worker holds: what it prints is redacted of them.
    set_not_dumpable()
    install((config.agent.api_key, *config.agent.tools.web_keys.values()))
    redact_streams()
    from agent.batch.worker import main as worker_main

    worker_main(worker_id, config, *args)
