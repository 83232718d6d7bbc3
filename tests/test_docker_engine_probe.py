"""How the docker backend first talks to an engine: its unix socket tried, the API version read
from the engine's /_ping (as the docker CLI negotiates it), not from /version, which Podman
answers by gathering its whole system information. The real engines, seen through a proxy on a
unix socket of this test's that notes every request line passing through it."""

from __future__ import annotations

import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from agent.sandboxes.docker import engine as docker_engine
from agent.sandboxes.docker.engine import close_clients, engine_client, engine_unavailable_reason
from tests.fixtures.containers import DEFAULT_IMAGE, Engine

REQUEST_LINE = re.compile(rb"^(?:GET|POST|PUT|DELETE|HEAD) (\S+) HTTP/1\.[01]\r?$", re.MULTILINE)


class RecordingProxy:
    """Forwards each connection to `upstream` (a unix socket path) and keeps what clients sent."""

    def __init__(self, path: Path, upstream: str) -> None:
        self.path, self.upstream, self.sent = path, upstream, bytearray()
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(16)
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def paths(self) -> list[str]:
        with self._lock:
            return [match.decode() for match in REQUEST_LINE.findall(bytes(self.sent))]

    def close(self) -> None:
        self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        self._server.close()
        self._acceptor.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            try:
                upstream.connect(self.upstream)
            except OSError:  # the client sees its connection closed: its own error, in its test
                return
            back = threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True)
            back.start()
            self._pipe(client, upstream, True)
            back.join()

    def _pipe(self, source: socket.socket, target: socket.socket, record: bool) -> None:
        """One direction, until its source ends; the sockets are closed by `_serve`."""
        while chunk := _receive(source):
            if record:
                with self._lock:
                    self.sent += chunk
            try:
                target.sendall(chunk)
            except OSError:  # the other side went away
                return
        with suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _receive(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:  # the other side's thread closed it
        return b""


@pytest.fixture
def proxy(container_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingProxy]:
    if not container_engine.url.startswith("unix://"):
        pytest.fail(f"the test engines listen on unix sockets, not {container_engine.url}")
    short = Path(tempfile.mkdtemp(prefix="engine-", dir="/tmp"))  # AF_UNIX paths hold 107 bytes
    recording = RecordingProxy(short / "engine.sock", container_engine.url.removeprefix("unix://"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{recording.path}")
    close_clients()  # a client made earlier in this process is not the one under test
    try:
        yield recording
    finally:
        close_clients()
        recording.close()
        shutil.rmtree(short)


def test_the_client_takes_its_api_version_from_the_engines_ping(
    proxy: RecordingProxy, container_engine: Engine
) -> None:
    pinged = container_engine.client.api.version()["ApiVersion"]  # the engine's own answer
    client = engine_client()
    assert client.images.get(DEFAULT_IMAGE).id  # the client works, at the version pinged
    paths = proxy.paths()
    assert paths[0] == "/_ping", paths
    assert not any(path.endswith("/version") for path in paths), paths
    assert f"/v{pinged}/images/{DEFAULT_IMAGE}/json" in paths, paths


def test_the_start_check_asks_no_version_either(proxy: RecordingProxy) -> None:
    assert engine_unavailable_reason(DEFAULT_IMAGE) is None
    paths = proxy.paths()
    assert paths and not any(path.endswith("/version") for path in paths), paths


def test_an_engine_that_accepts_but_never_answers_is_named_after_the_time_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'silent.sock'}")
    monkeypatch.setattr(docker_engine, "PROBE_TIMEOUT", 0.5)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(tmp_path / "silent.sock"))
    silent.listen(4)
    try:
        reason = engine_unavailable_reason(None)
    finally:
        silent.close()
    assert reason is not None and reason.startswith(f"cannot reach a Docker engine at unix://{tmp_path}")
    assert "timed out" in reason, reason
