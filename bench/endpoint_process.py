"""The simulated endpoint in a process of its own, for the benchmarks (`throughput.py`,
`scale.py`): started and stopped over a pipe, reporting its statistics and CPU seconds."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.process
import resource
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import uvloop

from agent.servers.simulated.server import SimulatedEndpoint


def _serve(conn: Connection, latency: float, rate_429: float, policy: str = "tool_then_answer") -> None:
    """The simulated endpoint in a process of its own, as a real endpoint is: it shares the two
    cores with the runner, but not this process's interpreter lock with the sampler. It runs on
    uvloop, as the workers do, so that the stand-in for a remote server takes less of the
    runner's cores."""
    endpoint = SimulatedEndpoint(
        latency=latency, rate_429=rate_429, retry_after=0.5, record=False, policy=policy
    )
    uvloop.run(_serve_until_told(endpoint, conn))


async def _serve_until_told(endpoint: SimulatedEndpoint, conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    told = asyncio.Event()
    loop.add_reader(conn.fileno(), told.set)  # the benchmark writes once the run is over
    ready: list[resource.struct_rusage] = []

    def announce() -> None:
        ready.append(resource.getrusage(resource.RUSAGE_SELF))
        conn.send(endpoint.base_url)

    server = asyncio.create_task(endpoint.serve_forever(on_ready=announce))
    await told.wait()
    loop.remove_reader(conn.fileno())
    conn.recv()
    done = resource.getrusage(resource.RUSAGE_SELF)
    stats = endpoint.stats
    server.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await server
    cpu = (done.ru_utime - ready[0].ru_utime) + (done.ru_stime - ready[0].ru_stime)
    conn.send({"stats": stats.__dict__, "cpu_s": cpu})


class Endpoint(NamedTuple):
    """The simulated endpoint's process, and our end of the pipe to it."""

    conn: Connection
    process: multiprocessing.process.BaseProcess
    base_url: str

    def stop(self) -> dict[str, Any]:
        """Stop it; its statistics and CPU seconds."""
        self.conn.send("stop")
        report: dict[str, Any] = self.conn.recv()
        self.process.join()
        return report


def start_endpoint(latency: float, rate_429: float, policy: str = "tool_then_answer") -> Endpoint:
    ours, theirs = multiprocessing.Pipe()
    args = (theirs, latency, rate_429, policy)
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=args)
    server.start()
    theirs.close()  # ours.recv() then fails, not hangs, if the endpoint dies before it listens
    return Endpoint(ours, server, ours.recv())
