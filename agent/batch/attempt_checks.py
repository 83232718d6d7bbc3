"""A job's checks, run by its worker once the conversation reached its outcome and before its
sandbox closes (`converse`'s `after`): the `Attempt` the checks read, and the `Verification`
they give, which the entry carries (`agent.batch.records`).

Failed conversations (the endpoint failed for good) are not verified: they are no attempt.
Checking is not counted within --prompt_timeout, which bounds the conversation: each check
has its own timeout (the command's, --verify_timeout for a verifier, the judge's requests),
so a slow check never turns a finished attempt into a `prompt_timeout` failure.
"""

from __future__ import annotations

import asyncio

from agent.batch.jobs import Job
from agent.config.verify_config import VerifyOptions
from agent.loop.conversation import ConversationResult
from agent.protocols import ChatModel, Prices, Usage
from agent.protocols.verification import Attempt, Verification
from agent.toolbox.context import ConversationContext
from agent.verify.judge import judge_usage
from agent.verify.runner import verify_attempt


def attempt_of(job: Job, result: ConversationResult) -> Attempt:
    """What a verifier is given of the job's finished conversation."""
    return Attempt(
        prompt=job.prompt,
        turns=result.turns,
        final_response=result.final_response,
        outcome=result.outcome.value,
        sample_index=job.sample_index,
        metadata=job.metadata,
        verify=job.checks.row if job.checks is not None else {},
    )


class AttemptChecks:
    """`converse`'s `after` for one job: runs its checks; `verification` holds what they gave
    (None: nothing applied, or the conversation failed), `usage` what a judge used (the
    entry's usage counts it; priced with `prices` when the endpoint says no cost)."""

    def __init__(
        self,
        job: Job,
        model: ChatModel,
        options: VerifyOptions,
        deadline: asyncio.Timeout | None,
        prices: Prices | None = None,
    ) -> None:
        self.job, self.model, self.options, self.deadline = job, model, options, deadline
        self.prices = prices
        self.verification: Verification | None = None

    @property
    def usage(self) -> Usage:
        return judge_usage(self.verification)

    async def __call__(self, result: ConversationResult, context: ConversationContext) -> None:
        checks = self.job.checks
        if result.failed or checks is None or checks.empty:
            return
        if self.deadline is not None:
            self.deadline.reschedule(None)  # the conversation is over: the checks time themselves
        attempt = attempt_of(self.job, result)
        self.verification = await verify_attempt(
            checks, attempt, context, self.model, self.options, self.prices
        )
