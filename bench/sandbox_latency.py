"""Sandbox start latency per backend: what one prompt pays to get, use and drop its sandbox.

    python bench/sandbox_latency.py [--cycles 10] [--concurrency 4] [--think 0.5]

Backends measured: local (the baseline), bwrap, docker (DOCKER_HOST) and podman (PODMAN_HOST,
through the same docker backend); unavailable ones are listed with the reason. No network is
used. Per backend, medians over the cycles of:

  cycle      open + first command (`true`) + close, back to back
  first      open until the first command has returned (includes container creation)
  exec       a later command
  files      write_file + read_file of 4 KiB
  close      leaving the `async with` block (container removal / directory deletion)
  hidden     first command after a simulated model call of --think seconds: the container is
             created in the background while the model thinks, so this is what a prompt waits
  parallel   sandboxes per second with --concurrency whole cycles at once on one event loop
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.protocols import SandboxFactory, SandboxSpec
from agent.sandboxes import SandboxOptions, sandbox_factory, unavailable_reason

COLUMNS = ("cycle", "first", "exec", "files", "close", "hidden")


@contextmanager
def engine(url: str | None) -> Iterator[None]:
    """DOCKER_HOST set to `url` for the duration (the docker backend reads it)."""
    before = os.environ.get("DOCKER_HOST")
    if url:
        os.environ["DOCKER_HOST"] = url
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = before


async def one_cycle(factory: SandboxFactory, key: str, think: float) -> dict[str, float]:
    timings: dict[str, float] = {}
    start = time.perf_counter()
    async with factory(SandboxSpec("bench", key)) as sandbox:
        await sandbox.exec("true", timeout=60)
        timings["first"] = time.perf_counter() - start
        mark = time.perf_counter()
        await sandbox.exec("true", timeout=60)
        timings["exec"] = time.perf_counter() - mark
        mark = time.perf_counter()
        await sandbox.write_file("bench.bin", b"x" * 4096)
        await sandbox.read_file("bench.bin")
        timings["files"] = time.perf_counter() - mark
        mark = time.perf_counter()
    timings["close"] = time.perf_counter() - mark
    timings["cycle"] = timings["first"] + timings["close"]
    async with factory(SandboxSpec("bench", key + "-think")) as sandbox:
        await asyncio.sleep(think)
        mark = time.perf_counter()
        await sandbox.exec("true", timeout=60)
        timings["hidden"] = time.perf_counter() - mark
    return timings


async def parallel_rate(factory: SandboxFactory, concurrency: int, count: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def cycle(index: int) -> None:
        async with gate, factory(SandboxSpec("bench", f"parallel-{index}")) as sandbox:
            await sandbox.exec("true", timeout=60)

    start = time.perf_counter()
    await asyncio.gather(*(cycle(i) for i in range(count)))
    return count / (time.perf_counter() - start)


async def cycles(factory: SandboxFactory, args: argparse.Namespace) -> tuple[list[dict[str, float]], float]:
    await one_cycle(factory, "warmup", 0)  # image checks and first connections are paid once per run
    runs = [await one_cycle(factory, f"cycle-{i}", args.think) for i in range(args.cycles)]
    return runs, await parallel_rate(factory, args.concurrency, args.cycles * 2)


def measure(label: str, options: SandboxOptions, url: str | None, args: argparse.Namespace) -> None:
    with engine(url):
        reason = unavailable_reason(options)
        if reason is not None:
            print(f"{label:<8} unavailable: {reason}")
            return
        runs, rate = asyncio.run(cycles(sandbox_factory(options), args))
    medians = {name: statistics.median(run[name] for run in runs) * 1000 for name in runs[0]}
    print(f"{label:<8} " + " ".join(f"{medians[c]:>8.1f}" for c in COLUMNS) + f" {rate:>9.1f}/s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--think", type=float, default=0.5, help="simulated model call, seconds")
    args = parser.parse_args()
    print(f"medians over {args.cycles} cycles, milliseconds; parallel: {args.concurrency} at once")
    print(f"{'backend':<8} " + " ".join(f"{c:>8}" for c in COLUMNS) + f" {'parallel':>11}")
    measure("local", SandboxOptions(backend="local"), None, args)
    measure("bwrap", SandboxOptions(backend="bwrap"), None, args)
    for label, variable in (("docker", "DOCKER_HOST"), ("podman", "PODMAN_HOST")):
        url = os.environ.get(variable)
        if url:
            measure(label, SandboxOptions(backend="docker"), url, args)
        else:
            print(f"{label:<8} skipped: {variable} is not set")


if __name__ == "__main__":
    main()
