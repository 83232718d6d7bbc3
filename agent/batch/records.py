"""A job's answer from its conversation: the trajectory entry, and the event that carries it.

A trajectory entry has exactly the spec's top-level fields; what we add (prompt key,
outcome, token usage, the dataset row's own metadata) lives inside `metadata`. The
conversation's fields come from one trajectory format (`agent.export.formats`), rendered
from the conversation's typed turns once, with the analysis the entry's statistics and filters
come from.

Filters: an entry is discarded (kept whole in discarded.jsonl) when the conversation is
malformed (the analysis' flaws: `duplicate_call_id`, `tool_not_offered`, `invalid_arguments`,
`leaked_tool_call`), no turn has reasoning (`no_reasoning`) or, with --capture_tokens, a
turn's prompt did not extend the token sequence so far (`token_drift`), unless the run keeps that kind
(`agent.config.run_config.KEPT_BY`). When several apply, the first in that order is the
discard's reason, and the entry's `metadata.discard_reasons` lists every one that applied,
so an entry recovered when the run keeps more is checked against them all. A flawed entry the
run keeps carries the same label: the data says what is wrong with it, and a later run that
does not keep it moves it to discarded.jsonl (`agent.batch.recovery`).

Tokens (--capture_tokens) never enter the entry: its turns' ids and logprobs go to the parent
as a sidecar line (`agent.protocols.tokens.TokenRecord`) bound to the entry by a fresh id in
`metadata.tokens`, beside how many turns it holds and where it drifted.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from agent.batch.events import Answer, Discarded, Failed, Finished
from agent.batch.jobs import Job
from agent.config.run_config import KEPT_BY
from agent.errors import FailureClass
from agent.export.analysis import FLAWS, Analysis
from agent.export.formats import DEFAULT_FORMAT, render
from agent.loop.conversation import ConversationResult
from agent.protocols.tokens import TokenRecord
from agent.protocols.turns import AssistantTurn
from agent.protocols.verification import Verification
from agent.store.directory import encode_line
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP

# metadata keys the runner writes: a dataset row's own of the same name gives way (its `tokens`
# would otherwise bind the entry to token data the run never captured).
_OURS = ("batch_num", "timestamp", "model", "prompt_key", "prompt_id", "sample_index", "outcome", "usage",
         "toolsets_unavailable", "tokens")  # fmt: skip
NO_REASONING = "no_reasoning"
TOKEN_DRIFT = "token_drift"  # --capture_tokens: a turn's prompt did not extend the sequence
FILTERS = (*FLAWS, NO_REASONING, TOKEN_DRIFT)  # every discard reason, in the order that picks one
if set(FILTERS) != set(KEPT_BY):  # one table says which flag keeps each reason (run_config)
    raise RuntimeError(f"discard reasons {FILTERS} and the KEPT_BY table disagree: {sorted(KEPT_BY)}")


def answer(
    job: Job,
    result: ConversationResult,
    *,
    keep_no_reasoning: bool,
    keep_malformed: bool = False,
    keep_token_drift: bool = True,
    verification: Verification | None = None,
) -> Answer:
    """The event for a conversation that ended: a failure when the endpoint failed for good,
    a discard when a filter applies that the run does not keep, else the finished entry's line
    (with the attempt's `verification`, when a check applied), each with the conversation's
    token sidecar line when its turns carry tokens."""
    usage = result.usage.as_dict()
    if result.failed:
        return Failed.of(job, result.error_class or FailureClass.API, result.error or "", usage)
    entry, analysis = render_entry(job, result, usage, verification=verification)
    tokens = render_tokens(job, result)
    if tokens is not None:  # only with capture: a run without keeps its entries' bytes
        entry["metadata"]["tokens"] = tokens[0]
    tokens_line = None if tokens is None else tokens[1]
    reasons = filters_applying(analysis, result.token_drift is not None)
    kept = {
        "keep_no_reasoning": keep_no_reasoning,
        "keep_malformed": keep_malformed,
        "keep_token_drift": keep_token_drift,
    }
    discarding = [reason for reason in reasons if not kept[KEPT_BY[reason]]]
    if reasons:
        entry["metadata"]["discard_reasons"] = reasons
    if discarding:
        when = datetime.now().isoformat()
        return Discarded(job.key, job.index, discarding[0], entry, usage, when, tokens_line)
    try:
        line = encode_line(entry)
    except (ValueError, TypeError, RecursionError) as exc:  # a bug fails its prompt here, not the run
        why = f"the entry cannot be written as JSON: {type(exc).__name__}: {exc}"
        return Failed.of(job, FailureClass.EXCEPTION, why, usage)
    return _finished(job, result, line, usage, tokens_line)


def _finished(
    job: Job, result: ConversationResult, line: bytes, usage: dict[str, float], tokens_line: bytes | None
) -> Finished:
    drift = result.token_drift is not None
    return Finished(
        job.key, job.batch_num, job.index, line, result.completed, result.outcome.value, usage,
        result.api_calls, tokens_line, drift,
    )  # fmt: skip


def filters_applying(analysis: Analysis, token_drift: bool = False) -> list[str]:
    """Every filter the conversation fails, in `FILTERS` order (empty: a well-formed entry)."""
    no_reasoning = [NO_REASONING] if not analysis.reasoning.has_any_reasoning else []
    drift = [TOKEN_DRIFT] if token_drift else []
    return [*analysis.flaws, *no_reasoning, *drift]


def render_tokens(job: Job, result: ConversationResult) -> tuple[dict[str, Any], bytes] | None:
    """(the entry's `metadata.tokens`, the conversation's token sidecar line), None when no turn
    carries tokens. The id binding them is fresh per attempt: a retried or re-run prompt's line
    is another, and only the one its kept entry names is merged."""
    turns = tuple(t.tokens for t in result.turns if isinstance(t, AssistantTurn) and t.tokens is not None)
    if not turns:
        return None
    drift = result.token_drift
    tokens_id = uuid.uuid4().hex
    summary = {
        "id": tokens_id,
        "turns": len(turns),
        "drift": None if drift is None else {"turn": drift.turn, "position": drift.position},
    }
    return summary, TokenRecord(tokens_id, job.key, job.index, turns, drift).line()


def render_entry(
    job: Job,
    result: ConversationResult,
    usage: dict[str, float],
    format_name: str = DEFAULT_FORMAT,
    *,
    verification: Verification | None = None,
) -> tuple[dict[str, Any], Analysis]:
    """(entry, the analysis it was rendered from) for a conversation that reached an outcome."""
    rendered = render(
        result.turns, result.tool_schemas, all_tools=TOOL_TO_TOOLSET_MAP, format_name=format_name
    )
    metadata = _render_metadata(job, result, usage)
    if forced := rendered.analysis.reasoning.turns_with_forced_reasoning:  # only then: bytes kept
        metadata["reasoning_forced_turns"] = forced
    if verification is not None:  # only when a check applied: a run without checks keeps its bytes
        metadata["reward"] = verification.reward
        metadata["verification"] = verification.record()
    entry = {
        "prompt_index": job.index,
        **rendered.fields,
        "metadata": metadata,
        "completed": result.completed,
        "partial": result.partial,
        "api_calls": result.api_calls,
        "toolsets_used": list(job.toolsets),  # sampled, as the spec says, whether offered or not
        "tool_stats": rendered.analysis.tool_stats,
        "tool_error_counts": rendered.analysis.tool_errors,
    }
    return entry, rendered.analysis


def _render_metadata(job: Job, result: ConversationResult, usage: dict[str, float]) -> dict[str, Any]:
    user = {k: v for k, v in job.metadata.items() if k not in _OURS}
    return {
        **user,
        "batch_num": job.batch_num,
        "timestamp": datetime.now().isoformat(),
        "model": result.model,
        "prompt_key": job.key,  # the unit of work's key: unique per (prompt, sample)
        "prompt_id": job.prompt_id,  # the same for every sample of the prompt
        "sample_index": job.sample_index,
        "outcome": result.outcome.value,
        "usage": usage,
        # sampled toolsets none of whose tools could run here (--allow_missing_toolsets)
        "toolsets_unavailable": [t for t in job.toolsets if t not in result.toolsets_used],
        **job.sampling_record(),  # the sampling fields sent, when any was chosen
    }
