"""Figures for runs that heal themselves (not collected by pytest):

    python -m bench.worker_kills [pairs] [prompts] [kill_every_s]

Paired runs of one small dataset (each prompt: a `sleep 0.3` tool call, then an answer) with 2
workers and --max_inflight=8 against the simulated endpoint: undisturbed, then with a random
worker SIGKILLed every `kill_every_s` seconds. Prints each run's prompts/s (prompts over the
runner's wall time, start-up included), its worker losses, and from statistics.json the
seconds from a death (as the parent saw it) to the replacement starting a prompt.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    BatchCLI,
    kill_started,
    read_json,
    tool_then_answer,
    worker_pids,
    write_dataset,
)


def killer(runner: int, every: float, stop: threading.Event, rng: random.Random) -> None:
    while not stop.wait(every):
        workers = worker_pids(runner)
        if workers:
            try:
                os.kill(rng.choice(workers), signal.SIGKILL)
            except ProcessLookupError:
                continue


def one_run(cli: BatchCLI, name: str, kill_every: float | None, rng: random.Random) -> dict[str, Any]:
    flags = ("--dataset_file=d.jsonl", "--batch_size=10", f"--run_name={name}", "--num_workers=2")
    started = time.monotonic()
    proc = cli.start(*flags, "--max_inflight=8", "--max_prompt_attempts=50", log_name=name)
    stop = threading.Event()
    thread = threading.Thread(target=killer, args=(proc.pid, kill_every, stop, rng), daemon=True)
    if kill_every is not None:
        thread.start()
    code = proc.wait(timeout=600)
    wall = time.monotonic() - started
    stop.set()
    stats = read_json(cli.run_dir(name) / "statistics.json")
    losses = stats.get("worker_losses") or {}
    done = stats["completion"]["in_output"]
    return {"name": name, "code": code, "done": done, "wall_s": round(wall, 2),
            "prompts_per_s": round(done / wall, 3), "losses": losses.get("losses"),
            "lost_attempts": losses.get("lost_attempts"),
            "replacement_s": losses.get("replacement_seconds")}  # fmt: skip


def main(pairs: int, prompts: int, kill_every: float) -> int:
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp, SimulatedEndpoint() as endpoint:
        texts = [f"Bench {i}" for i in range(prompts)]
        for text in texts:
            endpoint.script(text, tool_then_answer(command="sleep 0.3"))
        write_dataset(Path(tmp) / "d.jsonl", [{"prompt": t} for t in texts])
        cli = BatchCLI(Path(tmp), endpoint)
        try:
            for pair in range(pairs):
                print(one_run(cli, f"calm{pair}", None, rng), flush=True)
                print(one_run(cli, f"killed{pair}", kill_every, rng), flush=True)
        finally:
            kill_started()
    return 0


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:]]
    sys.exit(
        main(
            int(args[0]) if args else 2,
            int(args[1]) if len(args) > 1 else 60,
            args[2] if len(args) > 2 else 4.0,
        )
    )
