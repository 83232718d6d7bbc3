"""CPU per model call: our client (the openai SDK over our aiohttp transport) against the same
request sent with bare aiohttp, both to the simulated endpoint running in a subprocess.

    python bench/model_call.py [--calls=2000] [--inflight=64]

The difference is what the SDK costs per call; the bare figure is the floor of any Python
HTTP client here. Also times a process start (`bash -c 'echo hello'`, `/bin/true`), the
floor of a tool call that runs a real shell.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp

from agent.llm.client import OpenAIChatModel
from agent.protocols import ChatRequest

MESSAGES = [{"role": "user", "content": "Benchmark task number 1: list the files."}]


def _cpu(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def _measure(call: Callable[[], Awaitable[object]], calls: int, inflight: int) -> float:
    await call()  # warm: connection, lazy imports
    gate = asyncio.Semaphore(inflight)

    async def one() -> None:
        async with gate:
            await call()

    before = _cpu()
    await asyncio.gather(*(one() for _ in range(calls)))
    return 1000 * (_cpu() - before) / calls


async def _sdk(base_url: str, calls: int, inflight: int) -> float:
    model = OpenAIChatModel(base_url=base_url, api_key="bench", model="sim", max_connections=inflight + 8)
    request = ChatRequest(messages=MESSAGES, tools=[])
    try:
        return await _measure(lambda: model.complete(request), calls, inflight)
    finally:
        await model.aclose()


async def _bare(base_url: str, calls: int, inflight: int) -> float:
    body = json.dumps({"model": "sim", "messages": MESSAGES}).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=inflight + 8)) as session:

        async def call() -> object:
            async with session.post(f"{base_url}/chat/completions", data=body, headers=headers) as reply:
                return json.loads(await reply.read())

        return await _measure(call, calls, inflight)


def _process_start_ms(argv: list[str], runs: int = 300) -> float:
    before = _cpu(resource.RUSAGE_CHILDREN) + _cpu()
    for _ in range(runs):
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return 1000 * (_cpu(resource.RUSAGE_CHILDREN) + _cpu() - before) / runs


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=64)
    args = parser.parse_args()
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "agent.servers.simulated", f"--port={port}", "--latency=0"]
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        for _ in range(2):  # alternate, twice: the machine is noisy
            sdk = asyncio.run(_sdk(base_url, args.calls, args.inflight))
            bare = asyncio.run(_bare(base_url, args.calls, args.inflight))
            print(
                json.dumps(
                    {"sdk_cpu_ms_per_call": round(sdk, 3), "bare_aiohttp_cpu_ms_per_call": round(bare, 3)}
                )
            )
        starts = {
            " ".join(argv): round(_process_start_ms(argv), 3)
            for argv in (["bash", "-c", "echo hello"], ["/bin/true"])
        }
        print(json.dumps({"process_start_cpu_ms": starts}))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
