"""Imported last by the fork server (`agent.batch.fork_server.PRELOAD`): collection resumes,
after what the imports left is frozen (`gc.freeze`, for forking servers). Left in the young
generation, those ~10^5 objects would be walked by the first collection of every worker: tens
of milliseconds each, and a copy of every page they sit on. The few cycles the imports left
unreachable (~2,000 objects) stay, in the server and in each worker."""

from __future__ import annotations

import gc

gc.freeze()
gc.enable()
