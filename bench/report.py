"""Report benchmark: `report.html` of synthetic runs of 1,000 and 100,000 entries: the time to
write it (wall and CPU), the file's size, the generating process's peak RSS, and the page's load time in
headless Chromium (/usr/bin/chromium) until the trajectory browser is filled.

    python bench/report.py                 # 1,000 and 100,000 entries
    python bench/report.py --sizes=5000    # other sizes

Synthetic entries have the shape of real ones (the system prompt of two toolsets' schemas,
1-6 assistant turns with reasoning, tool calls and results, 21-tool `tool_stats`), with 5 %
discarded and 2 % failures beside them. `write_synthetic_run` is also used by the tests.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TOOLS = ("terminal", "read_file", "write_file", "patch", "search_files", "web_search", "web_extract")
ALL_TOOLS = sorted(
    [
        *TOOLS,
        *(f"browser_{n}" for n in ("back", "click", "type", "navigate")),
        "process",
        "vision_analyze",
        "image_generate",
        "mixture_of_agents",
        "browser_snapshot",
        "browser_scroll",
        "browser_press",
        "browser_console",
        "browser_get_images",
        "browser_vision",
    ]
)
SYSTEM = (
    "You are a function calling AI model. Here are the available tools:\n<tools>\n"
    + json.dumps(
        [{"name": t, "description": f"The {t} tool. " * 12, "parameters": {"type": "object"}} for t in TOOLS]
    )
    + "\n</tools>"
)
OUTCOMES = (("completed", 0.88), ("max_iterations", 0.05), ("truncated", 0.05), ("gave_up", 0.02))
START = datetime(2026, 1, 1, 12, 0, 0)


def _gpt_turn(rng: random.Random, calls: list[str]) -> str:
    think = f"<think>\nStep {rng.randrange(100)}: I should look at the files before answering.\n</think>\n"
    arguments = {"command": "ls -la /workspace"}
    blocks = "".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': arguments})}\n</tool_call>\n" for n in calls
    )
    return (think + blocks).rstrip() if calls else think + "The answer is 42. " * rng.randrange(1, 30)


def _results(rng: random.Random, calls: list[str], failed: list[str]) -> str:
    blocks = []
    for position, name in enumerate(calls):
        error = "No such file" if rng.random() < 0.08 else None
        if error:
            failed.append(name)
        content = {"output": "total 8\ndrwxr-xr-x 2 root root 4096 .\n" * rng.randrange(1, 8), "error": error}
        payload = {"tool_call_id": f"call_{position}", "name": name, "content": content}
        blocks.append(f"<tool_response>\n{json.dumps(payload)}\n</tool_response>")
    return "\n".join(blocks)


def synthetic_entry(index: int, rng: random.Random) -> dict[str, Any]:
    """One trajectory entry in the runner's format, with random turns, tools and outcome."""
    turns: list[dict[str, str]] = [{"from": "system", "value": SYSTEM}]
    turns.append({"from": "human", "value": f"Task {index}: inspect the workspace and report. " * 3})
    called: list[str] = []
    failed: list[str] = []
    for _ in range(rng.randrange(0, 5)):
        calls = [rng.choice(TOOLS) for _ in range(rng.choice((1, 1, 1, 2)))]
        called += calls
        turns.append({"from": "gpt", "value": _gpt_turn(rng, calls)})
        turns.append({"from": "tool", "value": _results(rng, calls, failed)})
    turns.append({"from": "gpt", "value": _gpt_turn(rng, [])})
    outcome = rng.choices([o for o, _ in OUTCOMES], [w for _, w in OUTCOMES])[0]
    prompt_tokens = rng.randrange(800, 30_000)
    stats = {
        t: {
            "count": called.count(t),
            "success": called.count(t) - failed.count(t),
            "failure": failed.count(t),
        }
        for t in ALL_TOOLS
    }
    return {
        "prompt_index": index,
        "conversations": turns,
        "metadata": {
            "batch_num": index // 100,
            "timestamp": (START + timedelta(seconds=index * 0.05)).isoformat(),
            "model": "synthetic/model",
            "prompt_key": f"{index:020x}:0",
            "outcome": outcome,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": rng.randrange(50, 4000),
                "total_tokens": prompt_tokens + 2000,
            },
        },
        "completed": outcome == "completed",
        "partial": outcome != "completed",
        "api_calls": len([t for t in turns if t["from"] == "gpt"]),
        "toolsets_used": sorted(rng.sample(("terminal", "file", "web"), rng.randrange(1, 4))),
        "tool_stats": stats,
        "tool_error_counts": {t: s["failure"] for t, s in stats.items()},
    }


def write_synthetic_run(run_dir: Path, entries: int, seed: int = 0) -> None:
    """A run directory with `entries` prompts: ~93 % in trajectories.jsonl, 5 % discarded
    (no_reasoning), 2 % failed (failures.jsonl), and a statistics.json without a timeline."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    with (
        (run_dir / "trajectories.jsonl").open("w") as out,
        (run_dir / "discarded.jsonl").open("w") as dis,
        (run_dir / "failures.jsonl").open("w") as fail,
    ):
        for index in range(entries):
            roll, entry = rng.random(), synthetic_entry(index, rng)
            key = entry["metadata"]["prompt_key"]
            if roll < 0.05:
                record = {"prompt_key": key, "prompt_index": index, "reason": "no_reasoning", "entry": entry}
                dis.write(json.dumps(record) + "\n")
            elif roll < 0.07:
                record = {
                    "prompt_key": key,
                    "prompt_index": index,
                    "error_class": "server_error",
                    "message": "HTTP 503 upstream error",
                    "attempt": 1,
                }
                fail.write(json.dumps(record) + "\n")
            else:
                out.write(json.dumps(entry) + "\n")
    statistics = {
        "run_name": run_dir.name,
        "model": "synthetic/model",
        "distribution": "synthetic",
        "total_prompts": entries,
        "merged": True,
    }
    (run_dir / "statistics.json").write_text(json.dumps(statistics))


def generate(run_dir: Path) -> dict[str, float]:
    """Write the report in this process; its time and the process's peak RSS."""
    sys.path.insert(0, str(REPO))
    from agent.report.build import RunReport

    started, cpu = time.perf_counter(), time.process_time()
    path = RunReport(run_dir).write()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "cpu_seconds": cpu, "bytes": path.stat().st_size, "peak_rss_mb": peak}


def load_seconds(report: Path) -> float:
    """Chromium: from navigation to the browser's list filled (the page's script has run)."""
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        page = browser.new_page()
        started = time.perf_counter()
        page.goto(report.as_uri(), wait_until="load")
        page.wait_for_selector("#entry-list tbody tr")
        seconds = time.perf_counter() - started
        browser.close()
    return seconds


def measure(entries: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / f"synthetic_{entries}"
        write_synthetic_run(run_dir, entries)
        size = (run_dir / "trajectories.jsonl").stat().st_size
        child = subprocess.run(
            [sys.executable, __file__, "--generate", str(run_dir)], capture_output=True, text=True, check=True
        )
        figures: dict[str, float] = json.loads(child.stdout)
        figures["input_mb"] = size / 1e6
        figures["load_seconds"] = load_seconds(run_dir / "report.html")
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # the measured child
    args = parser.parse_args()
    if args.generate:
        print(json.dumps(generate(args.generate)))
        return
    print("| entries | trajectories.jsonl | report.html | write time (CPU) | peak RSS | load in Chromium |")
    print("|---|---|---|---|---|---|")
    for entries in (int(size) for size in args.sizes.split(",")):
        f = measure(entries)
        print(
            f"| {entries:,} | {f['input_mb']:.0f} MB | {f['bytes'] / 1e6:.2f} MB | "
            f"{f['seconds']:.2f} s ({f['cpu_seconds']:.2f} s) | "
            f"{f['peak_rss_mb']:.0f} MB | {f['load_seconds']:.2f} s |",
            flush=True,
        )


if __name__ == "__main__":
    main()
