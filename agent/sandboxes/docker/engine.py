"""The Docker-compatible engine as this process sees it: one SDK client per process and
DOCKER_HOST (Docker or Podman's compat socket), the image check, and why the engine cannot be
used. Image verdicts are cached per process, so each distinct image is checked once per run
(a failure too: an image that cannot be had is not pulled again for every prompt).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound
from docker.utils import parse_repository_tag
from requests.exceptions import RequestException

from agent.errors import SandboxError

ENGINE_ERRORS = (DockerException, RequestException)
_lock = threading.Lock()
_clients: dict[tuple[int, str], Any] = {}
_verdicts: dict[tuple[str, str], str | None] = {}  # (engine, image) -> error message or None
_image_locks: dict[tuple[str, str], threading.Lock] = {}
PROBE_TIMEOUT = 15.0  # seconds an engine has to answer its /_ping, as its API calls at start
API_VERSION = re.compile(rb"^api-version:[ \t]*([0-9]+\.[0-9]+)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock (the default)"


def engine_client() -> Any:
    """This process's client for the engine DOCKER_HOST names (a forked child gets its own)."""
    key = (os.getpid(), os.environ.get("DOCKER_HOST", ""))
    with _lock:
        client = _clients.get(key)
        if client is None:
            problem, version = _probe()
            if problem is not None:
                raise SandboxError(_no_engine(problem))
            try:
                client = docker.from_env(version=version)
            except ENGINE_ERRORS as exc:
                raise SandboxError(_no_engine(exc)) from exc
            _clients[key] = client
        return client


def _probe() -> tuple[OSError | None, str | None]:
    """Why the engine's unix socket cannot be used (None: it can, or it is not a unix socket),
    and, when DOCKER_HOST names that socket, the API version from the engine's /_ping reply.
    The socket is tried before docker-py sees it (a failed connect in its client constructor
    leaks the socket). docker-py would ask /version for the version, which Podman answers by
    gathering its whole system information (it forks dpkg-query for each package, ~0.1 s of
    CPU for each client made); /_ping's Api-Version header is the same number. Without
    DOCKER_HOST docker-py may follow a Docker CLI context elsewhere: no version (None) then,
    docker-py asks as it would."""
    named = os.environ.get("DOCKER_HOST")
    host = named or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return None, None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_TIMEOUT)
        try:
            probe.connect(host[len("unix://") :])
            if not named:
                return None, None
            probe.sendall(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
            head = _response_head(probe, time.monotonic() + PROBE_TIMEOUT)
        except OSError as exc:  # refused, missing, or no answer within the time-out
            return exc, None
    found = API_VERSION.search(head)
    return None, found.group(1).decode() if found else None


def _response_head(probe: socket.socket, deadline: float) -> bytes:
    """The status line and headers of the reply on `probe`, read by `deadline` (empty when
    they do not end within 16 KiB)."""
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 16384:
        probe.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = probe.recv(4096)
        if not chunk:
            break
        head += chunk
    ended, blank, _ = head.partition(b"\r\n\r\n")
    return ended if blank else b""


def close_clients() -> None:
    """Closes this process's clients (tests, and the runner at exit)."""
    with _lock:
        for key in [key for key in _clients if key[0] == os.getpid()]:
            _clients.pop(key).close()


def short_error(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    text = str(explanation or exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 240 else line[:237] + "..."


def ensure_image(client: Any, name: str) -> None:
    """Makes sure `name` is on the engine (pulling it if needed); raises SandboxError otherwise."""
    key = (str(client.api.base_url), name)
    with _lock:
        image_lock = _image_locks.setdefault(key, threading.Lock())
    with image_lock:  # concurrent prompts wait for one verdict instead of pulling twice
        if key not in _verdicts:
            _verdicts[key] = _check_image(client, name)
        verdict = _verdicts[key]
    if verdict is not None:
        raise SandboxError(verdict)


def _check_image(client: Any, name: str) -> str | None:
    try:
        client.images.get(name)
        return None
    except ImageNotFound:
        pass
    except ENGINE_ERRORS as exc:
        return f"cannot check image '{name}' on the engine at {engine_address()}: {short_error(exc)}"
    repository, tag = parse_repository_tag(name)
    try:
        client.images.pull(repository, tag=tag or "latest")
        return None
    except ENGINE_ERRORS as exc:
        return (
            f"image '{name}' is not on the engine at {engine_address()} and pulling it failed "
            f"({short_error(exc)}); load or build it locally first, e.g. `docker load -i image.tar`, "
            f"`docker import rootfs.tar {name}` or `docker build -t {name} .`"
        )


def engine_unavailable_reason(default_image: str | None) -> str | None:
    """Why the engine cannot run our sandboxes, with how to fix it; None when it can. The
    default image is checked when there is one (a run whose rows all name theirs has none)."""
    problem, version = _probe()
    if problem is not None:
        return _no_engine(problem)
    try:
        client = docker.from_env(version=version, timeout=PROBE_TIMEOUT)
    except ENGINE_ERRORS as exc:
        return _no_engine(exc)
    try:
        client.ping()
        if default_image is not None:
            client.images.get(default_image)
    except ImageNotFound:
        return (
            f"the default image '{default_image}' is not on the engine at {engine_address()}; "
            f"pull, load or build it first (`docker pull {default_image}`, `docker load -i image.tar`, "
            f"`docker import rootfs.tar {default_image}`) or choose another default image"
        )
    except ENGINE_ERRORS as exc:
        return _no_engine(exc)
    finally:
        client.close()
    return None


def _no_engine(exc: BaseException) -> str:
    return (
        f"cannot reach a Docker engine at {engine_address()} ({short_error(exc)}); start one "
        "(`sudo systemctl start docker`, or `dockerd &`) or point DOCKER_HOST at a Docker-compatible "
        "socket, e.g. Podman's (`podman system service --time=0 unix:///tmp/podman.sock`)"
    )
