"""The simulated endpoint in a process of its own, for the benchmarks (`throughput.py`,
`scale.py`): started and stopped over a pipe, reporting its statistics and CPU seconds. With
`processes` > 1, that many processes share its port (SO_REUSEPORT), as a real endpoint serves
on many cores: one process answers ~1,500-2,000 calls a second here, and a burst of thousands
of calls at once waits for it (`endpoint_burst.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.process
import resource
from collections import Counter
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import uvloop

from agent.servers.simulated.server import SimulatedEndpoint


def _serve(
    conn: Connection,
    latency: float,
    rate_429: float,
    policy: str = "tool_then_answer",
    port: int | None = None,
) -> None:
    """The simulated endpoint in a process of its own, as a real endpoint is: it shares the two
    cores with the runner, but not this process's interpreter lock with the sampler. It runs on
    uvloop, as the workers do, so that the stand-in for a remote server takes less of the
    runner's cores."""
    endpoint = SimulatedEndpoint(
        latency=latency,
        rate_429=rate_429,
        retry_after=0.5,
        record=False,
        policy=policy,
        port=port or 0,
        reuse_port=port is not None,
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
    """The simulated endpoint's processes, and our ends of the pipes to them."""

    conns: list[Connection]
    processes: Sequence[multiprocessing.process.BaseProcess]
    base_url: str

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.processes if p.pid is not None}

    def stop(self) -> dict[str, Any]:
        """Stop it; its statistics and CPU seconds, summed over its processes (the first
        request the earliest, the last reply the latest; the peak in flight the sum of each
        process's peak, an upper bound when there are several)."""
        for conn in self.conns:
            conn.send("stop")
        reports: list[dict[str, Any]] = [conn.recv() for conn in self.conns]
        for process in self.processes:
            process.join()
        every = [r["stats"] for r in reports]
        firsts = [s["first_request_at"] for s in every if s["first_request_at"] is not None]
        lasts = [s["last_reply_at"] for s in every if s["last_reply_at"] is not None]
        faults: Counter[str] = Counter()
        for stats in every:
            faults.update(stats["faults"])
        stats = {
            "requests_total": sum(s["requests_total"] for s in every),
            "inflight": sum(s["inflight"] for s in every),
            "peak_inflight": sum(s["peak_inflight"] for s in every),
            "faults": dict(faults),
            "first_request_at": min(firsts, default=None),
            "last_reply_at": max(lasts, default=None),
        }
        return {"stats": stats, "cpu_s": sum(r["cpu_s"] for r in reports)}


def start_endpoint(
    latency: float, rate_429: float, policy: str = "tool_then_answer", processes: int = 1
) -> Endpoint:
    conns: list[Connection] = []
    started: list[multiprocessing.process.BaseProcess] = []
    base_url = ""
    try:
        for n in range(processes):
            ours, theirs = multiprocessing.Pipe()
            conns.append(ours)
            port = None if processes == 1 else 0 if n == 0 else int(base_url.rsplit(":", 1)[1].split("/")[0])
            server = multiprocessing.get_context("spawn").Process(
                target=_serve, args=(theirs, latency, rate_429, policy, port)
            )
            server.start()
            started.append(server)
            theirs.close()  # ours.recv() then fails, not hangs, if the endpoint dies before it listens
            url = ours.recv()
            base_url = base_url or url
    except BaseException:  # one died before it listened: the others must not outlive us
        for conn in conns:
            conn.close()
        for process in started:
            process.terminate()
            process.join()
        raise
    return Endpoint(conns, started, base_url)
