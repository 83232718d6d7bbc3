"""Benchmark of `--export`: time and peak memory (RSS) of exporting a synthetic run of N
entries to each format, each export in a fresh process so its peak is its own.

    python -m bench.export [--entries=10000,100000] [--formats=parquet,openai,sharegpt] [--workdir=DIR]

The entries are what the runner writes (ShareGPT made by `agent.export.sharegpt.convert` from
an API history: a system turn listing three tools, a call, its result, a final answer, ~4 KB),
with different text, metadata and outcomes per entry. `--child=RUN_DIR --child_format=NAME` is the
measured process: it prints one JSON line (seconds, peak RSS, RSS before the export).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fire

from agent.export.run_export import export_run
from agent.export.sharegpt import convert
from agent.protocols.turns import from_openai_messages

_TOOLS = [
    {
        "name": name,
        "description": f"The {name} tool: " + "does what its name says. " * 8,
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]},
    }
    for name in ("terminal", "read_file", "web_search")
]
_OUTCOMES = ("completed", "completed", "completed", "truncated", "max_iterations")


def _words(index: int, salt: int, count: int) -> str:
    """`count` words that differ from entry to entry (repeated text would compress to nothing)."""
    return " ".join(f"w{(index * 7919 + salt * 104729 + i * 15485863) % 1000003}" for i in range(count))


def synthetic_entry(index: int) -> dict[str, Any]:
    """One trajectory entry as the runner writes it, different for every `index`."""
    arguments = json.dumps({"arg": f"ls /data/{index}"})
    function = {"name": "terminal", "arguments": arguments}
    call = {"id": f"call_{index}", "type": "function", "function": function}
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"Prompt {index}: " + _words(index, 1, 50)},
        {"role": "assistant", "content": "", "reasoning": _words(index, 2, 120), "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": f"call_{index}",
            "content": json.dumps({"out": _words(index, 3, 100)}),
        },
        {"role": "assistant", "content": _words(index, 4, 60), "reasoning": _words(index, 5, 40)},
    ]
    outcome = _OUTCOMES[index % len(_OUTCOMES)]
    return {
        "prompt_index": index,
        "conversations": convert(from_openai_messages(history), _TOOLS).conversations,
        "metadata": {"source": f"s{index % 7}", "level": index % 5 if index % 2 else "hard", "model": "m",
                     "batch_num": index // 100, "timestamp": "2026-11-23T00:00:00", "prompt_key": f"k{index}",
                     "outcome": outcome, "usage": {"prompt_tokens": 900, "completion_tokens": 300,
                                                   "total_tokens": 1200}},
        "completed": outcome == "completed",
        "partial": outcome != "completed",
        "api_calls": 2,
        "toolsets_used": ["terminal"],
        "tool_stats": {"terminal": {"count": 1, "success": 1, "failure": 0}},
        "tool_error_counts": {"terminal": 0},
    }  # fmt: skip


def write_run(run_dir: Path, entries: int) -> int:
    """A run directory whose trajectories.jsonl holds `entries` synthetic entries (streamed);
    its size in bytes."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "trajectories.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for index in range(entries):
            handle.write(json.dumps(synthetic_entry(index), ensure_ascii=False) + "\n")
    return path.stat().st_size


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(run_dir: str, format_name: str) -> dict[str, Any]:
    """In this process: export `format_name` of `run_dir`; seconds and memory."""
    before = _rss_mb()
    started, cpu = time.perf_counter(), time.process_time()
    report = export_run(Path(run_dir), (format_name,))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = report.files[format_name].stat().st_size
    return {
        "format": format_name,
        "entries": report.entries,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),  # the figure to trust on a shared machine
        "peak_rss_mb": round(peak, 1),
        "rss_before_mb": round(before, 1),
        "file_mb": round(size / 2**20, 1),
    }


def measure_in_child(run_dir: Path, format_name: str) -> dict[str, Any]:
    """`measure` in a fresh interpreter, so the peak is this export's alone."""
    argv = [sys.executable, "-m", "bench.export", f"--child={run_dir}", f"--child_format={format_name}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _items(value: Any) -> list[str]:
    """A comma list as Fire hands it over: a tuple when it parsed one, else the text."""
    return [str(v) for v in value] if isinstance(value, (tuple, list)) else str(value).split(",")


def main(
    entries: Any = "10000,100000",
    formats: Any = "parquet,openai,sharegpt",
    workdir: str = "",
    child: str = "",
    child_format: str = "",
) -> None:
    if child:
        print(json.dumps(measure(child, child_format)))
        return
    root = Path(workdir or tempfile.mkdtemp(prefix="bench-export-"))
    for count in (int(n) for n in _items(entries)):
        run_dir = root / f"run-{count}"
        size = write_run(run_dir, count)
        print(f"{count} entries, trajectories.jsonl {size / 2**20:.0f} MB")
        for name in _items(formats):
            print(json.dumps(measure_in_child(run_dir, name)), flush=True)


if __name__ == "__main__":
    fire.Fire(main)
