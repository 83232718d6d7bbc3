"""Workers lost during a run (killed, OOM) and what the run does about them: the book.

A worker that exits without its goodbye is replaced; each prompt it was running (it had said
`Started`) loses one attempt and is requeued, until `--max_prompt_attempts` losses: then it is
a `worker_lost` failure of this run (a poison prompt: it kills whatever runs it), which
`--resume` retries. A prompt sent to the worker but not started yet is requeued without loss.

Crash-loop guard: workers that die faster than they work would be replaced forever. When more
than `crash_loop_limit(num_workers)` losses (twice the workers, at least 4) happen within
`CRASH_WINDOW` seconds with no prompt answered by a worker in between, the run stops (exit 1)
with one line saying what the losses had in common. One death of every worker at once (an OOM
sweep) is below the limit; every worker dying again before any prompt finishes is not.
"""

from __future__ import annotations

import signal
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

CRASH_WINDOW = 60.0  # seconds over which losses without progress are counted
MIN_CRASH_LIMIT = 4
NAMED = 10  # prompt indices named in a line, the rest counted


def crash_loop_limit(num_workers: int) -> int:
    return max(MIN_CRASH_LIMIT, 2 * num_workers)


@dataclass(frozen=True)
class Loss:
    """One worker that died: when (monotonic seconds), its slot, pid and exit code, and the
    dataset indices of the prompts it was running."""

    at: float
    worker: int
    pid: int | None
    exit_code: int | None
    running: tuple[int, ...]

    def describe(self) -> str:
        held = f"running prompt(s) {_indices(self.running)}" if self.running else "no prompt running"
        return f"worker {self.worker} (pid {self.pid}, {self._ending()}, {held})"

    def guess(self) -> str:
        """What likely ended the worker, for the operator's line."""
        if self.exit_code is not None and self.exit_code < 0:
            return "the OOM killer? a kill?"
        if self.exit_code == 0:  # it stopped as when the run stops: its prompts were cancelled
            return "a SIGTERM sent to it alone?"
        return "its log lines above say why"

    def _ending(self) -> str:
        if self.exit_code is None:
            return "exit code unknown"
        if self.exit_code < 0:
            number = -self.exit_code
            name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
            return f"killed by {name}"
        return f"exit code {self.exit_code}"


@dataclass
class LossBook:
    """Losses of this invocation, the attempts they cost each prompt, and the guard's window."""

    max_attempts: int
    crash_limit: int
    losses: list[Loss] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)  # prompt key -> workers it lost
    gave_up: list[int] = field(default_factory=list)  # dataset indices failed as poison prompts
    replacements: int = 0
    replace_seconds: list[float] = field(default_factory=list)  # death seen -> replacement started a job
    _recent: deque[Loss] = field(default_factory=deque)  # losses since the last prompt answered

    def lose(self, loss: Loss, running: dict[str, int]) -> list[str]:
        """Book `loss`, whose worker ran `running` (key -> dataset index); returns the keys
        that reached --max_prompt_attempts (to fail, not requeue)."""
        self.losses.append(loss)
        self._recent.append(loss)
        exhausted = []
        for key, index in running.items():
            self.attempts[key] += 1
            if self.attempts[key] >= self.max_attempts:
                exhausted.append(key)
                self.gave_up.append(index)
        return exhausted

    def message(self, key: str, exit_code: int | None) -> str:
        """The `worker_lost` failure's message for prompt `key`."""
        attempts, code = self.attempts[key], "" if exit_code is None else f" (last exit code {exit_code})"
        if attempts < self.max_attempts:
            return f"the worker process running it exited early{code}"
        return (
            f"its worker process died while running it, {attempts} times{code}: "
            f"not retried in this run (--max_prompt_attempts={self.max_attempts}); --resume retries it"
        )

    def progress(self) -> None:
        """A worker answered a prompt: workers do work, the losses so far are no crash loop."""
        self._recent.clear()

    def crash_loop(self, now: float) -> str | None:
        """The line that stops the run when workers die faster than they work, else None."""
        while self._recent and self._recent[0].at < now - CRASH_WINDOW:
            self._recent.popleft()
        recent = list(self._recent)
        if len(recent) <= self.crash_limit:
            return None
        codes = Counter(loss.exit_code for loss in recent)
        held = Counter(index for loss in recent for index in loss.running)
        common = [index for index, n in held.items() if n == len(recent)]
        prompts = (
            f"every one was running prompt(s) {_indices(sorted(common))}"
            if common
            else f"prompts they were running: {_indices(sorted(held))}"
            if held
            else "none was running a prompt (they died starting up?)"
        )
        return (
            f"stopping the run: {len(recent)} workers died within {now - recent[0].at:.0f} s and no prompt "
            f"finished in between (a crash loop); exit codes: "
            f"{', '.join(f'{code} x{n}' for code, n in codes.most_common())}; {prompts}. "
            "Next: fix the cause (memory? a prompt that kills its worker?) and rerun with --resume"
        )

    def as_dict(self) -> dict[str, Any]:
        """The `worker_losses` section of statistics.json."""
        waits = self.replace_seconds
        return {
            "losses": len(self.losses),
            "replacements": self.replacements,
            "lost_attempts": sum(self.attempts.values()),
            "failed_prompts": sorted(self.gave_up),
            "max_prompt_attempts": self.max_attempts,
            "exit_codes": {str(k): n for k, n in Counter(x.exit_code for x in self.losses).most_common()},
            "replacement_seconds": {  # a death seen -> its replacement started a prompt
                "count": len(waits),
                "mean": round(sum(waits) / len(waits), 3) if waits else None,
                "max": round(max(waits), 3) if waits else None,
            },
            "losses_named": [loss.describe() for loss in self.losses[:NAMED]],
        }


def _indices(indices: Any) -> str:
    listed = list(indices)
    more = f" and {len(listed) - NAMED} more" if len(listed) > NAMED else ""
    return ", ".join(str(i) for i in listed[:NAMED]) + more
