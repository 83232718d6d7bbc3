"""How fast the simulated endpoint alone answers a burst: N chat calls sent at once, as the end
of a generation of conversations sends them (`scale.py`'s conversations all take the same
latency, so they finish, and call again, together).

    cd bench && python endpoint_burst.py [--calls=1024,2048,4096] [--latency=10] [--processes=1,2]

The body is a real one: the runner's first call for a `terminal_only` prompt, recorded from a
one-prompt run. The client is cheap on purpose (raw sockets, the requests written as bytes
prepared beforehand, the replies read with a selector), so that what spreads the replies is the
endpoint's work and not the client's. Prints, per burst, when the replies came (seconds after
each request was written, minus the latency: 0 for an endpoint with no cost) and the
endpoint's CPU per call, with the endpoint in each number of processes given (sharing its port).
"""

from __future__ import annotations

import argparse
import json
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from endpoint_process import start_endpoint
from throughput import ROOT, _dataset

from agent.servers.simulated.server import SimulatedEndpoint


def first_call_body() -> bytes:
    """The body of the runner's first model call for one `terminal_only` prompt."""
    endpoint = SimulatedEndpoint(latency=0.0, record=True)
    endpoint.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-burst-") as tmp:
            dataset = Path(tmp) / "one.jsonl"
            _dataset(dataset, 1)
            cmd = [
                sys.executable, str(ROOT / "batch_runner.py"), f"--dataset_file={dataset}", "--batch_size=1",
                "--run_name=one", f"--output_dir={tmp}", f"--base_url={endpoint.base_url}", "--api_key=bench",
                "--model=sim-model", "--num_workers=1", "--distribution=terminal_only", "--sandbox=local",
            ]  # fmt: skip
            subprocess.run(cmd, check=True, cwd=tmp, capture_output=True)
        chats = [r for r in endpoint.requests if r.path.endswith("/chat/completions")]
        return json.dumps(chats[0].body).encode()  # as parsed: the same JSON, compactly spaced or not
    finally:
        endpoint.stop()


def burst(base_url: str, body: bytes, calls: int) -> list[float]:
    """Send `calls` requests on as many connections at once; per request, seconds from its
    write to its reply's end (the server closes the connection: `Connection: close`)."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    head = (
        f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer bench\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    request = head + body
    sockets = [socket.create_connection((host, port)) for _ in range(calls)]
    written: dict[socket.socket, float] = {}
    for sock in sockets:
        sock.sendall(request)
        written[sock] = time.monotonic()
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    replies = {sock: b"" for sock in sockets}
    ended: list[float] = []
    while len(ended) < calls:
        for key, _ in selector.select(timeout=60):
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            if chunk := conn.recv(1 << 16):
                replies[conn] += chunk
                continue
            ended.append(time.monotonic() - written[conn])
            if not replies[conn].startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"the endpoint answered: {replies[conn][:200]!r}")
            selector.unregister(conn)
            conn.close()
    return ended


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", default="1024,2048,4096")
    parser.add_argument("--latency", type=float, default=10.0)
    parser.add_argument("--processes", default="1")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    body = first_call_body()
    cases = [(int(c), int(p)) for c in args.calls.split(",") for p in args.processes.split(",")]
    for calls, processes in cases:
        server = start_endpoint(args.latency, 0.0, processes=processes)
        late = sorted(t - args.latency for t in burst(server.base_url, body, calls))
        report = server.stop()
        print(json.dumps({
            "calls": calls,
            "endpoint_processes": processes,
            "body_bytes": len(body),
            "reply_after_latency_s": {
                "min": round(late[0], 3), "median": round(statistics.median(late), 3),
                "p90": round(late[int(0.9 * (calls - 1))], 3), "max": round(late[-1], 3),
            },
            "endpoint_cpu_ms_per_call": round(1000 * report["cpu_s"] / calls, 3),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
