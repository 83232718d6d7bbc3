"""The target of worker processes, kept light: the parent never imports the worker's
dependencies (the `openai` SDK alone costs ~1.5 s of CPU to import); the fork server that
starts the workers imports them once (`agent.batch.fork_server`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.batch.capacity import raise_fd_limit
from agent.batch.fork_server import leave_server
from agent.common.redaction import install, redact_streams
from agent.common.secrets import set_not_dumpable

if TYPE_CHECKING:
    from agent.config.run_config import RunConfig


def main(worker_id: int, config: RunConfig, *args: Any) -> None:
    # First: the pickled config holds the API key, and a command of our user must not read
    # this process's memory (an exec'd image is dumpable again, so each worker sets it). The keys
    # (model, search APIs, MCP servers' env and headers) are the only secrets a worker holds:
    # what it prints is redacted of them.
    set_not_dumpable()
    leave_server()  # before anything else can fail: a killed runner's workers exit
    install(config.agent.secrets())
    redact_streams()
    # Its own open-file limit for its conversations: forked by the fork server, a worker has the
    # limit the server started with, not the one the parent raised since (agent.batch.fork_server).
    raise_fd_limit(config.inflight_per_worker)
    from agent.batch.worker import main as worker_main

    worker_main(worker_id, config, *args)
