"""The worker process's pieces that batch runs do not show directly: its event loop, the job
and event values it exchanges with the parent, and how a conversation becomes its answer."""

from __future__ import annotations

import asyncio
import json
import pickle
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest
import uvloop

from agent.batch.events import Cancelled, Discarded, Failed, Finished, LimiterReport, WorkerExit, WorkerReady
from agent.batch.records import answer
from agent.batch.worker import event_loop_factory
from agent.config.agent_config import AgentConfig
from agent.llm.factory import open_chat_model
from agent.loop.agent_loop import converse
from agent.loop.conversation import ConversationResult, Outcome, Prompt
from agent.protocols import ChatRequest, ModelReply, ToolCall, Usage
from agent.protocols.turns import ToolTurn, from_openai_messages, to_openai_message
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP, resolve_tools
from tests.support.batch import SPEC_FIELDS, job
from tests.support.endpoints import endpoint_with_call_ids


def test_workers_run_their_conversations_on_uvloop() -> None:
    loop = event_loop_factory()()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        loop.close()


def calling(reasoning: str | None, *calls: tuple[str, str, str]) -> dict[str, Any]:
    """An assistant message making `calls` (id, tool name, raw arguments)."""
    made = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return {"role": "assistant", "content": "", "reasoning": reasoning, "tool_calls": made}


def result(
    outcome: Outcome = Outcome.COMPLETED, *, reasoning: str | None = "why", **fields: Any
) -> ConversationResult:
    messages = [
        {"role": "user", "content": "q"},
        calling(reasoning, ("c1", "terminal", "{}")),
        {"role": "tool", "tool_call_id": "c1", "name": "terminal", "content": '{"error": "boom"}'},
        {"role": "assistant", "content": "done", "reasoning": None},
    ]
    base: dict[str, Any] = {
        "outcome": outcome,
        "turns": from_openai_messages(messages),
        "api_calls": 2,
        "usage": Usage(10, 4, 1),
        "model": "m",
        "toolsets_used": ("terminal",),
        "tool_schemas": ({"name": "terminal", "description": "d", "parameters": {}},),
    }
    return ConversationResult(**{**base, **fields})


# ---------------------------------------------------------------- a conversation's answer


def test_a_finished_conversation_becomes_its_entry_line() -> None:
    event = answer(job(), result(), keep_no_reasoning=False)

    assert isinstance(event, Finished)
    assert (event.key, event.batch_num, event.prompt_index, event.outcome, event.completed) == (
        "k7",
        3,
        7,
        "completed",
        True,
    )
    entry = json.loads(event.line)
    assert list(entry) == SPEC_FIELDS
    assert [t["from"] for t in entry["conversations"]] == ["system", "human", "gpt", "tool", "gpt"]
    assert entry["metadata"]["model"] == "m" and entry["metadata"]["tag"] == "x"
    assert (
        entry["metadata"]["usage"]
        == event.usage
        == {
            "prompt_tokens": 10,
            "completion_tokens": 4,
            "reasoning_tokens": 1,
            "total_tokens": 14,
        }
    )
    assert entry["tool_stats"]["terminal"] == {"count": 1, "success": 0, "failure": 1, "nonzero_exit": 0}
    assert set(entry["tool_stats"]) == set(TOOL_TO_TOOLSET_MAP)
    assert entry["tool_error_counts"]["terminal"] == 1


def test_a_conversation_without_reasoning_is_discarded_unless_kept() -> None:
    discarded = answer(job(), result(reasoning=None), keep_no_reasoning=False)
    assert isinstance(discarded, Discarded)
    record = discarded.record()
    assert list(record) == [
        "prompt_key",
        "prompt_id",
        "sample_index",
        "prompt_index",
        "reason",
        "timestamp",
        "entry",
    ]
    assert (record["prompt_id"], record["sample_index"]) == ("k7", 0)  # a prompt key is its sample 0
    assert (record["prompt_key"], record["reason"]) == ("k7", "no_reasoning")
    assert record["entry"]["metadata"]["usage"] == discarded.usage
    assert isinstance(answer(job(), result(reasoning=None), keep_no_reasoning=True), Finished)


def test_an_endpoint_failure_is_a_failure_with_its_class_and_usage() -> None:
    failed = answer(
        job(), result(Outcome.API_FAILURE, error="401", error_class="auth"), keep_no_reasoning=False
    )
    assert isinstance(failed, Failed)
    record = failed.record(attempt=2)
    assert list(record) == [
        "prompt_key",
        "prompt_id",
        "sample_index",
        "prompt_index",
        "error_class",
        "message",
        "timestamp",
        "usage",
        "attempt",
    ]
    assert (record["error_class"], record["message"], record["attempt"]) == ("auth", "401", 2)
    assert record["usage"]["total_tokens"] == 14


def test_an_entry_that_is_not_json_fails_its_prompt_not_the_run() -> None:
    """A NaN in the dataset row's metadata (json.loads accepts it) cannot be a JSONL line."""
    failed = answer(job(metadata={"score": float("nan")}), result(), keep_no_reasoning=False)
    assert isinstance(failed, Failed) and failed.error_class == "exception"
    assert "cannot be written as JSON" in failed.message


def test_worker_events_are_frozen_and_cross_the_process_boundary() -> None:
    events = [
        answer(job(), result(), keep_no_reasoning=False),
        answer(job(), result(reasoning=None), keep_no_reasoning=False),
        Failed.of(job(), "worker_lost", "x" * 3000),
        Cancelled("k7"),
        LimiterReport(0, {"calls": 3}),
        WorkerReady(1),
        WorkerExit(1),
        job(),
    ]
    for event in events:
        assert pickle.loads(pickle.dumps(event)) == event
    with pytest.raises(FrozenInstanceError):
        events[3].key = "other"  # type: ignore[misc]
    assert len(events[2].message) == 2000  # type: ignore[union-attr]


def test_a_job_names_its_sandbox_and_its_log_lines() -> None:
    spec = job(image="img", cwd="/w").sandbox_spec("run")
    assert (spec.run_name, spec.prompt_key, spec.image, spec.cwd) == ("run", "k7", "img", "/w")
    assert job().log_prefix == "[B3:P7] "


# ---------------------------------------------------------------- the loop the worker calls


PWD_AND_POOL = "pwd; basename $(dirname $(dirname $PWD))"  # the pool is named after the prompt


def test_the_loop_runs_on_the_whole_config_in_a_sandbox_it_destroys(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script(
        "pwd",
        [
            Turn(reasoning="r", tool_calls=(("terminal", json.dumps({"command": PWD_AND_POOL})),)),
            Turn(content="here"),
        ],
    )
    config = AgentConfig(model="sim-model", base_url=sim_endpoint.base_url, max_retries=0, max_iterations=3)
    options = SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))
    prompt = Prompt("pwd", job(key="pwd-key").sandbox_spec("loop-run"), "[p] ")

    async def run() -> ConversationResult:
        model = open_chat_model(config)  # loopback: no key needed
        try:
            return await converse(
                config, model, resolve_tools(["terminal"]), prompt, sandbox_factory(options)
            )
        finally:
            await model.aclose()

    done = asyncio.run(run())
    assert (done.outcome, done.final_response, done.api_calls) == (Outcome.COMPLETED, "here", 2)
    assert done.toolsets_used == ("terminal",)
    assert [s["name"] for s in done.tool_schemas] == ["process", "terminal"]
    shown = json.loads(to_openai_message(done.turns[2])["content"])["output"]
    assert shown.startswith("/workspace\npwd-key")  # ran in the prompt's sandbox
    assert done.usage.total_tokens > 0
    assert not list((tmp_path / "sandboxes").rglob("*"))  # destroyed when the conversation ended
    with pytest.raises(FrozenInstanceError):
        done.api_calls = 0  # type: ignore[misc]


def test_a_repeated_call_id_is_discarded_unless_kept_and_then_each_call_has_its_result(
    tmp_path: Path,
) -> None:
    calls = (
        ("terminal", json.dumps({"command": "echo one"})),
        ("terminal", json.dumps({"command": "echo two"})),
    )
    turns = [Turn(reasoning="r", tool_calls=calls), Turn(content="both", reasoning="r")]
    options = SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))
    prompt = Prompt("twice", job().sandbox_spec("run"))

    async def run(base_url: str) -> ConversationResult:
        config = AgentConfig(model="sim-model", base_url=base_url, max_retries=0)
        model = open_chat_model(config)
        try:
            return await converse(
                config, model, resolve_tools(["terminal"]), prompt, sandbox_factory(options)
            )
        finally:
            await model.aclose()

    with endpoint_with_call_ids(turns, ["same", "same"]) as endpoint:
        done = asyncio.run(run(endpoint.base_url))
    discarded = answer(job(), done, keep_no_reasoning=False)
    assert isinstance(discarded, Discarded) and discarded.reason == "duplicate_call_id"
    assert discarded.entry["metadata"]["discard_reasons"] == ["duplicate_call_id"]
    kept = answer(job(), done, keep_no_reasoning=False, keep_malformed=True)
    assert isinstance(kept, Finished) and kept.completed
    entry = json.loads(kept.line)
    assert entry["metadata"]["discard_reasons"] == ["duplicate_call_id"]  # kept, labelled
    assert entry["tool_stats"]["terminal"] == {"count": 2, "success": 2, "failure": 0, "nonzero_exit": 0}
    responses = entry["conversations"][3]["value"]
    assert responses.index("one") < responses.index("two")
    assert '"tool_call_id": "same"' in responses and '"tool_call_id": "same~2"' in responses


def test_the_first_filter_in_order_is_the_reason_and_every_one_is_recorded() -> None:
    messages = [
        {"role": "user", "content": "q"},
        calling(None, ("c", "web_search", "{"), ("c", "terminal", "{}")),
        {"role": "assistant", "content": "<tool_call>{}</tool_call>", "reasoning": None},
    ]
    everything = [
        "duplicate_call_id",
        "tool_not_offered",
        "invalid_arguments",
        "leaked_tool_call",
        "no_reasoning",
    ]
    event = answer(job(), result(turns=from_openai_messages(messages)), keep_no_reasoning=False)
    assert isinstance(event, Discarded) and event.reason == "duplicate_call_id"
    assert event.entry["metadata"]["discard_reasons"] == everything
    event = answer(
        job(), result(turns=from_openai_messages(messages)), keep_no_reasoning=False, keep_malformed=True
    )
    assert isinstance(event, Discarded) and event.reason == "no_reasoning"
    kept = answer(
        job(), result(turns=from_openai_messages(messages)), keep_no_reasoning=True, keep_malformed=True
    )
    assert isinstance(kept, Finished) and json.loads(kept.line)["metadata"]["discard_reasons"] == everything


def test_the_loop_stops_at_the_configured_turn_limit() -> None:
    class Looping:
        """A model that calls a tool every turn."""

        def __init__(self) -> None:
            self.calls = 0

        async def complete(self, request: ChatRequest) -> ModelReply:
            self.calls += 1
            call = ToolCall(f"c{self.calls}", "terminal", "{}")
            return ModelReply("", "r", (call,), "tool_calls", Usage(1, 1))

    model = Looping()
    config = AgentConfig(max_iterations=2)
    prompt = Prompt("q", job().sandbox_spec("run"))
    done = asyncio.run(converse(config, model, resolve_tools([]), prompt))
    assert (done.outcome, done.api_calls, model.calls) == (Outcome.MAX_ITERATIONS, 2, 2)
    assert done.partial and not done.completed and not done.failed
    unknown = [t.content for t in done.turns if isinstance(t, ToolTurn)]
    assert len(unknown) == 2 and all("Unknown tool 'terminal'" in c for c in unknown)
