"""What a worker process tells the parent, one frozen, picklable value per event.

`Started` says which worker runs a job; `Finished`, `Discarded` and `Failed` answer a job (the
parent writes them to the run directory); `Cancelled` says a job was given up unanswered
(SIGTERM); `LimiterReport` carries a worker's rate-limiter statistics, `LimiterPulse` its load
now, `WorkerReady` says it takes jobs and `WorkerExit` is its goodbye. The parent tells them
apart by type. This module stays light: the parent imports it, never the worker's SDKs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.batch.jobs import Job
from agent.errors import FailureClass
from agent.store.keys import split_key


def sample_fields(key: str) -> dict[str, Any]:
    """A record's `prompt_id` and `sample_index` (the entry contract), from its unit's key."""
    prompt_id, sample_index = split_key(key)
    return {"prompt_id": prompt_id, "sample_index": sample_index}


@dataclass(frozen=True)
class Finished:
    """A conversation that reached an outcome; its entry is already one JSONL line, so the
    parent writes the bytes as they are and reads only the small fields beside them."""

    key: str
    batch_num: int
    prompt_index: int
    line: bytes
    completed: bool
    outcome: str
    usage: dict[str, float]
    api_calls: int = 0  # model calls the conversation made (the parent's count of them)
    # --capture_tokens: the entry's token sidecar line (agent.protocols.tokens.TokenRecord),
    # appended to tokens_<batch_num>.jsonl before `line`; and whether its tokens drifted.
    tokens_line: bytes | None = None
    token_drift: bool = False


@dataclass(frozen=True)
class Discarded:
    """A filtered prompt: kept whole (it was paid for), never merged, never re-run."""

    key: str
    prompt_index: int
    reason: str
    entry: dict[str, Any]
    usage: dict[str, float]
    timestamp: str
    # --capture_tokens: the entry's sidecar line, kept like a result's (tokens_<batch>.jsonl,
    # the batch in the entry's metadata) so an entry recovered later finds its tokens.
    tokens_line: bytes | None = None

    def record(self) -> dict[str, Any]:
        """The line of `discarded.jsonl`."""
        return {
            "prompt_key": self.key,
            **sample_fields(self.key),
            "prompt_index": self.prompt_index,
            "reason": self.reason,
            "timestamp": self.timestamp,
            "entry": self.entry,
        }


@dataclass(frozen=True)
class Failed:
    """A prompt that did not reach an outcome: retried on resume."""

    key: str
    prompt_index: int
    error_class: FailureClass
    message: str
    usage: dict[str, float]
    timestamp: str

    @classmethod
    def of(
        cls, job: Job, error_class: FailureClass, message: str, usage: dict[str, float] | None = None
    ) -> Failed:
        return cls(job.key, job.index, error_class, message[:2000], usage or {}, datetime.now().isoformat())

    def record(self, attempt: int) -> dict[str, Any]:
        """The line of `failures.jsonl` for the prompt's `attempt`-th failure."""
        return {
            "prompt_key": self.key,
            **sample_fields(self.key),
            "prompt_index": self.prompt_index,
            "error_class": self.error_class,
            "message": self.message,
            "timestamp": self.timestamp,
            "usage": self.usage,
            "attempt": attempt,
        }


@dataclass(frozen=True)
class Started:
    """A worker took a job and runs it: if that worker dies, the prompt is `worker_lost`."""

    key: str
    worker: int


@dataclass(frozen=True)
class Cancelled:
    key: str


@dataclass(frozen=True)
class LimiterReport:
    worker: int
    stats: dict[str, Any]


@dataclass(frozen=True)
class LimiterPulse:
    """A worker's load now, sent about once a second while it changes (`agent.batch.pulse`):
    the live progress and the run's timeline show the limit and throttling as they happen."""

    worker: int
    run_limit: float  # the run's in-flight limit as the worker last heard it (0: not yet)
    calls_in_flight: int
    rate_limited: int
    server_errors: int


@dataclass(frozen=True)
class WorkerReady:
    """A worker has started up (imports, model client, sandbox pool) and takes jobs now: the
    local parent sends a starting replacement none, so requeued prompts run on live workers."""

    worker: int


@dataclass(frozen=True)
class WorkerExit:
    worker: int


@dataclass(frozen=True)
class WorkerLost:
    """Said by the scheduler, not the worker: it died without a goodbye. Its last load went
    with it; a replacement may report under the same number, its counts starting at 0."""

    worker: int


Answer = Finished | Discarded | Failed  # a job's outcome, written to the run directory
Notice = Started | Cancelled | LimiterReport | LimiterPulse | WorkerReady | WorkerExit | WorkerLost
WorkerEvent = Answer | Notice
