"""The Ray backend (`--backend=ray`): prompts run as jobs of actors spread over a Ray cluster.

The driver (the runner's own process) streams the dataset and stays the run directory's only
writer; each `WorkerActor` (`agent.cluster.actor`) is the local backend's worker core — the same
`agent.batch.worker.Worker`, event loop, model client and sandbox pool — fed batches of jobs
and long-polled for its events (`agent.cluster.scheduler`). One `LimitHub` actor holds the
run's rate limit for every node. Ray is imported only here, and only for that backend.
"""

from __future__ import annotations

import os
import socket
from types import ModuleType

from agent.backends import RAY_INSTALL
from agent.config.run_config import RunConfig
from agent.errors import ConfigError

# Ray's own extras that a batch run never uses: they cost CPU and open ports or the network.
# The driver's core worker (C++) logs at INFO by default, and its lines ([state-dump] tables,
# reconnection chatter when a node is lost) are no operator's business: warnings and worse only.
# (Actors' and raylets' own output stays in Ray's session log files: log_to_driver=False.)
QUIET_RAY = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
    "RAY_BACKEND_LOG_LEVEL": "warning",
}
PROBE_TIMEOUT = 10.0  # seconds to reach --ray_address before giving up


def require_ray() -> ModuleType:
    """The `ray` module, or a ConfigError saying how to install it."""
    for name, value in QUIET_RAY.items():
        os.environ.setdefault(name, value)
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"--backend=ray needs Ray, which is not installed ({exc}): {RAY_INSTALL}") from None
    return ray


def check_address(config: RunConfig) -> None:
    """Before the run writes or shows anything: `--ray_address` where no cluster answers is one
    line (`auto` is Ray's to find, when the run joins)."""
    if config.ray_address != "auto":
        probe(config.ray_address)


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + empty SETTINGS
_SETTINGS = 4  # the HTTP/2 frame type a server's first frame has


def probe(address: str) -> None:
    """A ConfigError unless `address` (host:port) accepts a connection: Ray itself retries an
    unreachable address for minutes."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray_address={address}: expected auto or host:port")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT) as probe:
            # Ray's GCS speaks gRPC: an HTTP/2 server answers the client preface with SETTINGS.
            probe.sendall(_HTTP2_PREFACE)
            answer = probe.recv(9)
    except OSError as exc:
        answer, why = b"", exc.strerror or str(exc)
    else:
        why = "it does not speak gRPC"
    if len(answer) < 4 or answer[3] != _SETTINGS:
        raise ConfigError(
            f"--ray_address={address}: no Ray cluster answers there ({why}); "
            "start one with `ray start --head`, or pass its head's host:port"
        ) from None
