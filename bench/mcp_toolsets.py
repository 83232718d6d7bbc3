"""MCP toolsets' costs: what a conversation pays to start its server, what each call adds over
a built-in tool, and the memory a conversation holds with its server, each against a baseline
measured in the same run.

    python bench/mcp_toolsets.py                     # both parts (about 2 minutes)
    python bench/mcp_toolsets.py --only=calls --cycles=5
    python bench/mcp_toolsets.py --only=memory --inflight=256 --latency=8

calls (per sandbox backend: local, bwrap): through the runner's own dispatch, in one sandbox
per cycle (opened and warmed by a terminal call first): the first call of the MCP tool `add`
(starts the server in the sandbox: spawn, initialize), later calls of `add`, and terminal
`echo` calls in the same sandbox. start = first call − a warm call. The server is the
stdlib-only test server run by `python3` (what bwrap's rootfs has); on local also the example
notes server written with the SDK (its start is mostly importing the SDK).

memory: the real batch_runner.py against the simulated endpoint (its own process, --latency s
per reply; each prompt makes one tool call, then answers), --inflight prompts in flight on the
local backend: distribution `terminal_only` (the baseline: the tool is `terminal`) vs one whose
only toolset is the MCP server (the tool is its `add`; one server per conversation, alive from
its first call to the conversation's end). PSS of the runner's tree (workers, sandboxes'
processes, MCP servers), sampled: per conversation = (peak − before the first request) ÷ in-flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from endpoint_process import start_endpoint
from throughput import ROOT, _children, _dataset, _memory_kib

from agent.protocols import McpServer, SandboxFactory, SandboxSpec, ToolConfig, ToolSpec
from agent.sandboxes import SandboxOptions, sandbox_factory, unavailable_reason
from agent.toolbox.context import SandboxContext
from agent.toolbox.dispatch import dispatch
from agent.toolbox.extensions import install_extensions
from agent.toolbox.registry import TOOLSETS

STDIO_SERVER = ROOT / "tests" / "support" / "mcp_stdio_server.py"
NOTES_SERVER = ROOT / "examples" / "mcp_notes_server.py"
SERVER_FILE = "bench_server.py"  # its name in the sandbox: the memory sampler counts these


@dataclass(frozen=True)
class CallCase:
    backend: str
    label: str
    server: McpServer
    remote_tool: str  # the server's tool timed
    arguments: Callable[[int], dict[str, Any]]  # of its i-th call
    expect: str  # in the first call's answer


def bench_server(name: str, command: str, source: Path) -> McpServer:
    """A server shipped into the sandbox by `files`; its tools' names prefixed by its own name,
    so that several of them can be registered in this one process."""
    files = ((SERVER_FILE, source.read_bytes()),)
    return McpServer(name=name, command=command, args=(SERVER_FILE,), files=files, tool_prefix=f"{name}_")


CALL_CASES = (
    CallCase("local", "stdlib python3", bench_server("lstd", "python3", STDIO_SERVER), "add",
             lambda i: {"a": i, "b": 1}, "1"),
    CallCase("local", "SDK notes server", bench_server("lsdk", sys.executable, NOTES_SERVER), "add_note",
             lambda i: {"title": f"n{i}", "text": "x"}, "saved"),
    CallCase("bwrap", "stdlib python3", bench_server("bstd", "python3", STDIO_SERVER), "add",
             lambda i: {"a": i, "b": 1}, "1"),
)  # fmt: skip


async def list_server(server: McpServer, sandboxes: SandboxFactory) -> McpServer:
    """The server with its tools, listed as the runner lists it at a run's start."""
    from tools.mcp.listing import listed  # the mcp branch's: imported with the SDK

    return await listed(server, sandboxes, ())


async def timed(call: Callable[[], Any]) -> tuple[float, str]:
    start = time.perf_counter()
    result = await call()
    return (time.perf_counter() - start) * 1000, str(result)


async def one_cycle(
    sandboxes: SandboxFactory,
    config: ToolConfig,
    allowed: dict[str, ToolSpec],
    case: CallCase,
    key: str,
    calls: int,
) -> dict[str, float]:
    tool = f"{case.server.tool_prefix}{case.remote_tool}"
    async with sandboxes(SandboxSpec("bench-mcp", key)) as sandbox:
        context = SandboxContext(sandbox, config)
        try:

            def call(name: str, args: dict[str, Any]) -> Callable[[], Any]:
                return lambda: dispatch(name, json.dumps(args), context, allowed)

            await call("terminal", {"command": "true"})()  # the sandbox is made and warm
            first, answer = await timed(call(tool, case.arguments(0)))
            if case.expect not in answer:
                raise SystemExit(f"the MCP call failed: {answer}")
            warm = [(await timed(call(tool, case.arguments(i + 1))))[0] for i in range(calls)]
            terminal = [(await timed(call("terminal", {"command": "echo hi"})))[0] for _ in range(calls)]
            await sandbox.write_file("hello.txt", b"hello\n")
            read = [(await timed(call("read_file", {"path": "hello.txt"})))[0] for _ in range(calls)]
        finally:
            closing = time.perf_counter()
            await context.aclose()  # stops the server
            stop = (time.perf_counter() - closing) * 1000
    warm_ms = statistics.median(warm)
    return {
        "first": first,
        "warm": warm_ms,
        "start": first - warm_ms,
        "terminal": statistics.median(terminal),
        "read_file": statistics.median(read),
        "stop": stop,
    }


async def call_figures(case: CallCase, args: argparse.Namespace) -> dict[str, float]:
    sandboxes = sandbox_factory(SandboxOptions(backend=case.backend))
    listed = await list_server(case.server, sandboxes)
    config = ToolConfig(mcp_servers=(listed,))
    install_extensions(config)
    allowed = {spec.name: spec for name in ("terminal", "file", listed.name) for spec in TOOLSETS[name].tools}
    await one_cycle(sandboxes, config, allowed, case, "warmup", 2)  # first-use costs paid once per run
    cycles = [
        await one_cycle(sandboxes, config, allowed, case, f"c{i}", args.calls) for i in range(args.cycles)
    ]
    return {name: statistics.median(c[name] for c in cycles) for name in cycles[0]}


def print_calls(label: str, figures: dict[str, float]) -> None:
    terminal, read = figures["terminal"], figures["read_file"]
    print(
        f"{label:<22} start {figures['start']:7.1f} ms (= {figures['start'] / terminal:5.1f} terminal calls)"
        f" | MCP call {figures['warm']:6.2f} ms = {figures['warm'] / terminal:4.2f}x terminal"
        f" ({terminal:6.2f} ms), {figures['warm'] / read:4.2f}x read_file ({read:5.2f} ms)"
        f" | stop {figures['stop']:6.1f} ms",
        flush=True,
    )


def calls_part(args: argparse.Namespace) -> None:
    print(
        f"calls: medians over {args.cycles} cycles of {args.calls} calls each "
        "(terminal: `echo hi`; read_file: 6 bytes)"
    )
    for case in CALL_CASES:
        reason = unavailable_reason(SandboxOptions(backend=case.backend))
        if reason is not None:
            print(f"{case.backend}: unavailable: {reason}")
            continue
        print_calls(f"{case.backend} {case.label}", asyncio.run(call_figures(case, args)))


# --- memory at N conversations in flight ---------------------------------------------------


class TreeSampler(threading.Thread):
    """PSS of the runner's process tree, and how many MCP servers it holds, every 0.5 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.series: list[tuple[float, int, int]] = []  # (monotonic, PSS KiB, servers alive)
        self.stop = threading.Event()

    def sample(self) -> tuple[int, int]:
        pss, servers, stack = 0, 0, [self.pid]
        while stack:
            current = stack.pop()
            pss += _memory_kib(str(current))[1]
            with contextlib.suppress(OSError):  # it ended meanwhile
                servers += SERVER_FILE.encode() in Path(f"/proc/{current}/cmdline").read_bytes()
            stack += _children(current)
        return pss, servers

    def run(self) -> None:
        while not self.stop.is_set():
            self.series.append((time.monotonic(), *self.sample()))
            self.stop.wait(0.5)


def memory_case(name: str, extra: list[str], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    dataset = tmp / f"{name}.jsonl"
    _dataset(dataset, args.inflight)
    endpoint = start_endpoint(args.latency, 0.0)
    cmd = [
        sys.executable, str(ROOT / "batch_runner.py"), f"--dataset_file={dataset}", "--batch_size=1000",
        f"--run_name={name}", f"--output_dir={tmp / 'runs'}", f"--base_url={endpoint.base_url}",
        "--api_key=bench", "--model=sim-model", f"--max_inflight={args.inflight}", "--sandbox=local",
        "--request_timeout=120", "--num_workers=2", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    _, err = proc.communicate()
    sampler.stop.set()
    sampler.join()
    stats = endpoint.stop()["stats"]
    if proc.returncode != 0:
        raise SystemExit(f"{name}: runner exited {proc.returncode}:\n{err.decode()[-3000:]}")
    first = stats["first_request_at"] or 0.0
    before = [pss for at, pss, _ in sampler.series if at <= first]
    base = before[-1] if before else sampler.series[0][1]
    peak = max(pss for _, pss, _ in sampler.series)
    return {
        "case": name,
        "in_flight": args.inflight,
        "peak_endpoint_inflight": stats["peak_inflight"],
        "peak_servers_alive": max(servers for _, _, servers in sampler.series),
        "peak_pss_mb": round(peak / 1024, 1),
        "kib_per_conversation": round((peak - base) / args.inflight, 1),
    }


def memory_part(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as name:
        tmp = Path(name)
        (tmp / SERVER_FILE).write_bytes(STDIO_SERVER.read_bytes())
        entry = {"command": "python3", "args": [SERVER_FILE], "files": {SERVER_FILE: SERVER_FILE}}
        (tmp / "mcp.json").write_text(json.dumps({"mcpServers": {"calc": entry}}))
        distribution = {"mcp_calc": {"description": "the MCP server only", "toolsets": {"calc": 100}}}
        (tmp / "distributions.json").write_text(json.dumps(distribution))
        mcp_flags = [f"--mcp_config={tmp / 'mcp.json'}", f"--distributions_file={tmp / 'distributions.json'}"]
        baseline = memory_case("terminal", ["--distribution=terminal_only"], args, tmp)
        print(json.dumps(baseline), flush=True)
        mcp = memory_case("mcp", [*mcp_flags, "--distribution=mcp_calc"], args, tmp)
        print(json.dumps(mcp), flush=True)
    added = mcp["kib_per_conversation"] - baseline["kib_per_conversation"]
    ratio = mcp["kib_per_conversation"] / max(baseline["kib_per_conversation"], 1.0)
    with_mcp, without = mcp["kib_per_conversation"] / 1024, baseline["kib_per_conversation"] / 1024
    print(
        f"memory at {args.inflight} in flight: {with_mcp:.2f} MiB per conversation with an MCP server vs "
        f"{without:.2f} MiB with terminal ({ratio:.1f}x; +{added / 1024:.2f} MiB each; "
        f"{mcp['peak_servers_alive']} servers alive at the peak)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="warm calls per cycle, of each tool")
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--latency", type=float, default=8.0, help="seconds per simulated model reply")
    parser.add_argument("--only", choices=("calls", "memory"))
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if args.only != "memory":
        calls_part(args)
    if args.only != "calls":
        memory_part(args)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
