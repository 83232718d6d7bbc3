"""Soak check (not collected by pytest): kill a random worker of real runs, check every exit code.

    python -m bench.soak_worker_kills [runs] [seed]

Each run: 12 prompts (2 without reasoning, discarded), 2 workers, a random --max_inflight, a
tool call sleeping 0–1.5 s; after a random pause one worker is SIGKILLed (a random one, or one
running no command when there is such). The run replaces it and requeues its prompts, so each
run must exit 0 with every prompt in trajectories.jsonl or discarded.jsonl exactly once and no
failure record (one loss costs a prompt one attempt of --max_prompt_attempts=2).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    BatchCLI,
    commands_of,
    human_prompt,
    kill_started,
    read_jsonl,
    tool_then_answer,
    trajectory_prompts,
    worker_pids,
    write_dataset,
)


def one_run(cli: BatchCLI, name: str, prompts: list[str], rng: random.Random) -> dict[str, Any]:
    flags = ("--dataset_file=d.jsonl", "--batch_size=4", f"--run_name={name}", "--num_workers=2")
    proc = cli.start(*flags, f"--max_inflight={rng.choice([2, 4, 8, 64])}", log_name=name)
    time.sleep(rng.uniform(0.5, 4.0))
    workers = worker_pids(proc.pid)
    idle = [w for w in workers if not commands_of(w)]
    victim = rng.choice(idle if idle and rng.random() < 0.5 else workers) if workers else None
    if victim is not None:
        os.kill(victim, signal.SIGKILL)
    code = proc.wait(timeout=300)
    run_dir = cli.run_dir(name)
    kept = trajectory_prompts(run_dir)
    dropped = Counter(human_prompt(d["entry"]) for d in read_jsonl(run_dir / "discarded.jsonl"))
    missing = sum((Counter(prompts) - kept - dropped).values())
    failures = read_jsonl(run_dir / "failures.jsonl")
    failed_prompts = {prompts[f["prompt_index"]] for f in failures}
    problems = []
    if code != 0 or missing:
        problems.append(f"exit {code} with {missing} missing")
    if any(n > 1 for n in kept.values()) or any(n > 1 for n in dropped.values()):
        problems.append("a prompt is in the output twice")
    if failures:
        problems.append(f"failure records {failures}")
    if failed_prompts & (set(kept) | set(dropped)):
        problems.append("a failed prompt has an outcome")
    return {"code": code, "missing": missing, "killed": victim is not None, "idle": victim in idle,
            "lost": len(failures), "problems": problems}  # fmt: skip


def main(runs: int, seed: int) -> int:
    rng = random.Random(seed)
    prompts = [f"Soak {i}" for i in range(12)]
    results = []
    with tempfile.TemporaryDirectory() as tmp, SimulatedEndpoint() as endpoint:
        for i, prompt in enumerate(prompts):
            endpoint.script(
                prompt, tool_then_answer(reasoning=i >= 2, command=f"sleep {rng.uniform(0, 1.5):.2f}")
            )
        cli = BatchCLI(Path(tmp), endpoint)
        write_dataset(Path(tmp) / "d.jsonl", [{"prompt": p} for p in prompts])
        try:
            for n in range(runs):
                result = one_run(cli, f"soak{n}", prompts, rng)
                results.append(result)
                print(n, result, flush=True)
        finally:
            kill_started()
    killed = [r for r in results if r["killed"]]
    lies = sum(1 for r in killed if r["code"] == 0 and r["missing"])
    exits = Counter(r["code"] for r in killed)
    print(f"runs {len(results)}, worker kills {len(killed)} ({sum(1 for r in killed if r['idle'])} idle), "
          f"exit 0: {exits[0]}, exit 1: {exits[1]}, "
          f"prompts missing at exit 0: {sum(r['missing'] for r in killed if r['code'] == 0)} "
          f"({lies} runs), runs with problems: {sum(1 for r in results if r['problems'])}")  # fmt: skip
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 60, int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    )
