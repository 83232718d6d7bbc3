"""Imported by the fork server (`agent.batch.fork_server.PRELOAD`) for its side effect: the
server becomes non-dumpable, and a forked process keeps that flag (only execve resets it). So
a worker is non-dumpable from its first instruction, before multiprocessing unpickles its
config (the API key with it) and before `worker_entry.main` sets the flag itself: no window in
which a command of our user could read the key from the worker's memory."""

from __future__ import annotations

from agent.common.secrets import set_not_dumpable

set_not_dumpable()
