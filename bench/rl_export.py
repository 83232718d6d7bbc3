"""Benchmark of `--export=rl`: time and peak memory (RSS) of the RL export of a synthetic run of
N trajectories with token ids, against the `parquet` export of the same entries measured in the
same run (each export in a fresh process, so its peak is its own; `--child` is that process).

    python -m bench.rl_export [--count=100000] [--turns=4] [--ids=1500] [--workdir=DIR]

(Self-contained, as bench/export.py, whose figures it repeats for `parquet`: the benches do not
import each other as a package.)

Each trajectory is a ShareGPT entry (~5 KB: a question, a tool call, its result, an answer) with
reward columns and `metadata.tokens`, and one `tokens.jsonl` line (`TokenRecord.line()`) of `turns` assistant
turns holding ~`ids` ids in all (a 40% first prompt, then per turn a tool result and a
completion with its logprobs); every 10th one drifted at its second turn. Texts and turns are
drawn from a pool of `POOL` different ones (making each trajectory's own would take the bench
longer than the exports), so a row group still holds as many different ids as its rows would.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import fire

from agent.export.run_export import export_run
from agent.protocols.tokens import TokenDrift, TokenRecord, TurnTokens, floats, ids
from agent.store.layout import TOKENS_FILE, TRAJECTORIES_FILE

REPO = Path(__file__).resolve().parents[1]

VOCAB = 151_000  # a modern tokenizer's vocabulary size
POOL = 1009  # different token bodies (a prime: no row group repeats in step with them)


def _ids(index: int, salt: int, count: int) -> list[int]:
    return [(index * 7919 + salt * 104729 + i * 15485863) % VOCAB for i in range(count)]


def synthetic_record(index: int, turns: int = 4, total: int = 1500) -> TokenRecord:
    """A trajectory's tokens: `turns` assistant turns of ~`total` ids in all."""
    first = total * 2 // 5
    per_turn = (total - first) // turns
    result, completion = per_turn * 2 // 5, per_turn - per_turn * 2 // 5
    kept: list[TurnTokens] = []
    length = 0
    for turn in range(turns):
        given = _ids(index, 2 * turn, first if turn == 0 else result)
        made = _ids(index, 2 * turn + 1, completion)
        logprobs = floats([-((index + i) % 997) / 331.0 for i in range(completion)])
        offset = length - 3 if index % 10 == 0 and turn == 1 else length  # a drift: the last 3 ids
        kept.append(TurnTokens(offset, ids(given), ids(made), logprobs))
        length = offset + len(given) + len(made)
    drift = (
        TokenDrift(1, kept[1].prompt_offset, (1, 2, 3), (4, 5, 6), "completion of turn 0")
        if index % 10 == 0
        else None
    )
    return TokenRecord(f"{index:032x}", f"k{index}", index, tuple(kept), drift)


def _words(index: int, salt: int, count: int) -> str:
    """`count` words that differ from entry to entry (repeated text would compress to nothing)."""
    return " ".join(f"w{(index * 7919 + salt * 104729 + i * 15485863) % 1000003}" for i in range(count))


def _text(index: int) -> dict[str, Any]:
    """Pool member `index`'s ShareGPT entry, as the runner writes one (~5 KB)."""
    call = json.dumps({"name": "terminal", "arguments": {"command": f"ls /data/{index}"}})
    turns = [
        ("system", "You are a function calling AI model. <tools>" + _words(index, 0, 80) + "</tools>"),
        ("human", f"Prompt {index}: " + _words(index, 1, 50)),
        ("gpt", "<think>\n" + _words(index, 2, 120) + "\n</think>\n<tool_call>\n" + call + "\n</tool_call>"),
        ("tool", "<tool_response>\n" + json.dumps({"out": _words(index, 3, 100)}) + "\n</tool_response>"),
        ("gpt", "<think>\n" + _words(index, 5, 40) + "\n</think>\n" + _words(index, 4, 60)),
    ]
    return {
        "conversations": [{"from": who, "value": value} for who, value in turns],
        "metadata": {"model": "m", "batch_num": index // 100, "timestamp": "2026-11-23T00:00:00",
                     "outcome": "completed" if index % 5 else "truncated",
                     "usage": {"prompt_tokens": 900, "completion_tokens": 300, "total_tokens": 1200}},
        "completed": index % 5 != 0, "partial": index % 5 == 0, "api_calls": 2, "toolsets_used": ["terminal"],
        "tool_stats": {"terminal": {"count": 1, "success": 1, "failure": 0}},
    }  # fmt: skip


def synthetic_rl_entry(index: int, record: TokenRecord, texts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Pool member index % POOL's entry (kept in `texts`) as entry `index`, with the reward
    columns and its tokens' id."""
    text = texts.get(index % POOL) or texts.setdefault(index % POOL, _text(index % POOL))
    entry = {**text, "prompt_index": index, "metadata": {**text["metadata"], "prompt_key": f"k{index}"}}
    passed = index % 3 != 0
    entry["metadata"].update(
        prompt_id=f"p{index // 4}",
        sample_index=index % 4,
        reward=1.0 if passed else 0.0,
        verification={"passed": passed, "checks": [{"kind": "answer", "passed": passed}]},
        tokens={"id": record.tokens_id, "turns": len(record.turns), "drift": None},
    )
    return entry


def pooled_record(index: int, pool: dict[int, TokenRecord], turns: int, total: int) -> TokenRecord:
    """Trajectory `index`'s record: its own id and key, the turns of pool member index % POOL."""
    member = pool.get(index % POOL)
    if member is None:
        member = pool[index % POOL] = synthetic_record(index % POOL, turns, total)
    return replace(member, tokens_id=f"{index:032x}", prompt_key=f"k{index}", prompt_index=index)


def write_rl_run(run_dir: Path, count: int, turns: int = 4, total: int = 1500) -> tuple[int, int]:
    """A run directory with `count` trajectories and their tokens.jsonl (streamed); the two
    files' sizes in bytes."""
    run_dir.mkdir(parents=True, exist_ok=True)
    entries, tokens = run_dir / TRAJECTORIES_FILE, run_dir / TOKENS_FILE
    pool: dict[int, TokenRecord] = {}
    lines: dict[int, bytes] = {}  # each pool member's line from its "turns" on
    texts: dict[int, dict[str, Any]] = {}
    with entries.open("w", encoding="utf-8") as text, tokens.open("wb") as sidecar:
        for index in range(count):
            record = pooled_record(index, pool, turns, total)
            text.write(json.dumps(synthetic_rl_entry(index, record, texts), ensure_ascii=False) + "\n")
            if index % POOL not in lines:
                line = record.line()
                lines[index % POOL] = line[line.index(b',"turns":') :]
            head = json.dumps({"tokens_id": record.tokens_id, "prompt_key": record.prompt_key,
                               "prompt_index": index}, separators=(",", ":"))  # fmt: skip
            sidecar.write(head[:-1].encode() + lines[index % POOL])  # = record.line(), 1,000x faster
    return entries.stat().st_size, tokens.stat().st_size


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
    return {
        "format": format_name,
        "entries": report.entries,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),  # the figure to trust on a shared machine
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_before_mb": round(before, 1),
        "file_mb": round(report.files[format_name].stat().st_size / 2**20, 1),
    }


def measure_in_child(run_dir: Path, format_name: str) -> dict[str, Any]:
    """`measure` in a fresh interpreter, so the peak is this export's alone."""
    argv = [sys.executable, "-m", "bench.rl_export", f"--child={run_dir}", f"--child_format={format_name}"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(
    count: int = 100_000,
    turns: int = 4,
    ids: int = 1500,
    workdir: str = "",
    child: str = "",
    child_format: str = "",
) -> None:
    if child:
        print(json.dumps(measure(child, child_format)))
        return
    root = Path(workdir or tempfile.mkdtemp(prefix="bench-rl-export-"))
    run_dir = root / f"run-{count}"
    started = time.perf_counter()
    text, tokens = write_rl_run(run_dir, count, turns, ids)
    took = time.perf_counter() - started
    print(f"{count} trajectories, {turns} turns, ~{ids} ids each: trajectories.jsonl {text / 2**20:.0f} MB, "
          f"tokens.jsonl {tokens / 2**20:.0f} MB (written in {took:.0f} s)", flush=True)  # fmt: skip
    for name in ("parquet", "rl"):  # the baseline first, then the RL export, each in its own process
        print(json.dumps(measure_in_child(run_dir, name)), flush=True)


if __name__ == "__main__":
    fire.Fire(main)
