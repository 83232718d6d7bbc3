"""Imported by the fork server before the worker's modules (`agent.batch.fork_server.PRELOAD`):
no cyclic garbage collection while it imports them. The SDK's imports make ~10^5 long-lived
objects (pydantic models of every API type), and every young collection walked the survivors
again: ~7 % of the server's import time, which every run waits for before its first request.
`agent.batch.collector_resumed`, its last import, freezes what they left and collects again."""

from __future__ import annotations

import gc

gc.disable()
