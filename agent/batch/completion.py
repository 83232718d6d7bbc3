"""Whether a run is done, decided from the run directory itself (never from counted events).

Every valid prompt of the dataset is in the output (a result line in a batch file), discarded
by a filter, failed in this invocation, or not started (nor finished: waiting when the run
stopped, or cancelled by the stop). The exit code and the summary's last line, the next step,
follow from that split alone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.batch.dataset import DatasetRow
from agent.protocols import StoredKeys

EXIT_OK, EXIT_FAILURES, EXIT_INTERRUPTED = 0, 1, 130
NAMED = 10  # prompt indices named in the summary, the rest counted


@dataclass
class Completion:
    valid: int = 0
    in_output: int = 0
    discarded: int = 0
    failed: int = 0  # failed in this invocation, no outcome on disk
    not_started: list[int] = field(default_factory=list)  # dataset indices
    interrupted: bool = False
    stopped_by: str | None = None  # "max_cost", "worker_lost", "crash_loop" or None

    @classmethod
    def of(
        cls, rows: Iterable[DatasetRow], stored: StoredKeys, failed_keys: Collection[str], **state: Any
    ) -> Completion:
        """The split of the dataset's `rows` by what `stored` (a fresh scan) holds."""
        done = cls(**state)
        for row in rows:
            done.valid += 1
            if row.key in stored.done:
                done.in_output += 1
            elif row.key in stored.discarded:
                done.discarded += 1
            elif row.key in failed_keys:
                done.failed += 1
            else:
                done.not_started.append(row.index)
        return done

    @property
    def missing(self) -> int:
        return self.failed + len(self.not_started)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILURES if self.missing else EXIT_OK

    def next_step(self) -> str:
        """The operator's next step, one line."""
        finished = self.in_output + self.discarded
        if self.interrupted:
            return (
                f"Interrupted: {finished} of {self.valid} prompts are done and on disk; "
                "trajectories.jsonl was not rewritten. Next: rerun with --resume to finish and merge."
            )
        if not self.missing:
            return f"Done: all {self.valid} valid prompts are in trajectories.jsonl or discarded.jsonl."
        parts = [f"{self.failed} failed"] if self.failed else []
        if self.not_started:
            parts.append(f"{len(self.not_started)} not started")
        because = {
            "max_cost": " (--max_cost reached)",
            "worker_lost": " (a worker died)",
            "crash_loop": " (workers kept dying: a crash loop)",
        }
        why = because.get(self.stopped_by or "", "")
        counts = " and ".join(parts)
        return f"Not done: {counts} of {self.valid} prompts{why}. Next: rerun with --resume to run them."

    def as_dict(self) -> dict[str, Any]:
        """The `completion` section of statistics.json."""
        return {
            "valid_prompts": self.valid,
            "in_output": self.in_output,
            "discarded": self.discarded,
            "failed": self.failed,
            "not_started": len(self.not_started),
            "not_started_indices": self.not_started[:NAMED],
            "interrupted": self.interrupted,
            "stopped_by": self.stopped_by,
            "exit_code": self.exit_code,
            "next_step": self.next_step(),
        }
