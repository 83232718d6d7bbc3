"""Entries and their token sidecar lines as a capturing worker makes them (`agent.batch.records`:
`metadata.tokens` naming a `TokenRecord` line by id), for the parent side's tests."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from agent.batch.backend import Backend, BackendFactory, Tally
from agent.batch.dataset import scan_dataset
from agent.batch.events import Discarded, Finished, WorkerEvent
from agent.batch.jobs import Job
from agent.batch.records import TOKEN_DRIFT
from agent.batch.run import BatchRun
from agent.config.agent_config import AgentConfig
from agent.config.run_config import RunConfig
from agent.protocols import SandboxOptions
from agent.protocols.tokens import TokenDrift, TokenRecord, TurnTokens, floats, ids
from agent.store.jsonl import encode_line
from agent.store.keys import prompt_key


def token_record(key: str, index: int, turns: int = 2, drift: bool = False) -> TokenRecord:
    """A record of `turns` assistant turns: each turn's prompt extends the sequence by 3 ids
    (the tool result's), or, with `drift`, the second turn re-renders 2 ids of the first."""
    made, length = [], 0
    for turn in range(turns):
        offset = length - (2 if drift and turn == 1 else 0)
        prompt = list(range(100 * turn, 100 * turn + (4 if turn == 0 else 3)))
        completion = [500 + turn, 501 + turn, 502 + turn]
        made.append(TurnTokens(offset, ids(prompt), ids(completion), floats([-0.5, -0.25, -0.125])))
        length = offset + len(prompt) + len(completion)
    bent = TokenDrift(1, 5, (501, 502), (9, 9), "completion of turn 0, token 1") if drift else None
    return TokenRecord(uuid.uuid4().hex, key, index, tuple(made), bent)


def entry(
    key: str, index: int, batch: int, record: TokenRecord | None, reasons: tuple[str, ...] = ()
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"prompt_key": key, "batch_num": batch}
    if record is not None:
        drift = (
            None if record.drift is None else {"turn": record.drift.turn, "position": record.drift.position}
        )
        metadata["tokens"] = {"id": record.tokens_id, "turns": len(record.turns), "drift": drift}
    if reasons:
        metadata["discard_reasons"] = list(reasons)
    return {
        "prompt_index": index,
        "conversations": [
            {"from": "human", "value": key},
            *({"from": "gpt", "value": f"turn {t}"} for t in range(len(record.turns) if record else 1)),
        ],
        "metadata": metadata,
        "completed": True,
    }


def key_of(n: int) -> str:
    return prompt_key(f"prompt {n}", 0)


def finished(n: int, batch_size: int, turns: int = 2, drift: bool = False) -> Finished:
    """Prompt `n`'s answer with its sidecar line, as a worker sends it."""
    key, batch = key_of(n), n // batch_size
    record = token_record(key, n, turns, drift)
    line = json.dumps(entry(key, n, batch, record)).encode() + b"\n"
    return Finished(key, batch, n, line, True, "completed", {}, tokens_line=record.line(), token_drift=drift)


def discarded(n: int, batch_size: int, reason: str = "no_reasoning") -> Discarded:
    key = key_of(n)
    record = token_record(key, n)
    made = entry(key, n, n // batch_size, record, (reason,))
    return Discarded(key, n, reason, made, {}, "2026-01-01T00:00:00", tokens_line=record.line())


class TokenBackend:
    """A `RunBackend` double answering each job as a capturing worker would: its entry with
    `metadata.tokens` and the sidecar line beside it; a prompt whose text says "drift" drifted
    (labelled `token_drift`, discarded unless the run keeps it), one that says "skip" is
    discarded (no_reasoning). `delay`: seconds per job, with a tick (the group commit) each."""

    def __init__(
        self,
        config: RunConfig,
        on_event: Callable[[WorkerEvent], None],
        tick: Callable[[], None],
        delay: float,
    ) -> None:
        self.config, self.on_event, self.tick, self.delay = config, on_event, tick, delay
        self.tally = Tally()

    def open(self) -> None:
        return

    def serve(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            self.on_event(self.answer(job))
            if self.delay:
                time.sleep(self.delay)
                self.tick()

    def answer(self, job: Job) -> Finished | Discarded:
        drift = "drift" in job.prompt
        record = token_record(job.key, job.index, turns=1 + job.index % 3, drift=drift)
        reasons = (TOKEN_DRIFT,) if drift else ("no_reasoning",) if "skip" in job.prompt else ()
        made = entry(job.key, job.index, job.batch_num, record, reasons)
        made["conversations"][0]["value"] = job.prompt
        if reasons and not self.config.keeps(reasons[0]):
            return Discarded(job.key, job.index, reasons[0], made, {}, "2026-01-01T00:00:00", record.line())
        line = encode_line(made)
        return Finished(
            job.key, job.batch_num, job.index, line, True, "completed", {}, 1, record.line(), drift
        )

    def stop_feeding(self, reason: str) -> None:
        self.tally.stopped_by = reason

    def cancel(self) -> None:
        return

    def shutdown(self) -> None:
        return


def token_backend(delay: float = 0.0) -> BackendFactory:
    def make(
        config: RunConfig, on_event: Callable[[WorkerEvent], None], on_tick: Callable[[], None]
    ) -> Backend:
        return TokenBackend(config, on_event, on_tick, delay)

    return make


def capture_config(tmp_path: Path, prompts: list[str], **changes: Any) -> RunConfig:
    """A run of `prompts` (written as the dataset) in tmp_path/data/tokens."""
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return RunConfig(
        dataset_file=str(dataset),
        batch_size=4,
        run_name="tokens",
        agent=AgentConfig(capture_tokens="required", token_api="vllm"),
        output_dir=str(tmp_path / "data"),
        distribution="terminal_only",
        sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
        **changes,
    )


def run_capture(config: RunConfig, delay: float = 0.0) -> int:
    """The real `BatchRun` on the token backend; its exit code."""
    scan = scan_dataset(config.dataset_file, backend="local", keys=True)
    return BatchRun(config, Console(quiet=True), backend=token_backend(delay)).run(scan)


def mixed_prompts(count: int) -> list[str]:
    """`count` prompts, every 7th discarded (its sidecar line written, never merged)."""
    return [f"skip {n}" if n % 7 == 6 else f"prompt {n}" for n in range(count)]


if __name__ == "__main__":  # the run a test kills: python -m tests.support.token_entries TMP N
    import sys

    run_capture(capture_config(Path(sys.argv[1]), mixed_prompts(int(sys.argv[2]))), delay=0.01)
