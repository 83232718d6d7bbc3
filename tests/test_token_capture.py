"""--capture_tokens, the client side: the token APIs' request fields, their replies read into
`ModelReply.tokens` (exactly, and refused when missing or hostile), the start-up probe, and the
CLI edge (the probe's line, required/auto, the resume refusals), all over real HTTP through the
real openai SDK and our client.

Where the replies are right, the endpoint is the SimulatedEndpoint (it answers vLLM's fields
with its own tokenizer's ids). Where they must be wrong, or in SGLang's shape, or without ids at
all (a text-only server, as OpenAI's and OpenRouter's are), it is `VllmShape`: a loopback
EndpointServer whose responder answers in the shape of vLLM's `ChatCompletionResponse`
(vllm/entrypoints/openai/protocol.py @ec3b890c14b0: top-level `prompt_token_ids`,
`choices[0].token_ids`, `choices[0].logprobs.content[i].logprob`), SGLang's with `sglang=True`
(`choices[0].prompt_token_ids`, `choices[0].response_token_ids`), none with `ids=False`, and
spoils them with `mutate`.
"""

from __future__ import annotations

import asyncio
import json
from array import array
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.config.agent_config import AgentConfig
from agent.errors import FailureClass, ModelAPIError
from agent.llm import tokens as token_apis
from agent.llm.client import OpenAIChatModel
from agent.llm.request import build_request
from agent.llm.token_probe import probe
from agent.protocols import ChatRequest, ModelReply
from agent.servers.endpoint_server import EndpointServer
from agent.servers.simulated import token_fields, tokenizer
from agent.servers.simulated.replies import build_completion, policy_turn
from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI, Finished, prompts_dataset, read_json

TOKEN_FIELDS = {"return_token_ids", "logprobs", "top_logprobs"}
Mutate = Callable[[dict[str, Any]], None]


def encode(text: str) -> list[int]:
    """The double's tokenizer: one id per UTF-8 byte (deterministic, checkable)."""
    return list(text.encode())


def rendered(messages: list[dict[str, Any]]) -> str:
    return "".join(
        f"<{m['role']}>{m.get('reasoning_content') or ''}{m.get('content') or ''}" for m in messages
    )


def generated(message: dict[str, Any]) -> str:
    return (
        (message.get("reasoning") or "")
        + (message.get("content") or "")
        + json.dumps(message.get("tool_calls"))
    )


def logprob(k: int) -> float:
    return -(k % 7) / 8


class VllmShape:
    """An endpoint answering in vLLM's token shape when asked (`return_token_ids`), SGLang's with
    `sglang`; `mutate` spoils each reply the way a hostile endpoint would; every body is kept."""

    def __init__(self, *, sglang: bool = False, ids: bool = True, mutate: Mutate | None = None) -> None:
        self.sglang, self.ids, self.mutate = sglang, ids, mutate
        self.bodies: list[dict[str, Any]] = []
        self.server = EndpointServer(self.respond)

    async def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        messages = body["messages"]
        completion = build_completion(
            body, policy_turn("tool_then_answer", "field", messages, body.get("tools") or []), "m"
        )
        choice = completion["choices"][0]
        if self.ids and body.get("return_token_ids"):
            ids, prompt = encode(generated(choice["message"])), encode(rendered(messages))
            if self.sglang:
                choice.update(prompt_token_ids=prompt, response_token_ids=ids)
            else:
                completion["prompt_token_ids"], choice["token_ids"] = prompt, ids
            if body.get("logprobs"):
                content = [
                    {"token": chr(i), "logprob": logprob(k), "bytes": [i], "top_logprobs": []}
                    for k, i in enumerate(ids)
                ]
                choice["logprobs"] = {"content": content}
        if self.mutate is not None:
            self.mutate(completion)
        return completion

    @property
    def base_url(self) -> str:
        return self.server.base_url


@pytest.fixture
def vllm() -> Iterator[VllmShape]:
    double = VllmShape()
    with double.server:
        yield double


@pytest.fixture
def text_only() -> Iterator[VllmShape]:
    """A server that ignores the token fields (as OpenAI's and OpenRouter's do)."""
    double = VllmShape(ids=False)
    with double.server:
        yield double


def ask(base_url: str, request: ChatRequest) -> ModelReply:
    async def go() -> ModelReply:
        model = OpenAIChatModel(base_url=base_url, api_key="k", model="m", max_retries=0)
        try:
            return await model.complete(request)
        finally:
            await model.aclose()

    return asyncio.run(go())


def hello(token_api: str | None) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hello"}], tools=[], token_api=token_api)


def test_token_fields_are_sent_only_with_a_token_api_and_read_exactly(vllm: VllmShape) -> None:
    plain = ask(vllm.base_url, hello(None))  # as a tool's model call asks: never training data
    assert plain.tokens is None and not TOKEN_FIELDS & set(vllm.bodies[0])
    reply = ask(vllm.base_url, hello("vllm"))
    sent = vllm.bodies[1]
    assert (sent["return_token_ids"], sent["logprobs"], sent["top_logprobs"]) == (True, True, 0)
    assert reply.tokens is not None
    expected = encode(reply.reasoning or "") + encode(reply.content) + encode("null")
    assert reply.tokens.prompt_ids == array("i", encode("<user>hello"))
    assert reply.tokens.completion_ids == array("i", expected)
    assert reply.tokens.logprobs == array("d", [logprob(k) for k in range(len(expected))])


def test_the_simulated_endpoints_ids_and_logprobs_are_read_exactly(sim_endpoint: SimulatedEndpoint) -> None:
    tools = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]
    request = replace(hello("vllm"), tools=tools)
    reply = ask(sim_endpoint.base_url, request)
    assert reply.tokens is not None and reply.tool_calls
    message = sim_endpoint.requests[-1]
    assert reply.tokens.prompt_ids == array(
        "i", tokenizer.prompt_ids(message.body["messages"], tools, "none")
    )
    call = reply.tool_calls[0]
    said = {"role": "assistant", "content": reply.content, "reasoning": reply.reasoning}
    said["tool_calls"] = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    ]
    expected = tokenizer.completion_ids(said, "none")
    assert reply.tokens.completion_ids == array("i", expected)
    assert reply.tokens.logprobs == array("d", [token_fields.logprob(at, i) for at, i in enumerate(expected)])


def test_a_reply_without_logprobs_keeps_its_ids() -> None:
    double = VllmShape(mutate=lambda c: c["choices"][0].update(logprobs=None))
    with double.server:
        reply = ask(double.base_url, hello("vllm"))
    assert reply.tokens is not None and reply.tokens.logprobs is None and reply.tokens.completion_ids


def _choice(**fields: Any) -> Mutate:
    return lambda completion: completion["choices"][0].update(fields)


def _top(**fields: Any) -> Mutate:
    return lambda completion: completion.update(fields)


def _first_logprob(value: Any) -> Mutate:
    return lambda completion: completion["choices"][0]["logprobs"]["content"][0].update(logprob=value)


HOSTILE: dict[str, tuple[Mutate, str]] = {
    "no ids at all": (_top(prompt_token_ids=None), "gave no token ids (prompt_token_ids missing)"),
    "no completion ids": (_choice(token_ids=None), "gave no token ids (choices[0].token_ids missing)"),
    "empty prompt": (_top(prompt_token_ids=[]), "prompt_token_ids is empty"),
    "ids not a list": (_top(prompt_token_ids="1 2 3"), "prompt_token_ids is not a list"),
    "float ids": (_choice(token_ids=[1.5, 2.0]), "holds something other than integers"),
    "string ids": (_top(prompt_token_ids=["1"]), "holds something other than integers"),
    "bool ids": (_top(prompt_token_ids=[True, 5]), "holds something other than integers"),
    "negative id": (_top(prompt_token_ids=[5, -1, 7]), "holds a negative id"),
    "id beyond int32": (_choice(token_ids=[2**31]), "holds an id beyond 32 bits"),
    "huge id": (_top(prompt_token_ids=[10**400]), "holds an id beyond 32 bits"),
    "logprobs short": (lambda c: c["choices"][0]["logprobs"]["content"].pop(), "entries for"),
    "logprob NaN": (_first_logprob(float("nan")), "not finite"),
    "logprob -inf": (_first_logprob(float("-inf")), "not finite"),
    "logprob positive": (_first_logprob(3.0), "at most 0"),
    "logprob a string": (_first_logprob("-0.5"), "not a number"),
    "logprob entry not an object": (
        lambda c: c["choices"][0]["logprobs"]["content"].__setitem__(0, 1),
        "without",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_token_reply_missing_or_spoiled_fails_the_call_as_invalid_response(case: str) -> None:
    mutate, said = HOSTILE[case]
    double = VllmShape(mutate=mutate)
    with double.server, pytest.raises(ModelAPIError) as caught:
        ask(double.base_url, hello("vllm"))
    assert caught.value.error_class is FailureClass.INVALID_RESPONSE
    assert "(vllm token API)" in str(caught.value) and said in str(caught.value), caught.value


def test_lists_longer_than_any_context_are_refused(monkeypatch: pytest.MonkeyPatch, vllm: VllmShape) -> None:
    monkeypatch.setattr(token_apis, "MAX_PROMPT_IDS", 8)  # the real bound (2**21) as a small one
    with pytest.raises(ModelAPIError, match=r"prompt_token_ids holds 11 ids \(at most 8 are kept\)"):
        ask(vllm.base_url, hello("vllm"))


def test_sglang_replies_are_read_under_both_names_of_their_completion_ids() -> None:
    renamed = VllmShape(sglang=True)
    older = VllmShape(
        sglang=True,
        mutate=lambda c: c["choices"][0].update(token_ids=c["choices"][0].pop("response_token_ids")),
    )
    for double in (renamed, older):
        with double.server:
            reply = ask(double.base_url, hello("sglang"))
            with pytest.raises(ModelAPIError, match=r"gave no token ids \(prompt_token_ids"):
                ask(double.base_url, hello("vllm"))  # vLLM's fields are not where SGLang puts them
        assert reply.tokens is not None and reply.tokens.prompt_ids == array("i", encode("<user>hello"))
        assert len(reply.tokens.completion_ids) == len(reply.tokens.logprobs or ())


def _config(base_url: str, **fields: Any) -> AgentConfig:
    return AgentConfig(model="m", base_url=base_url, api_key="k", max_retries=0, **fields)


def test_build_request_asks_for_tokens_and_gives_reasoning_back_only_when_capturing() -> None:
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "reasoning": "I should look.", "tool_calls": []},
    ]
    plain = build_request(_config("http://127.0.0.1:9/v1"), history, [])
    capturing = build_request(_config("http://127.0.0.1:9/v1", token_api="vllm"), history, [])
    assert plain.token_api is None and capturing.token_api == "vllm"
    assert plain.messages[-1] == {"role": "assistant", "content": "", "tool_calls": []}  # bytes kept
    said = capturing.messages[-1]
    assert (said["reasoning"], said["reasoning_content"]) == ("I should look.", "I should look.")
    assert capturing.messages[:-1] == plain.messages[:-1]


def test_the_probe_finds_vllm_sglang_or_nothing(vllm: VllmShape, text_only: VllmShape) -> None:
    found = probe(_config(vllm.base_url))
    assert (found.api, found.prompt_ids, found.completion_ids, found.logprobs) == ("vllm", True, True, True)
    assert [b["max_tokens"] for b in vllm.bodies] == [4] and set(vllm.bodies[0]) >= TOKEN_FIELDS
    sglang = VllmShape(sglang=True)
    with sglang.server:
        assert probe(_config(sglang.base_url)).api == "sglang"  # after vLLM's reading failed
    assert len(sglang.bodies) == 2
    none = probe(_config(text_only.base_url))
    assert none.api is None and not none.usable
    assert "vllm: the endpoint (vllm token API) gave no token ids" in none.detail and "sglang:" in none.detail


def test_the_probe_raises_what_is_no_finding_about_tokens() -> None:
    with pytest.raises(ModelAPIError) as caught:
        probe(_config("http://127.0.0.1:9/v1"))  # nothing listens there
    assert caught.value.error_class is FailureClass.CONNECTION


# ------------------------------------------------------------------------- the batch CLI


def run(tmp_path: Path, base_url: str, *flags: str, run_name: str = "cap") -> Finished:
    prompts_dataset(tmp_path / "prompts.jsonl", ["Say hi"])
    cli = BatchCLI(tmp_path)
    base = ("--dataset_file=prompts.jsonl", "--batch_size=1", f"--run_name={run_name}", "--num_workers=1")
    return cli.run(*base, f"--base_url={base_url}", "--model=m", *flags)


def recorded(tmp_path: Path, run_name: str = "cap") -> tuple[str, str | None]:
    agent = read_json(tmp_path / "data" / run_name / "run_config.json")["agent"]
    return agent["capture_tokens"], agent["token_api"]


def error_lines(done: Finished) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]


def test_required_without_ids_stops_with_one_line(tmp_path: Path, text_only: VllmShape) -> None:
    done = run(tmp_path, text_only.base_url, "--capture_tokens=required")
    assert done.returncode == 2, done
    (line,) = error_lines(done)
    assert line.startswith(
        f"error: --capture_tokens=required: token capture: {text_only.base_url} gives no token ids "
        "(vllm: the endpoint (vllm token API) gave no token ids "
        "(prompt_token_ids and choices[0].token_ids missing)"
    ), done
    assert line.endswith(
        ": use a server that returns token ids, e.g. vLLM >= 0.10.2, or --capture_tokens=auto"
    )
    assert not (tmp_path / "data" / "cap" / "run_config.json").exists()


def test_a_probe_that_cannot_reach_the_endpoint_stops_the_run(tmp_path: Path) -> None:
    done = run(tmp_path, "http://127.0.0.1:9/v1", "--capture_tokens=auto", "--max_retries=0")
    assert done.returncode == 2, done
    (line,) = error_lines(done)
    assert line.startswith(
        "error: --capture_tokens=auto: could not ask http://127.0.0.1:9/v1 for token ids (connection: "
    )


def test_auto_without_ids_warns_once_and_runs_text_only(tmp_path: Path, text_only: VllmShape) -> None:
    done = run(tmp_path, text_only.base_url, "--capture_tokens=auto")
    assert done.returncode == 0, done
    warned = [line for line in done.stderr.splitlines() if "token capture:" in line]
    assert len(warned) == 1 and warned[0].startswith("WARNING token capture:"), done
    assert warned[0].endswith("this run keeps text only (--capture_tokens=auto)")
    assert recorded(tmp_path) == ("auto", None)
    conversation = [body for body in text_only.bodies if body.get("tools")]
    assert conversation and not any(TOKEN_FIELDS & set(body) for body in conversation)


def test_auto_without_ids_and_the_rl_export_stops_before_the_run(
    tmp_path: Path, text_only: VllmShape
) -> None:
    """The RL export needs ids: found none, the run would be paid for and then fail its export."""
    done = run(tmp_path, text_only.base_url, "--capture_tokens=auto", "--export=rl")
    assert done.returncode == 2, done
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: --export=rl needs token ids and token capture:")
    assert errors[0].endswith("or leave it out of --export"), done
    assert not [body for body in text_only.bodies if body.get("tools")]  # no conversation ran


def test_a_capture_run_asks_every_call_for_tokens_and_a_resume_keeps_its_mode(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    done = run(tmp_path, sim_endpoint.base_url, "--capture_tokens=required")
    assert done.returncode == 0, done
    said = [line for line in done.stderr.splitlines() if "token capture:" in line or "token ids it" in line]
    assert said == [  # the question first: a hanging endpoint once held a silent start
        f"INFO asking {sim_endpoint.base_url} which token ids it gives (--capture_tokens=required)…",
        f"INFO token capture: {sim_endpoint.base_url} gives prompt ids, completion ids and logprobs "
        "(vllm: vLLM >= 0.10.2)",
    ]
    assert recorded(tmp_path) == ("required", "vllm")
    conversation = [r.body for r in sim_endpoint.requests if r.body.get("tools")]
    assert len(conversation) == 2 and all(body["return_token_ids"] is True for body in conversation)
    answered = conversation[1]["messages"][-2]  # the tool call, given back with its reasoning
    assert answered["role"] == "assistant" and answered["reasoning_content"] == answered["reasoning"] != ""
    other_mode = run(tmp_path, sim_endpoint.base_url, "--capture_tokens=auto", "--resume")
    assert other_mode.returncode == 2 and error_lines(other_mode) == [
        "error: --resume: run cap ran with --capture_tokens=required (run_config.json), not auto: one run "
        "keeps one kind of data; pass --capture_tokens=required, or choose another --run_name"
    ], other_mode


def test_a_resume_whose_endpoint_gives_another_token_api_is_refused(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint, text_only: VllmShape
) -> None:
    assert run(tmp_path, sim_endpoint.base_url, "--capture_tokens=auto").returncode == 0
    assert recorded(tmp_path) == ("auto", "vllm")
    changed = run(tmp_path, text_only.base_url, "--capture_tokens=auto", "--resume")
    assert changed.returncode == 2 and error_lines(changed) == [
        f"error: --resume: run cap captured vllm (run_config.json) but {text_only.base_url} now gives no "
        "token ids: one run, one token API; resume against the server the run began with, or choose "
        "another --run_name"
    ], changed
    assert recorded(tmp_path) == ("auto", "vllm")  # refused before the run's record was touched


def test_capture_off_sends_no_probe_and_records_off(tmp_path: Path, vllm: VllmShape) -> None:
    done = run(tmp_path, vllm.base_url)
    assert done.returncode == 0, done
    assert recorded(tmp_path) == ("off", None) and "token capture" not in done.stderr
    assert vllm.bodies and not any(TOKEN_FIELDS & set(body) for body in vllm.bodies)


def test_reasoning_given_back_keeps_the_next_prompt_a_continuation(sim_endpoint: SimulatedEndpoint) -> None:
    """The simulated template renders an earlier turn's <think> block from the reasoning sent
    back (as Qwen3's does): with it the next prompt starts with the ids so far; without it, not."""
    tools = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]
    capturing = replace(_config(sim_endpoint.base_url), token_api="vllm")
    user = {"role": "user", "content": "hello"}
    first = ask(sim_endpoint.base_url, build_request(capturing, [user], tools))
    assert first.tokens is not None and first.reasoning and first.tool_calls
    call = first.tool_calls[0]
    said = {"role": "assistant", "content": first.content, "reasoning": first.reasoning}
    said["tool_calls"] = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    ]
    history = [user, said, {"role": "tool", "tool_call_id": call.id, "content": "42"}]
    so_far = first.tokens.prompt_ids + first.tokens.completion_ids
    second = ask(sim_endpoint.base_url, build_request(capturing, history, tools))
    assert second.tokens is not None and second.tokens.prompt_ids[: len(so_far)] == so_far
    plain = build_request(_config(sim_endpoint.base_url), history, tools)  # no reasoning given back
    third = ask(sim_endpoint.base_url, replace(plain, token_api="vllm"))
    assert third.tokens is not None and third.tokens.prompt_ids[: len(so_far)] != so_far
