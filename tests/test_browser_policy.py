"""The network policy in front of the browser (real Chromium, pages on 127.0.0.1): loopback
refused unless allowed, cloud metadata and other schemes refused, and — where route handlers
fall short — every hop of a redirect chain, subresources, WebSockets and the page's own fetches
checked too; allowed traffic (a POST body included) arrives whole."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import zlib

from agent.protocols import ToolConfig
from tests.fixtures.browser import Build, Worker
from tests.support.browser import (
    browsing,
    call,
    serve_pages,
)

ALLOW_LOOPBACK = ToolConfig(allow_hosts=("127.0.0.1",))
METADATA = "http://169.254.169.254/latest/meta-data/"


def test_loopback_metadata_and_other_schemes_are_refused_before_any_request(browser_worker: Worker) -> None:
    async def scenario() -> None:
        async with browsing(
            ToolConfig(), browser_worker.shared
        ) as tools:  # the default policy: public internet only
            with serve_pages() as (base, paths):
                loopback = await call(tools, "browser_navigate", url=base + "/")
                assert "127.0.0.1" in loopback["error"] and "--allow_hosts" in loopback["error"]
                metadata = await call(tools, "browser_navigate", url=METADATA)
                assert "169.254.169.254" in metadata["error"]
                for url in ("file:///etc/passwd", "data:text/html,<h1>hi</h1>", "chrome://version"):
                    refused = await call(tools, "browser_navigate", url=url)
                    assert "only http and https" in refused["error"], url
                assert paths == []  # nothing reached the loopback server

    browser_worker.run(scenario())


def test_every_redirect_hop_subresource_socket_and_fetch_is_checked(browser_worker: Worker) -> None:
    async def scenario() -> None:
        async with browsing(ALLOW_LOOPBACK, browser_worker.shared) as tools:
            with serve_pages() as (base, paths):
                # allowed -> allowed -> metadata: the last hop is refused, not followed
                chain = f"{base}/redirect?to=/redirect%3Fto%3D{METADATA}"
                page = await call(tools, "browser_navigate", url=chain)
                assert "blocked by the network policy" in page["error"]
                assert any("169.254.169.254" in reason for reason in page["blocked"])
                assert [p.split("?")[0] for p in paths] == ["/redirect", "/redirect"]

                private = await call(tools, "browser_navigate", url=base + "/private")
                await asyncio.sleep(0.5)  # the WebSocket opens after the page's script ran
                later = await call(tools, "browser_snapshot")
                blocked = private.get("blocked", []) + later.get("blocked", [])
                assert any("169.254.169.254" in reason for reason in blocked)  # the <img>
                assert any("127.0.0.2" in reason for reason in blocked)  # the WebSocket

                fetched = await call(
                    tools,
                    "browser_console",
                    expression=f"fetch('{METADATA}').then(r => r.status, e => 'failed')",
                )
                assert fetched["result"] in (403, "failed")
                assert any("169.254.169.254" in reason for reason in fetched["blocked"])

    browser_worker.run(scenario())


def test_a_page_that_moves_itself_to_a_refused_address_is_an_error(browser_worker: Worker) -> None:
    # A refused goto or redirect was an error; the same refusal reached by the page itself (a
    # meta refresh here; a script, a form or a popup alike) was a 200 with a snapshot.
    async def scenario() -> None:
        async with browsing(ALLOW_LOOPBACK, browser_worker.shared) as tools:
            with serve_pages() as (base, _paths):
                await call(tools, "browser_navigate", url=f"{base}/refresh?to={METADATA}")
                await asyncio.sleep(1.0)  # the refresh, after the navigation returned
                moved = await call(tools, "browser_snapshot")
                assert moved["url"] == METADATA
                assert "blocked by the network policy" in moved["error"], moved
                fine = await call(tools, "browser_navigate", url=base + "/next")
                assert "error" not in fine and fine["title"] == "Next page"

    browser_worker.run(scenario())


def test_allowed_requests_pass_whole_through_the_proxy(browser_worker: Worker) -> None:
    body = "x" * 300_000 + "end"
    expression = f"fetch('/echo', {{method: 'POST', body: '{body}'}}).then(r => r.json())"

    async def scenario() -> None:
        async with browsing(ALLOW_LOOPBACK, browser_worker.shared) as tools:
            with serve_pages() as (base, paths):
                await call(tools, "browser_navigate", url=base + "/next")
                for _ in range(3):  # one request per proxied connection: repeated calls work
                    echoed = await call(tools, "browser_console", expression=expression)
                    assert echoed["result"] == {"length": len(body), "crc": zlib.crc32(body.encode())}
                    assert "blocked" not in echoed
                assert paths.count("/echo") == 3

    browser_worker.run(scenario())


def test_no_downloads_and_no_service_workers(browser_worker: Worker) -> None:
    register = (  # how many service workers the page has after registering one
        "navigator.serviceWorker.register('/sw.js').catch(() => null)"
        ".then(() => navigator.serviceWorker.getRegistrations()).then(found => found.length)"
    )

    async def scenario() -> None:
        async with browsing(ALLOW_LOOPBACK, browser_worker.shared) as tools:
            with serve_pages() as (base, paths):
                download = await call(tools, "browser_navigate", url=base + "/report.bin")
                assert "Download" in download["error"]
                await call(tools, "browser_navigate", url=base + "/next")
                worker = await call(tools, "browser_console", expression=register)
                assert worker["result"] == 0 and "/sw.js" not in paths

    browser_worker.run(scenario())


PEER_CONNECTIONS = """(async () => {
  const servers = [{urls: 'stun:127.0.0.1:PORT'},
                   {urls: 'turn:127.0.0.1:PORT?transport=udp', username: 'u', credential: 'p'}];
  const found = [];
  for (let i = 0; i < 3; i++) {
    const pc = new RTCPeerConnection({iceServers: servers, iceCandidatePoolSize: 2});
    pc.onicecandidate = e => { if (e.candidate) found.push(e.candidate.candidate); };
    pc.createDataChannel('probe');
    await pc.setLocalDescription(await pc.createOffer());
  }
  await new Promise(done => setTimeout(done, 3000));
  return found.length;
})()"""


def test_webrtc_sends_no_udp_around_the_proxy(each_build: Build) -> None:
    # STUN and TURN over UDP would reach any address: the proxy only sees TCP. The canary is a
    # UDP socket on 127.0.0.1 that the page's peer connections are pointed at. Each build reads
    # a switch of its own (tools/browser/host.py): both are checked.
    canary = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    canary.bind(("127.0.0.1", 0))
    canary.setblocking(False)
    expression = PEER_CONNECTIONS.replace("PORT", str(canary.getsockname()[1]))

    async def scenario() -> None:
        async with browsing(each_build.config, each_build.worker.shared) as tools:
            with serve_pages() as (base, _):
                await call(tools, "browser_navigate", url=base + "/next")
                gathered = await call(tools, "browser_console", expression=expression)
                assert "error" not in gathered, gathered  # the peer connections were made

    with canary:
        each_build.worker.run(scenario())
        packets = []
        with contextlib.suppress(BlockingIOError):
            while True:
                packets.append(canary.recv(2048))
    assert len(packets) == 0, f"{len(packets)} UDP packets reached the canary"
