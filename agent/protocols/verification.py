"""The verification seam: what a finished attempt is checked with, and what the checks say.

An attempt (one sample of one prompt) is verified after its conversation ends, before its
sandbox is destroyed. Each check that applies (`answer`, `command`, `python`, `judge`) gives
one `CheckResult`; the attempt's `Verification` holds them all. A check that could not decide
(a verifier that raised, a judge whose reply stayed malformed) says so in `error` and has
neither `passed` nor `score`: it is not a fail.

In the entry (only when a check applied, so a run without checks writes the bytes it always
did): `metadata.reward` is `Verification.reward` and `metadata.verification` its `record()`:

    {"passed": true|false|null, "checks": [{"method": "answer", "passed": true, "score": 1.0,
      "details": {...}, "duration_s": 0.0, "cost_usd": 0.0}, ...]}

with `"error": "<CheckError>: <why>"` on a check that could not decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agent.protocols.sandbox import Sandbox
from agent.protocols.turns import Turn

METHODS = ("answer", "command", "python", "judge")  # in the order an attempt's checks run


class CheckError(StrEnum):
    """Why a check could not decide (the check's `error` starts with it)."""

    VERIFIER_ERROR = "verifier_error"  # a --verifier raised, returned something else, or timed out
    JUDGE_ERROR = "judge_error"  # the judge's reply stayed malformed, or its calls failed
    SANDBOX_ERROR = "sandbox_error"  # a command check could not get the prompt's sandbox


@dataclass(frozen=True)
class Score:
    """What a `--verifier` function returns. `score` in [0, 1]; None: 1.0 when passed, else 0.0.
    `details` is JSON-able and kept in the entry's verification record."""

    passed: bool
    score: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome. `passed` and `score` are None when `error` is set."""

    method: str  # one of METHODS
    passed: bool | None
    score: float | None
    details: Mapping[str, Any] = field(default_factory=dict)  # JSON-able; capped by the check
    duration_s: float = 0.0
    cost_usd: float = 0.0  # what the check spent at the endpoint (a judge)
    prompt_tokens: int = 0  # a judge's tokens (counted in the run's usage too)
    completion_tokens: int = 0
    error: str | None = None  # "<CheckError>: <why>"

    def record(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "method": self.method,
            "passed": self.passed,
            "score": self.score,
            "details": dict(self.details),
            "duration_s": round(self.duration_s, 3),
            "cost_usd": self.cost_usd,
        }
        if self.prompt_tokens or self.completion_tokens:
            data["tokens"] = {"prompt": self.prompt_tokens, "completion": self.completion_tokens}
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass(frozen=True)
class Verification:
    """Every check of one attempt. `passed`: None when a check could not decide, else whether
    every check passed. `reward`: the mean of the checks' scores (None when none scored)."""

    checks: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool | None:
        if any(check.error is not None for check in self.checks):
            return None
        return all(check.passed for check in self.checks)

    @property
    def reward(self) -> float | None:
        scores = [check.score for check in self.checks if check.score is not None]
        return sum(scores) / len(scores) if scores else None

    def record(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [check.record() for check in self.checks]}


@dataclass(frozen=True)
class Attempt:
    """What a verifier is given: one finished attempt at a prompt."""

    prompt: str
    turns: tuple[Turn, ...]
    final_response: str | None  # None when the conversation ended without a final answer
    outcome: str  # agent.loop.conversation.Outcome's value
    sample_index: int
    metadata: Mapping[str, Any]  # the dataset row's `metadata`
    verify: Mapping[str, Any]  # the row's `verify` object as written (a verifier may read its own keys)


class Verifier(Protocol):
    """`--verifier=module:function`: an async function scoring a finished attempt. `sandbox` is
    the attempt's sandbox (None when re-scoring from the transcript, or when the run has no
    sandbox): run commands in it to inspect what the agent left there."""

    async def __call__(self, attempt: Attempt, sandbox: Sandbox | None) -> Score: ...
