"""The LLM judge: an attempt scored by another model against a rubric (`judge_attempt`).

The judge is asked through the run's own chat model, so its calls share the run's client,
rate limit (--rpm, --tpm, --max_inflight), retries of transient failures, and --max_cost
spend: `ChatRequest(model=--judge_model)`. What it is shown, and how its reply is read, is
`agent.verify.judge_prompt`'s: it answers one JSON object

    {"score": <number in [0, 1]>, "passed": <true|false>, "rationale": "<short>"}

The request asks for that shape with `response_format` (a strict json_schema). An endpoint
that refuses the field (HTTP 400/422) is asked again without it, and this process remembers
the judge model as one that takes none; either way the reply is read leniently (the whole
content, a ```json fence, or the outermost {...} among prose). A reply that is no such
object is asked again twice (the bad reply and what is wrong with it sent back): MAX_TRIES
calls in all. Still malformed, or a call that failed for good (after the client's retries),
the check is `judge_error: …`: undecided, never a fail. The judge's tokens and cost (every
try's, priced with the run's prices unless the endpoint said what it cost) are in the
CheckResult; `judge_usage` gives them for the entry's usage.
"""

from __future__ import annotations

import time
from typing import Any

from agent.config.verify_config import JudgeCheck
from agent.errors import FailureClass, ModelAPIError
from agent.protocols import ChatModel, ChatRequest, ModelReply, Prices, Usage
from agent.protocols.verification import Attempt, CheckError, CheckResult, Verification
from agent.verify.judge_prompt import RESPONSE_FORMAT, clip, judge_messages, parse_verdict

MAX_TRIES = 3  # a malformed reply is asked again twice
REPLY_CHARS = 300  # of a malformed reply (in the details) or a failed call's error
_REFUSED = (FailureClass.BAD_REQUEST,)
# Judge models whose endpoint refused `response_format` in this process: asked without it.
_unstructured: set[str] = set()


async def _ask(model: ChatModel, judge_model: str, messages: list[dict[str, Any]]) -> ModelReply:
    """One judge reply; asked without `response_format` when the endpoint refuses it."""
    if judge_model not in _unstructured:
        request = ChatRequest(
            messages, [], extra_params={"response_format": RESPONSE_FORMAT}, model=judge_model
        )
        try:
            return await model.complete(request)
        except ModelAPIError as exc:
            if exc.error_class not in _REFUSED:
                raise
            _unstructured.add(judge_model)  # (a request bad for another reason fails again below)
    return await model.complete(ChatRequest(messages, [], model=judge_model))


def _again(messages: list[dict[str, Any]], reply: str, why: str) -> list[dict[str, Any]]:
    """The request asking again: the malformed reply and what is wrong with it."""
    correction = f"That reply was not the JSON object asked for ({why}). Reply with only the JSON object."
    return [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": correction}]


class _Judgement:
    """One attempt's judging: its tries, what they used, and the check they come to."""

    def __init__(self, judge_model: str, prices: Prices | None) -> None:
        self.judge_model, self.prices = judge_model, prices
        self.started = time.monotonic()
        self.usage = Usage()
        self.tries = 0

    def result(
        self, passed: bool | None, score: float | None, details: dict[str, Any], error: str | None = None
    ) -> CheckResult:
        usage = self.usage.priced(self.prices)
        return CheckResult(
            "judge",
            passed,
            score,
            {"model": self.judge_model, "tries": self.tries, **details},
            duration_s=time.monotonic() - self.started,
            cost_usd=usage.cost_usd or 0.0,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            error=None if error is None else f"{CheckError.JUDGE_ERROR}: {error}",
        )


async def judge_attempt(
    attempt: Attempt, check: JudgeCheck, model: ChatModel, judge_model: str, *, prices: Prices | None = None
) -> CheckResult:
    """The judge's verdict on `attempt` against `check.rubric`; `judge_error` when it gave none.
    `prices`: the run's, for a cost the endpoint does not report."""
    judgement = _Judgement(judge_model, prices)
    messages = judge_messages(attempt, check.rubric)
    why = last = ""
    while judgement.tries < MAX_TRIES:
        judgement.tries += 1
        try:
            reply = await _ask(model, judge_model, messages)
        except ModelAPIError as exc:
            why = clip(f"{exc.error_class}: {exc}", REPLY_CHARS)  # an endpoint's message may be long
            return judgement.result(None, None, {}, f"the judge call failed: {why}")
        judgement.usage += reply.usage
        try:
            verdict = parse_verdict(reply.content)
        except ValueError as exc:
            why = str(exc)
            messages = _again(messages, clip(reply.content, 2_000), why)
            last = clip(reply.content, REPLY_CHARS)
            continue
        return judgement.result(verdict.passed, verdict.score, {"rationale": verdict.rationale})
    error = f"the judge's reply stayed malformed after {MAX_TRIES} tries: {why}"
    return judgement.result(None, None, {"last_reply": last}, error)


def judge_usage(verification: Verification | None) -> Usage:
    """What the judge checks of `verification` used, for the entry's (and run's) usage; no cost
    (None) when they reported none, so a run without prices keeps its usage bytes."""
    total = Usage()
    for check in verification.checks if verification is not None else ():
        if check.method == "judge":
            cost = check.cost_usd or None
            total += Usage(check.prompt_tokens, check.completion_tokens, cost_usd=cost)
    return total
