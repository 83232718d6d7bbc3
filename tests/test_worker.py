"""The worker process's pieces that batch runs do not show directly."""

from __future__ import annotations

import asyncio

import uvloop

from agent.batch.worker import event_loop_factory


def test_workers_run_their_conversations_on_uvloop() -> None:
    loop = event_loop_factory()()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        loop.close()
