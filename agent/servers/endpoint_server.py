"""The OpenAI-compatible HTTP face of any `Responder`: chat completions (plain or SSE), models, errors.

Owns the aiohttp server and the background thread it runs in. How an error or a deliberate
fault is answered is `agent.servers.faults`'s job, the request being answered and the counts
are `agent.servers.traffic`'s, and streaming replies are cut into chunks by
`agent.servers.completion_stream`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from agent.common.images import sniff
from agent.common.lifecycle import StartStop
from agent.protocols import Responder
from agent.servers.completion_stream import DONE, completion_chunks, sse_event
from agent.servers.faults import EndpointFault, error_response, misbehave
from agent.servers.traffic import Traffic, current_request, enter_request

# EndpointFault and current_request are re-exported: responders and tests import them from here.
__all__ = ["EndpointFault", "EndpointServer", "current_request"]

log = logging.getLogger(__name__)

_MAX_BODY = 64 * 1024 * 1024  # long agent histories exceed aiohttp's 1 MiB default


class EndpointServer(StartStop):
    """Serves a `Responder` as an OpenAI-compatible endpoint on `base_url`."""

    def __init__(
        self,
        responder: Responder,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_ids: Sequence[str] = ("sim-model",),
        routes: Mapping[str, Responder] | None = None,
        files: Callable[[str], bytes | None] | None = None,
        reuse_port: bool = False,
    ) -> None:
        """`routes`: more POST paths answered like chat completions (JSON body in, JSON out,
        faults honoured), e.g. "/v1/images/generations"; `files`: what GET /v1/files/{name}
        serves (None: 404), e.g. the images an endpoint answered with by URL; `reuse_port`:
        listen with SO_REUSEPORT, so that servers in several processes share one port (the
        kernel spreads the connections among them), as a real endpoint serves on many cores."""
        self._responder = responder
        self._routes = dict(routes or {})
        self._files = files
        self._host = host
        self._requested_port, self._reuse_port = port, reuse_port
        self._model_ids = tuple(model_ids)
        self._port: int | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._traffic = Traffic()

    # ------------------------------------------------------------ public surface

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("EndpointServer is not listening; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self._host in ("", "0.0.0.0") else self._host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    @property
    def requests_total(self) -> int:
        return self._traffic.requests_total

    @property
    def first_request_at(self) -> float | None:
        """time.monotonic() when the first chat request arrived (None before it)."""
        return self._traffic.first_request_at

    @property
    def last_reply_at(self) -> float | None:
        """time.monotonic() when the last chat request was answered (None before the first)."""
        return self._traffic.last_reply_at

    @property
    def inflight(self) -> int:
        return self._traffic.inflight

    @property
    def peak_inflight(self) -> int:
        return self._traffic.peak_inflight

    def start(self) -> None:
        """Serve from a background daemon thread with its own event loop; return once listening."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("EndpointServer already started")
            ready = threading.Event()
            failure: list[BaseException] = []
            thread = threading.Thread(
                target=self._run_thread, args=(ready, failure), name="endpoint-server", daemon=True
            )
            thread.start()
            ready.wait()
            if failure:
                thread.join()
                raise failure[0]
            self._thread = thread

    def stop(self) -> None:
        """Close every connection (hung ones too) and join the thread. Safe to call twice."""
        with self._lock:
            thread, loop = self._thread, self._loop
            self._thread = None
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    async def serve_forever(self, on_ready: Callable[[], None] | None = None) -> None:
        """Serve in the running loop until cancelled; `on_ready` is called once listening."""
        await self._listen()
        try:
            if on_ready is not None:
                on_ready()
            await asyncio.Event().wait()
        finally:
            await self._shutdown()

    # ------------------------------------------------------------ lifecycle

    def _run_thread(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            try:
                loop.run_until_complete(self._listen())
            except BaseException as exc:  # noqa: BLE001 -- handed to start(), which re-raises it
                failure.append(exc)
                return
            finally:
                ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
        finally:
            _close_loop(loop)

    async def _listen(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        for path, responder in self._routes.items():
            app.router.add_post(path, functools.partial(self._chat, responder=responder))
        app.router.add_get("/v1/files/{name}", self._file)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        # handler_cancellation: a client that gives up frees its handler (and its hang).
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(
                runner, self._host, self._requested_port, backlog=4096, reuse_port=self._reuse_port or None
            )
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    async def _shutdown(self) -> None:
        if self._stopping is not None:
            self._stopping.set()  # hung handlers drop their connections now
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # ------------------------------------------------------------ handlers

    async def _chat(self, request: web.Request, responder: Responder | None = None) -> web.StreamResponse:
        self._traffic.arrived()
        try:
            return await self._answer(request, responder or self._responder)
        except EndpointFault as fault:
            return await misbehave(request, fault, self._stopping)
        finally:
            self._traffic.left()

    async def _answer(self, request: web.Request, responder: Responder) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return error_response(400, "request body must be a JSON object")
        headers = {name.lower(): value for name, value in request.headers.items()}
        enter_request(request.path, headers)
        try:
            completion = await responder(body)
        except EndpointFault:
            raise
        except Exception as exc:
            log.exception("responder failed on %s", request.path)
            return error_response(500, f"{type(exc).__name__}: {exc}")
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, completion, include_usage)
        return web.json_response(completion)

    async def _stream(
        self, request: web.Request, completion: dict[str, Any], include_usage: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        try:
            for chunk in completion_chunks(completion, include_usage=include_usage):
                await response.write(sse_event(chunk))
            await response.write(DONE)
            await response.write_eof()
        except ConnectionResetError:
            log.debug("client left during a stream")  # its choice; nothing to answer
        return response

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "local"} for m in self._model_ids]
        return web.json_response({"object": "list", "data": data})

    async def _file(self, request: web.Request) -> web.Response:
        data = self._files(request.match_info["name"]) if self._files is not None else None
        if data is None:
            return error_response(404, f"no file {request.match_info['name']}")
        info = sniff(data)
        return web.Response(body=data, content_type=info.mime if info else "application/octet-stream")

    async def _not_found(self, request: web.Request) -> web.Response:
        return error_response(404, f"no route for {request.method} {request.path}")


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on the loop and close it, so nothing warns about leaked tasks."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
