"""Imported by the fork server first (`agent.batch.fork_server.PRELOAD`): Ctrl-C is not for it.

A terminal's Ctrl-C reaches every process of the runner's group; the runner alone decides how
the run stops, and multiprocessing's server ignores SIGINT only once its imports are done (a
second or more): before, one raised KeyboardInterrupt in its imports, and its traceback. The
runner starts it with SIGINT blocked (`fork_server._ctrl_c_held`); here it ignores SIGINT, which
discards one still pending, then unblocks it, so that its workers and their commands start
with the signal mask a command expects. Also where multiprocessing starts it again itself."""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
