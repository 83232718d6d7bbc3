"""What a run checks its attempts with, and what it keeps.

`VerifyOptions` is the run's (its flags); `Checks` is one prompt's: its dataset row's `verify`
object over the run's options (`agent.batch.row_verify` parses the row). A row's `verify`:

    {"answer": "42"}                                    expected final answer, the run's match mode
    {"answer": {"expected": "3.14", "match": "number", "tolerance": 0.01}}
    {"command": "pytest -q tests/"}                     run in the prompt's sandbox after the last turn
    {"command": {"run": "pytest -q", "timeout": 120}}
    {"judge": {"rubric": "..."}} or {"judge": true}     an LLM judge (the run's --judge_model)
    {"python": false}                                   this row skips the run's --verifier

Several kinds may apply to one attempt; each is recorded (`agent.protocols.verification`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MATCH_MODES = ("exact", "normalized", "number", "regex", "contains")
KEEP_MODES = ("all", "passing", "best")


@dataclass(frozen=True)
class AnswerCheck:
    expected: str
    match: str = "normalized"  # one of MATCH_MODES
    tolerance: float = 1e-6  # `number`: |got - expected| <= tolerance * max(1, |expected|)


@dataclass(frozen=True)
class CommandCheck:
    run: str  # a shell command; exit 0 passes; a last stdout line that is a number in [0, 1] is the score
    timeout_s: float = 60.0


@dataclass(frozen=True)
class JudgeCheck:
    rubric: str  # the text the judge scores against (the row's, else --judge_rubric's file)


@dataclass(frozen=True)
class Checks:
    """One prompt's checks, the row's over the run's; empty when nothing applies."""

    answer: AnswerCheck | None = None
    command: CommandCheck | None = None
    judge: JudgeCheck | None = None
    python: bool = False  # the run's --verifier applies
    row: Mapping[str, Any] = field(default_factory=dict)  # the row's `verify` object as written

    @property
    def empty(self) -> bool:
        return self.answer is None and self.command is None and self.judge is None and not self.python


@dataclass(frozen=True)
class VerifyOptions:
    """The run's verification flags."""

    verify_command: str | None = None  # a command check for every prompt (a row's `command` wins)
    verify_timeout: float = 60.0  # seconds a command check may run
    answer_match: str = "normalized"  # the match mode of answers that name none
    verifier: str | None = None  # module:function, a `agent.protocols.verification.Verifier`
    judge_model: str | None = None  # judge every prompt with this model (same endpoint and limiter)
    judge_rubric: str | None = None  # the file holding the judge's default rubric
    keep: str = "all"  # one of KEEP_MODES: which attempts go to the output

    @property
    def any(self) -> bool:
        """Whether the run checks anything beyond what its rows ask."""
        return bool(self.verify_command or self.verifier or self.judge_model)
