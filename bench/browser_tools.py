"""What the browser tools cost: latency of a conversation's first browser call, and memory of a
browser run.

    python bench/browser_tools.py [--cycles 10] [--conversations 32] [--workers 2]
                                  [--executables chromium-headless-shell,chromium]

Pages are served on 127.0.0.1 (http.server, a small page with a link, a form and an image);
the model is the simulated endpoint. No network beyond loopback.

  latency  open + navigate + snapshot, as a conversation's first browser call: the first one
           in a worker also starts Playwright's driver and Chromium; later ones open only a
           browser context and its policy proxy. Then, on an open page, navigate alone and a
           snapshot alone. Medians over --cycles.
  memory   the real batch_runner.py, --distribution=browser_use, --conversations prompts at
           once (each navigates, takes a full snapshot, answers; the endpoint answers after
           1 s so all conversations hold their browser context together): peak PSS and peak
           RSS summed over the runner's process tree (Chromium and Playwright's driver included),
           and the CPU time of that tree.

Each Chromium build named in --executables is measured in turn, in the same sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.protocols import SandboxSpec, ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.toolbox.context import ConversationContext, Resources
from tools.browser import TOOLSET

REPO = Path(__file__).resolve().parent.parent
PAGE = """<!doctype html><title>Bench page</title><h1>A page to browse</h1>
<p>Some text.</p><a href="/">Home</a><form><input name="q" aria-label="Query"><button>Go</button></form>
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt="pixel">"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class TreeMemory(threading.Thread):
    """Peak PSS and peak RSS sum of a process and all its descendants, sampled at 10 Hz, and
    the CPU time of every process seen in the tree (as last sampled: a process's last 0.1 s
    before it exits is missed)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_pss_kib, self.peak_rss_kib = pid, 0, 0
        self.cpu_ticks: dict[int, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            pss = rss = 0
            for pid, ticks in self._tree().items():
                values = _rollup(pid)
                pss, rss = pss + values.get("Pss:", 0), rss + values.get("Rss:", 0)
                self.cpu_ticks[pid] = max(self.cpu_ticks.get(pid, 0), ticks)
            self.peak_pss_kib, self.peak_rss_kib = max(self.peak_pss_kib, pss), max(self.peak_rss_kib, rss)

    def _tree(self) -> dict[int, int]:
        """The tree's processes and the CPU time (user + system ticks) of each so far."""
        parents: dict[int, list[int]] = {}
        ticks: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rpartition(")")[2].split()
                except OSError:
                    continue
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
                ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
        found, stack = {}, [self.pid]
        while stack:
            pid = stack.pop()
            found[pid] = ticks.get(pid, 0)
            stack += parents.get(pid, [])
        return found


def _rollup(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return {}
    return {line.split()[0]: int(line.split()[1]) for line in lines[1:] if line.endswith("kB")}


def serve_page(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    (root / "index.html").write_text(PAGE)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


async def call(context: ConversationContext, name: str, **args: Any) -> Any:
    handler = next(spec.handler for spec in TOOLSET.tools if spec.name == name)
    assert handler is not None
    result = await handler(args, context)
    if "error" in result:
        raise RuntimeError(f"{name}: {result['error']}")
    return result


async def first_call(config: ToolConfig, shared: Resources, url: str) -> float:
    """open + navigate + snapshot in a new conversation, seconds; its context closed after."""
    context = ConversationContext(config, None, SandboxSpec("bench", "p"), None, shared)  # type: ignore[arg-type]
    try:
        start = time.perf_counter()
        await call(context, "browser_navigate", url=url)
        await call(context, "browser_snapshot")
        return time.perf_counter() - start
    finally:
        await context.aclose()


def ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


async def latency(config: ToolConfig, url: str, cycles: int) -> dict[str, float]:
    shared = Resources()
    try:
        first = await first_call(config, shared, url)
        later = [await first_call(config, shared, url) for _ in range(cycles)]
        context = ConversationContext(config, None, SandboxSpec("bench", "q"), None, shared)  # type: ignore[arg-type]
        navigate, snapshot = [], []
        for _ in range(cycles):
            start = time.perf_counter()
            await call(context, "browser_navigate", url=url)
            navigate.append(time.perf_counter() - start)
            start = time.perf_counter()
            await call(context, "browser_snapshot")
            snapshot.append(time.perf_counter() - start)
        await context.aclose()
    finally:
        await shared.aclose()
    return {
        "first_in_worker_ms": round(first * 1000, 1),
        "later_ms": ms(later),
        "navigate_ms": ms(navigate),
        "snapshot_ms": ms(snapshot),
    }


def memory(executable: str, url: str, conversations: int, workers: int, workdir: Path) -> dict[str, Any]:
    dataset = workdir / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": f"Browse {i}"}) + "\n" for i in range(conversations)))
    calls = [("browser_navigate", json.dumps({"url": url})), ("browser_snapshot", '{"full": true}')]
    turns = [Turn(tool_calls=(c,), reasoning="Browse.") for c in calls] + [
        Turn(content="ok", reasoning="Done.")
    ]
    with SimulatedEndpoint(latency=1.0) as endpoint:
        endpoint.set_default_script([dataclasses.replace(t) for t in turns])
        argv = [
            sys.executable, str(REPO / "batch_runner.py"), f"--dataset_file={dataset}",
            "--run_name=bench", f"--output_dir={workdir / 'out'}", "--distribution=browser_use",
            "--allow_hosts=127.0.0.1", "--allow_missing_toolsets", f"--num_workers={workers}",
            f"--browser_executable={executable}",
            f"--batch_size={conversations}", f"--base_url={endpoint.base_url}", "--api_key=sk-bench-0000",
        ]  # fmt: skip
        start = time.monotonic()
        env = {**os.environ, "TMPDIR": str(workdir)}
        runner = subprocess.Popen(
            argv, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        sampler = TreeMemory(runner.pid)
        sampler.start()
        _out, err = runner.communicate()
        sampler.stop.set()
        sampler.join()
    if runner.returncode != 0:
        raise RuntimeError(f"the runner failed: {err.decode()[-2000:]}")
    lines = (workdir / "out" / "bench" / "trajectories.jsonl").read_text().splitlines()
    used = sum(json.loads(line)["tool_stats"]["browser_navigate"]["success"] for line in lines)
    return {
        "conversations": conversations,
        "workers": workers,
        "navigated": used,
        "wall_s": round(time.monotonic() - start, 1),
        "peak_pss_mb": round(sampler.peak_pss_kib / 1024),
        "peak_rss_sum_mb": round(sampler.peak_rss_kib / 1024),
        "cpu_s": round(sum(sampler.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK"), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executables", default="chromium-headless-shell,chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, url = serve_page(Path(tmp))
        try:
            for executable in args.executables.split(","):
                config = ToolConfig(allow_hosts=("127.0.0.1",), browser_executable=executable)
                run = Path(tmp) / executable
                run.mkdir()
                measured = {
                    "latency": asyncio.run(latency(config, url, args.cycles)),
                    "memory": memory(executable, url, args.conversations, args.workers, run),
                }
                print(json.dumps({"executable": executable, **measured}))
        finally:
            server.shutdown()


if __name__ == "__main__":
    main()
