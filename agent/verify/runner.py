"""Running an attempt's checks: every kind that applies, in `METHODS` order, into one `Verification`.

`verify_attempt` is called by the worker after the conversation reached its outcome and
before its sandbox closes (`agent.loop.agent_loop.converse`'s `after`); `rescore_attempt`
checks a stored transcript (`--rescore`), with no sandbox: its `command` check cannot be run
again (`not_rescorable` names it, for the operator's line). Each check bounds its own time
(the command's timeout, --verify_timeout for a verifier, the judge's request timeouts): the
time spent checking does not count within --prompt_timeout, which bounds the conversation.
"""

from __future__ import annotations

from typing import Protocol

from agent.config.verify_config import Checks, JudgeCheck, VerifyOptions
from agent.protocols import ChatModel, Prices, Sandbox
from agent.protocols.verification import Attempt, CheckError, CheckResult, Verification
from agent.verify.answer import check_answer
from agent.verify.command import check_command
from agent.verify.judge import judge_attempt
from agent.verify.python_verifier import check_python


class AttemptSandbox(Protocol):
    """The attempt's sandbox as its conversation holds it (`agent.toolbox.context.ConversationContext`)."""

    @property
    def sandbox_opened(self) -> bool: ...

    async def sandbox(self) -> Sandbox: ...


async def _judge(
    check: JudgeCheck, attempt: Attempt, model: ChatModel, options: VerifyOptions, prices: Prices | None
) -> CheckResult:
    if options.judge_model is None:
        return CheckResult("judge", None, None, {}, error=f"{CheckError.JUDGE_ERROR}: no --judge_model")
    return await judge_attempt(attempt, check, model, options.judge_model, prices=prices)


async def verify_attempt(
    checks: Checks | None,
    attempt: Attempt,
    sandbox: AttemptSandbox | None,
    model: ChatModel,
    options: VerifyOptions,
    prices: Prices | None = None,
) -> Verification | None:
    """Every check of `checks` on `attempt`, in METHODS order; None when none applies.
    `sandbox`: the attempt's (None: the run has none, and a command check says so); `prices`:
    the run's, pricing a judge whose endpoint reports no cost."""
    if checks is None or checks.empty:
        return None
    results: list[CheckResult] = []
    if checks.answer is not None:
        results.append(check_answer(checks.answer, attempt.final_response))
    if checks.command is not None:
        opener = sandbox.sandbox if sandbox is not None else None
        results.append(await check_command(checks.command, opener))
    if checks.python and options.verifier is not None:
        # The sandbox as the agent left it; not opened for the verifier alone (nothing was written).
        opened = await sandbox.sandbox() if sandbox is not None and sandbox.sandbox_opened else None
        results.append(await check_python(options.verifier, attempt, opened, options.verify_timeout))
    if checks.judge is not None:
        results.append(await _judge(checks.judge, attempt, model, options, prices))
    return Verification(tuple(results)) if results else None


def not_rescorable(checks: Checks | None) -> tuple[str, ...]:
    """The kinds of `checks` that need the attempt's sandbox, so a transcript cannot re-run."""
    return ("command",) if checks is not None and checks.command is not None else ()


async def rescore_attempt(
    checks: Checks | None,
    attempt: Attempt,
    model: ChatModel,
    options: VerifyOptions,
    prices: Prices | None = None,
) -> Verification | None:
    """The checks of `checks` that a transcript allows (answer, python with no sandbox, judge)
    on a stored `attempt`; None when none applies. `not_rescorable(checks)` names what is left out."""
    if checks is None:
        return None
    without_command = Checks(answer=checks.answer, judge=checks.judge, python=checks.python, row=checks.row)
    return await verify_attempt(without_command, attempt, None, model, options, prices)
