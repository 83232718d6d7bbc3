"""The simulated endpoint's token fields (vLLM's shape) over real HTTP with the openai SDK: ids
that decode to the rendered prompt and completion, the prefix property across a multi-turn tool
conversation, each drift mode drifting where `tokenizer` says, deterministic logprobs, and the
reply unchanged when nothing is asked."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from agent.config.agent_config import AgentConfig
from agent.llm.token_probe import probe
from agent.servers.simulated import tokenizer
from agent.servers.simulated.replies import usage_of
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.servers.simulated.token_fields import logprob

MakeEndpoint = Callable[..., SimulatedEndpoint]
ROOT = Path(__file__).resolve().parents[1]
ASK_ALL = {"return_token_ids": True, "logprobs": True, "top_logprobs": 2}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
PROMPT = "List the files, then say how many there are."
SCRIPT = [
    Turn(reasoning="I should look first.", tool_calls=(("terminal", '{"command": "ls"}'),)),
    Turn(
        content="Counting them too.",
        reasoning="Two files; the count is next.",
        reasoning_field="reasoning_content",
        tool_calls=(("terminal", '{"command":"ls | wc -l"}'), ("terminal", "not json")),
    ),
    Turn(content="There are 2 files.", reasoning="Done."),
]


def client_for(endpoint: SimulatedEndpoint) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint.base_url, api_key="k", max_retries=0, timeout=10.0)


def post(endpoint: SimulatedEndpoint, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The raw reply to a chat request with `extra` in its body (the SDK's extra_body)."""
    with client_for(endpoint) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="sim-model",
            messages=messages,
            tools=TOOLS,
            extra_body=extra,  # type: ignore[arg-type]
        )
        reply: dict[str, Any] = json.loads(raw.text)
        return reply


def sent_back(message: dict[str, Any], reasoning: bool) -> dict[str, Any]:
    """The reply's message as a client puts it in the history (reasoning as reasoning_content)."""
    out = {key: message[key] for key in ("role", "content", "tool_calls") if key in message}
    thought = tokenizer.reasoning_of(message)
    if reasoning and thought is not None:
        out["reasoning_content"] = thought
    return out


def converse(endpoint: SimulatedEndpoint, *, reasoning: bool = True) -> list[tuple[list[int], list[int]]]:
    """Run the scripted conversation to its end; each call's (prompt ids, completion ids)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": PROMPT},
    ]
    calls = []
    for _ in range(len(SCRIPT)):
        reply = post(endpoint, messages, **ASK_ALL)
        choice = reply["choices"][0]
        calls.append((reply["prompt_token_ids"], choice["token_ids"]))
        messages.append(sent_back(choice["message"], reasoning))
        for call in choice["message"].get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "a.txt\nb.txt"})
    return calls


def first_drift(calls: list[tuple[list[int], list[int]]]) -> tuple[int, int] | None:
    """(turn, position) of the first prompt that does not start with the sequence so far."""
    sequence: list[int] = []
    for turn, (prompt, completion) in enumerate(calls):
        if prompt[: len(sequence)] != sequence:
            return turn, next(i for i, (a, b) in enumerate(zip(sequence, prompt, strict=False)) if a != b)
        sequence = prompt + completion
    return None


@pytest.fixture
def scripted(make_sim_endpoint: MakeEndpoint) -> Callable[..., SimulatedEndpoint]:
    def make(**options: Any) -> SimulatedEndpoint:
        endpoint = make_sim_endpoint(**options)
        endpoint.script(PROMPT, SCRIPT)
        return endpoint

    return make


def test_ids_decode_to_the_rendered_prompt_and_completion(scripted: Callable[..., SimulatedEndpoint]) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    reply = post(scripted(), messages, return_token_ids=True)
    choice = reply["choices"][0]
    assert tokenizer.decode(reply["prompt_token_ids"]) == tokenizer.render(messages, TOOLS)
    assert reply["prompt_token_ids"] == tokenizer.encode(tokenizer.render(messages, TOOLS))
    assert tokenizer.decode(reply["prompt_token_ids"]).endswith("<|im_start|>assistant\n")
    body = tokenizer.assistant_body(choice["message"])
    assert body.startswith("<think>\nI should look first.\n</think>\n\n<tool_call>\n")
    assert '"arguments": {"command": "ls"}' in body and "call_" not in body  # ids are the server's
    assert choice["token_ids"] == [*tokenizer.encode(body), tokenizer.IM_END]
    assert tokenizer.decode(choice["token_ids"]) == body + "<|im_end|>"
    assert choice["logprobs"] is None  # ids only: logprobs were not asked for
    usage = reply["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        len(reply["prompt_token_ids"]),
        len(choice["token_ids"]),
    )


def test_prefix_property_holds_over_a_multi_turn_tool_conversation(
    scripted: Callable[..., SimulatedEndpoint],
) -> None:
    calls = converse(scripted())
    assert len(calls) == 3 and first_drift(calls) is None
    for (prompt, completion), (after, _) in itertools.pairwise(calls):
        assert len(after) > len(prompt) + len(completion)  # the tool results' tokens follow


def test_the_default_policy_keeps_the_prefix_in_every_reasoning_style(
    make_sim_endpoint: MakeEndpoint,
) -> None:
    for style in ("field", "reasoning_content", "reasoning_details", "think_inline", "none"):
        endpoint = make_sim_endpoint(reasoning=style)
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"style {style}"}]
        first = post(endpoint, messages, return_token_ids=True)
        message = first["choices"][0]["message"]
        call = message["tool_calls"][0]
        echoed = {
            key: message[key]
            for key in ("role", "content", "tool_calls", "reasoning_details")
            if key in message
        }
        if style in ("field", "reasoning_content"):
            echoed["reasoning_content"] = tokenizer.reasoning_of(message)
        messages += [echoed, {"role": "tool", "tool_call_id": call["id"], "content": "hello"}]
        second = post(endpoint, messages, return_token_ids=True)
        sequence = first["prompt_token_ids"] + first["choices"][0]["token_ids"]
        assert second["prompt_token_ids"][: len(sequence)] == sequence, style


def test_a_client_that_drops_reasoning_drifts_at_the_first_think(
    scripted: Callable[..., SimulatedEndpoint],
) -> None:
    calls = converse(scripted(), reasoning=False)
    assert calls[0][1][0] == tokenizer.THINK
    assert first_drift(calls) == (1, len(calls[0][0]))


@pytest.mark.parametrize("mode", ["reasoning", "whitespace", "merge"])
def test_each_drift_mode_drifts_where_the_tokenizer_says(
    scripted: Callable[..., SimulatedEndpoint], mode: str
) -> None:
    calls = converse(scripted(token_drift=mode))
    (prompt, completion), (after, _) = calls[0], calls[1]
    canonical = tokenizer.encode(tokenizer.decode(completion))
    expected = {
        "reasoning": len(prompt),  # turn 0's <think> is gone from turn 1's prompt
        "whitespace": len(prompt) + len(completion) - 1,  # its <|im_end|> follows one more "\n"
        "merge": len(prompt) + (tokenizer.first_merge(canonical) or 0),  # re-encoded canonically
    }[mode]
    assert tokenizer.drift_at(prompt, completion, mode) == expected
    assert tokenizer.drift_at(prompt, completion, "none") is None
    assert first_drift(calls) == (1, expected)
    assert after[expected] != (prompt + completion)[expected]
    if mode == "merge":
        assert completion != canonical and tokenizer.decode(completion) == tokenizer.decode(canonical)
        assert completion == tokenizer.split_first_merge(canonical)
    else:
        assert completion == canonical


def test_no_token_fields_unless_asked(scripted: Callable[..., SimulatedEndpoint]) -> None:
    endpoint = scripted(token_drift="merge")
    messages = [{"role": "user", "content": PROMPT}]
    reply = post(endpoint, messages)
    choice = reply["choices"][0]
    assert "prompt_token_ids" not in reply and "token_ids" not in choice
    assert choice["logprobs"] is None
    body = endpoint.requests[-1].body
    assert reply["usage"] == usage_of(body, SCRIPT[0])  # the rough counts, as before


def test_token_api_none_answers_no_ids_and_the_probe_finds_vllm(
    make_sim_endpoint: MakeEndpoint,
) -> None:
    plain = make_sim_endpoint(token_api="none")
    reply = post(plain, [{"role": "user", "content": "hi"}], **ASK_ALL)
    assert "prompt_token_ids" not in reply and reply["choices"][0]["logprobs"] is None
    found = probe(AgentConfig(model="m", base_url=make_sim_endpoint().base_url, api_key="k", max_retries=0))
    assert (found.api, found.prompt_ids, found.completion_ids, found.logprobs) == ("vllm", True, True, True)
    assert probe(AgentConfig(model="m", base_url=plain.base_url, api_key="k", max_retries=0)).api is None


def test_logprobs_are_deterministic_one_per_id(make_sim_endpoint: MakeEndpoint) -> None:
    endpoint = make_sim_endpoint(policy="answer")
    messages = [{"role": "user", "content": "naïve café 🙂, the answer?"}]
    with client_for(endpoint) as client:
        reply = client.chat.completions.create(
            model="sim-model",
            messages=messages,  # type: ignore[arg-type]
            logprobs=True,
            top_logprobs=3,
            extra_body={"return_token_ids": True},
        )
    choice = reply.choices[0]
    ids = (choice.model_extra or {})["token_ids"]
    content = choice.logprobs.content if choice.logprobs else None
    assert content is not None and len(content) == len(ids) > 0
    for position, (entry, token_id) in enumerate(zip(content, ids, strict=True)):
        assert entry.logprob == logprob(position, token_id) and -10 < entry.logprob <= 0
        assert bytes(entry.bytes or []) == tokenizer.piece(token_id)
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].logprob == entry.logprob
    again = post(endpoint, messages, logprobs=True)  # logprobs without ids: no id fields
    assert "token_ids" not in again["choices"][0] and "prompt_token_ids" not in again
    assert [e["logprob"] for e in again["choices"][0]["logprobs"]["content"]] == [e.logprob for e in content]
    assert all(e["top_logprobs"] == [] for e in again["choices"][0]["logprobs"]["content"])
    named = post(endpoint, messages, logprobs=True, return_tokens_as_token_ids=True, return_token_ids=True)
    named_ids = named["choices"][0]["token_ids"]
    assert [e["token"] for e in named["choices"][0]["logprobs"]["content"]] == [
        f"token_id:{i}" for i in named_ids
    ]


def test_a_streamed_reply_asking_for_ids_still_streams(scripted: Callable[..., SimulatedEndpoint]) -> None:
    with client_for(scripted()) as client:
        stream = client.chat.completions.create(
            model="sim-model",
            messages=[{"role": "user", "content": PROMPT}],
            tools=TOOLS,  # type: ignore[list-item]
            stream=True,
            extra_body=ASK_ALL,
        )
        with stream:
            calls = [
                c.function for chunk in stream for c in chunk.choices[0].delta.tool_calls or [] if c.function
            ]
    assert [f.name for f in calls if f.name] == ["terminal"]
    assert "".join(f.arguments or "" for f in calls) == '{"command": "ls"}'


def test_the_tokenizer_round_trips_and_keeps_specials_atomic() -> None:
    for text in ("", "plain", "naïve 🙂\n\n  x", "<|im_start|>user\nhi<|im_end|>\n", "a<think>b</think>c\n"):
        assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.encode("<tool_call>") == [tokenizer.TOOL_CALL]
    assert tokenizer.encode("the") == [tokenizer.FIRST_MERGE + tokenizer.MERGES.index("the")]
    assert all(token < tokenizer.VOCAB_SIZE for token in tokenizer.encode("any text at all\n" * 3))
    # Equivalent argument spellings render alike: the template writes parsed JSON.
    spaced, tight = (
        {"tool_calls": [{"function": {"name": "t", "arguments": a}}]} for a in ('{"a": 1}', '{"a":1}')
    )
    assert tokenizer.assistant_body(spaced) == tokenizer.assistant_body(tight)


def longest_match(data: bytes) -> list[int]:
    """The reference encoding of text without specials: the longest merge at each byte, else it."""
    merges = {m.encode(): tokenizer.FIRST_MERGE + index for index, m in enumerate(tokenizer.MERGES)}
    ids, at = [], 0
    while at < len(data):
        size = next((n for n in range(8, 1, -1) if data[at : at + n] in merges), 1)
        ids.append(merges[data[at : at + size]] if size > 1 else data[at])
        at += size
    return ids


def test_the_encoding_is_greedy_longest_match() -> None:
    rng = random.Random(7)
    alphabet = [*'the tool and ing ion  "{}:,\nxyzé🙂', *tokenizer.MERGES]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert tokenizer.encode(text) == longest_match(text.encode()), text


def test_cli_serves_a_drift_mode_and_refuses_an_unknown_one() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "agent.servers.simulated", "--port=0"]
    bad = subprocess.run(
        [*base, "--token_drift=sideways"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--token_drift" in bad.stderr
    with subprocess.Popen(
        [*base, "--token_drift=whitespace"], env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            match = re.fullmatch(r"listening on (\S+)", proc.stdout.readline().strip())
            assert match
            with openai.OpenAI(base_url=match.group(1), api_key="k", max_retries=0, timeout=10) as client:
                history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
                reply = client.chat.completions.create(
                    model="m",
                    messages=history,
                    extra_body={"return_token_ids": True},  # type: ignore[arg-type]
                )
            prompt = (reply.model_extra or {})["prompt_token_ids"]
            assert tokenizer.decode(prompt) == tokenizer.render(history, drift="whitespace")
            assert "a\n<|im_end|>" in tokenizer.decode(prompt)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
    assert proc.returncode == 0
