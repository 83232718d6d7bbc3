"""Imported first by the fork server (`agent.batch.fork_server.PRELOAD`): it gives the server's
environment back the PYTHONPATH the runner had. `fork_server` put this package's root in front
of it only so that the server, which Python 3.11's multiprocessing starts without the runner's
sys.path, imports the same checkout as the runner; the path stays in the server's sys.path,
and what the workers start (forked from it) sees the user's PYTHONPATH as it was."""

from __future__ import annotations

import os

SAVED = "AGENT_RUNNER_PYTHONPATH"  # "=" + the runner's PYTHONPATH; "" where it had none

_saved = os.environ.pop(SAVED, None)
if _saved == "":
    os.environ.pop("PYTHONPATH", None)
elif _saved is not None:
    os.environ["PYTHONPATH"] = _saved[1:]
