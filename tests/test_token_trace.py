"""The worker's side of token capture without an endpoint: `TokenTrace` turning each call's ids
into its turn's tokens and finding the first drift, the sequence it builds against the one
`TokenRecord.sequence()` rebuilds, its memory, and the entry and sidecar line `answer` makes."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import time
import tracemalloc
import weakref
from array import array
from collections.abc import Iterator
from typing import Any

import pytest

from agent.batch.events import Discarded, Failed, Finished
from agent.batch.records import TOKEN_DRIFT, answer
from agent.config.agent_config import AgentConfig
from agent.loop.agent_loop import converse
from agent.loop.conversation import ConversationResult, Outcome, Prompt
from agent.loop.token_trace import TokenTrace, common_prefix
from agent.protocols import ChatRequest, ModelReply, ToolCall, Usage
from agent.protocols.tokens import DRIFT_SHOWN, TokenCapture, TokenRecord, TurnTokens, floats, ids
from agent.protocols.turns import AssistantTurn, Turn, from_openai_messages
from agent.toolbox.registry import resolve_tools
from tests.support.batch import job


class Conversation:
    """Renders prompts as a chat template would: the sequence so far (prompt + completion of the
    last call) followed by `template` new ids (the tool result and the tokens around it); ids
    are distinct per turn and part, so a drift's position names one place only."""

    def __init__(self, template: int = 6, completion: int = 10) -> None:
        self.template, self.completion = template, completion
        self.sequence = array("i")
        self.turn = 0

    def new_ids(self, part: int, n: int) -> list[int]:
        return [100_000 * self.turn + 10_000 * part + i for i in range(n)]

    def call(self, change: dict[int, int] | None = None) -> TokenCapture:
        """The next call: its prompt (with `change`: {position: id} rewritten), its completion."""
        prompt = self.sequence + ids(self.new_ids(1, self.template))
        for position, value in (change or {}).items():
            prompt[position] = value
        completion = ids(self.new_ids(2, self.completion))
        self.sequence = prompt + completion
        self.turn += 1
        return TokenCapture(prompt, completion, floats([-0.5 - i / 100 for i in range(len(completion))]))


def record(turns: list[TurnTokens], trace: TokenTrace) -> TokenRecord:
    """The turns through a sidecar line and back, as the RL export reads them."""
    line = TokenRecord("0" * 32, "k", 0, tuple(turns), trace.drift).line()
    return TokenRecord.of(json.loads(line))


def test_common_prefix_is_exact_at_every_position() -> None:
    base = ids(range(1, 200))
    assert common_prefix(base, base) == 199
    assert common_prefix(base, base[:50]) == common_prefix(base[:50], base) == 50
    assert common_prefix(array("i"), base) == 0
    for position in (0, 1, 63, 64, 127, 198):
        other = array("i", base)
        other[position] = -1
        assert common_prefix(base, other) == position


def test_turns_that_extend_the_sequence_keep_only_their_new_ids_and_no_drift() -> None:
    conversation, trace, turns = Conversation(), TokenTrace(), []
    for turn in range(40):
        before = len(trace.sequence)
        capture = conversation.call()
        tokens = trace.add(capture)
        turns.append(tokens)
        assert tokens.prompt_offset == before
        assert tokens.prompt_ids == capture.prompt_ids[before:] and len(tokens.prompt_ids) == 6
        assert tokens.completion_ids == capture.completion_ids and tokens.logprobs == capture.logprobs
        assert trace.sequence == capture.prompt_ids + capture.completion_ids, turn
    assert trace.drift is None and trace.turns == 40
    input_ids, mask, logprobs, spans = record(turns, trace).sequence()
    assert input_ids == trace.sequence == conversation.sequence
    assert [input_ids[a:b] for a, b in spans] == [t.completion_ids for t in turns]
    generated = {i for a, b in spans for i in range(a, b)}
    assert [i for i, m in enumerate(mask) if m] == sorted(generated)
    assert [p is not None for p in logprobs] == [bool(m) for m in mask]
    assert [logprobs[a] for a, _ in spans] == [-0.5] * 40


def test_a_drift_in_a_completion_names_its_turn_position_and_ids() -> None:
    conversation, trace = Conversation(), TokenTrace()
    turns = [trace.add(conversation.call()) for _ in range(2)]
    completion_1 = len(trace.sequence) - 10  # where turn 1's completion starts
    position = completion_1 + 5
    expected = tuple(trace.sequence[position : position + DRIFT_SHOWN])
    capture = conversation.call({position: 7})  # the template re-rendered turn 1's answer
    turns.append(trace.add(capture))
    assert trace.drift is not None
    assert (trace.drift.turn, trace.drift.position) == (2, position)
    assert trace.drift.expected == expected and len(expected) == 5  # the rest of the sequence
    assert trace.drift.got == tuple(capture.prompt_ids[position : position + DRIFT_SHOWN])
    assert trace.drift.got[0] == 7 and len(trace.drift.got) == DRIFT_SHOWN
    assert trace.drift.context == "completion of turn 1, token 5"
    assert turns[2].prompt_offset == position and turns[2].prompt_ids == capture.prompt_ids[position:]
    assert trace.sequence == capture.prompt_ids + capture.completion_ids
    turns += [trace.add(conversation.call()) for _ in range(3)]  # extends again after the cut
    assert [t.prompt_offset for t in turns[3:]] == [len(c) for c in _prefixes(turns)][3:]
    rebuilt = record(turns, trace).sequence()
    assert rebuilt[0] == trace.sequence == conversation.sequence
    spans = rebuilt[3]
    assert spans[1] == (completion_1, position)  # turn 1's answer is generated up to the cut only
    assert sum(rebuilt[1]) == 5 * 10 + 5  # turn 0's, half of turn 1's, turns 2 to 5


def _prefixes(turns: list[TurnTokens]) -> Iterator[array[int]]:
    """Each turn's sequence before it (what an extending prompt starts with)."""
    sequence = array("i")
    for turn in turns:
        yield sequence
        sequence = sequence[: turn.prompt_offset] + turn.prompt_ids + turn.completion_ids


def test_a_drift_in_the_template_part_and_only_the_first_drift_is_kept() -> None:
    conversation, trace = Conversation(), TokenTrace()
    turns = [trace.add(conversation.call()) for _ in range(3)]
    template_1 = turns[1].prompt_offset + 2  # the third template id before turn 1's answer
    turns.append(trace.add(conversation.call({template_1: 3})))
    first = trace.drift
    assert first is not None and (first.turn, first.position) == (3, template_1)
    assert first.context == f"prompt of turn 1, token {template_1}"
    turns.append(trace.add(conversation.call({0: 1})))  # a later drift, at the very start
    assert trace.drift is first and turns[4].prompt_offset == 0
    assert trace.sequence == conversation.sequence == record(turns, trace).sequence()[0]


def test_a_prompt_shorter_than_the_sequence_drifts_where_it_ends() -> None:
    trace = TokenTrace()
    turns = [trace.add(TokenCapture(ids([1, 2, 3]), ids([4, 5]), None))]
    turns.append(trace.add(TokenCapture(ids([1, 2, 3, 4]), ids([9]), None)))
    assert trace.drift is not None
    assert (trace.drift.position, trace.drift.expected, trace.drift.got) == (4, (5,), ())
    assert trace.drift.context == "completion of turn 0, token 1"
    assert (turns[1].prompt_offset, turns[1].prompt_ids.tolist()) == (4, [])
    turns.append(trace.add(TokenCapture(ids([1]), ids([7]), None)))  # cut back to one id
    input_ids, mask, logprobs, spans = record(turns, trace).sequence()
    assert trace.sequence == input_ids == ids([1, 7])
    assert (mask.tolist(), logprobs, spans) == ([0, 1], [None, None], [(1, 2)])


def test_memory_grows_with_the_conversation_not_with_turns_times_length() -> None:
    """200 turns of 2,000 ids each (1,000 given, 1,000 generated): a conversation of 400,000
    ids holds ~12 bytes each (sequence 4, turns 4, logprobs 8 per generated id), where a copy
    of every prompt would hold 200 × 200,000 × 4 bytes = 160 MB."""
    conversation, trace = Conversation(template=1000, completion=1000), TokenTrace()
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        began = time.process_time()
        turns = [trace.add(conversation.call()) for _ in range(200)]
        cpu = time.process_time() - began
        del conversation  # the endpoint's copy of the last prompt: what the test made, not the trace
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert trace.drift is None and len(trace.sequence) == 400_000 and len(turns) == 200
    ids_bytes = 4 * 400_000 + 4 * 400_000 + 8 * 200_000  # the sequence, the turns, the logprobs
    assert held < 1.25 * ids_bytes, (held, ids_bytes)
    assert cpu < 20, cpu  # the capture's own copies; a Python loop per id would be far slower


# ---------------------------------------------------------------- the entry and its sidecar line


def conversation_result(turns: list[TurnTokens | None], **fields: Any) -> ConversationResult:
    """A two-call conversation (a tool call, then an answer) whose assistant turns carry `turns`."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "reasoning": "why", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "terminal", "content": "ok"},
        {"role": "assistant", "content": "done", "reasoning": "so"},
    ]  # fmt: skip
    history: list[Turn] = []
    given = iter(turns)
    for turn in from_openai_messages(messages):
        if isinstance(turn, AssistantTurn):
            turn = dataclasses.replace(turn, tokens=next(given))
        history.append(turn)
    base: dict[str, Any] = {
        "outcome": Outcome.COMPLETED,
        "turns": tuple(history),
        "api_calls": 2,
        "usage": Usage(10, 4, 1),
        "model": "m",
        "toolsets_used": ("terminal",),
        "tool_schemas": ({"name": "terminal", "description": "d", "parameters": {}},),
        "final_response": "done",
    }
    return ConversationResult(**{**base, **fields})


def traced(change: dict[int, int] | None = None) -> tuple[list[TurnTokens | None], TokenTrace]:
    conversation, trace = Conversation(), TokenTrace()
    return [trace.add(conversation.call()), trace.add(conversation.call(change))], trace


def test_an_entry_with_tokens_names_its_sidecar_line_which_holds_every_turn() -> None:
    turns, trace = traced()
    event = answer(job(), conversation_result(turns), keep_no_reasoning=False)
    assert isinstance(event, Finished) and event.tokens_line is not None and not event.token_drift
    entry = json.loads(event.line)
    tokens = entry["metadata"]["tokens"]
    assert list(entry["metadata"])[-1] == "tokens" and "discard_reasons" not in entry["metadata"]
    assert len(tokens["id"]) == 32 and int(tokens["id"], 16) >= 0
    assert (tokens["turns"], tokens["drift"]) == (2, None)
    line = TokenRecord.of(json.loads(event.tokens_line))
    assert (line.tokens_id, line.prompt_key, line.prompt_index) == (tokens["id"], "k7", 7)
    assert line.turns == tuple(turns) and line.drift is None
    assert line.sequence()[0] == trace.sequence
    again = answer(job(), conversation_result(turns), keep_no_reasoning=False)
    assert isinstance(again, Finished) and json.loads(again.line)["metadata"]["tokens"]["id"] != tokens["id"]


@pytest.mark.parametrize("keep", [True, False])
def test_a_drifted_conversation_is_labelled_and_discarded_only_when_not_kept(keep: bool) -> None:
    turns, trace = traced({3: 0})
    assert trace.drift is not None
    result = conversation_result(turns, token_drift=trace.drift)
    event = answer(job(), result, keep_no_reasoning=False, keep_token_drift=keep)
    assert not isinstance(event, Failed)
    line = event.tokens_line
    assert line is not None and TokenRecord.of(json.loads(line)).drift == trace.drift
    if keep:
        assert isinstance(event, Finished) and event.token_drift
        entry = json.loads(event.line)
    else:
        assert isinstance(event, Discarded) and event.reason == TOKEN_DRIFT
        entry = event.record()["entry"]
    assert entry["metadata"]["discard_reasons"] == [TOKEN_DRIFT]
    assert entry["metadata"]["tokens"]["drift"] == {"turn": 1, "position": 3}


def test_without_tokens_an_entry_is_as_before_and_no_sidecar_line_is_made() -> None:
    event = answer(job(), conversation_result([None, None]), keep_no_reasoning=False, keep_token_drift=False)
    assert isinstance(event, Finished) and event.tokens_line is None and not event.token_drift
    assert "tokens" not in json.loads(event.line)["metadata"]
    # A dataset row's own metadata.tokens never passes for the run's: it would name token data
    # the run never captured (the merge would count it missing and fail the run).
    row_own = job(metadata={"tag": "x", "tokens": {"id": "f" * 32, "turns": 2, "drift": None}})
    event = answer(row_own, conversation_result([None, None]), keep_no_reasoning=False)
    assert isinstance(event, Finished)
    metadata = json.loads(event.line)["metadata"]
    assert metadata["tag"] == "x" and "tokens" not in metadata


# ---------------------------------------------------------------- the loop


def test_the_loop_puts_each_calls_tokens_on_its_turn_and_drops_the_whole_prompt() -> None:
    """Each assistant turn carries its `TurnTokens`, the result the first drift; a call's whole
    prompt (as long as the conversation) is not held while its tools and the next call run."""

    class Capturing:
        """A model whose calls carry ids (as the client makes them with --capture_tokens)."""

        def __init__(self) -> None:
            self.conversation = Conversation(template=50_000, completion=4)
            self.prompts: list[weakref.ref[array[int]]] = []
            self.alive_at_call: list[bool] = []

        async def complete(self, request: ChatRequest) -> ModelReply:
            gc.collect()
            self.alive_at_call.append(any(ref() is not None for ref in self.prompts))
            n = len(self.prompts)
            capture = self.conversation.call({3: 9} if n == 2 else None)  # drift at turn 2
            self.prompts.append(weakref.ref(capture.prompt_ids))
            call = ToolCall(f"c{n}", "terminal", "{}")
            return ModelReply("", "r", (call,) if n < 3 else (), "tool_calls", Usage(1, 1), tokens=capture)

    model = Capturing()
    done = asyncio.run(
        converse(
            AgentConfig(max_iterations=5), model, resolve_tools([]), Prompt("q", job().sandbox_spec("run"))
        )
    )
    assert model.alive_at_call == [False] * 4
    tokens = [t.tokens for t in done.turns if isinstance(t, AssistantTurn)]
    assert [t is not None and t.prompt_offset for t in tokens] == [0, 50_004, 3, 150_012]
    assert done.token_drift is not None and (done.token_drift.turn, done.token_drift.position) == (2, 3)
