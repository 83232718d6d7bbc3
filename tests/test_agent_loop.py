"""The agent loop end to end: `AIAgent` against the simulated endpoint (real HTTP, real openai SDK)
with real local sandboxes. Outcomes, result fields, errors the model sees, sandbox lifecycle and
the API key staying out of trajectories, tool output and logs."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agent.config.agent_config import AgentConfig
from agent.errors import ConfigError
from agent.llm import client as llm_client
from agent.sandboxes import SandboxOptions
from agent.servers.endpoint_server import EndpointFault
from agent.servers.simulated.replies import build_completion
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from run_agent import AIAgent
from tests.support.endpoints import endpoint_with_call_ids

KEY = "sk-test-LOOP-0123456789abcdef"


def agent_for(endpoint: SimulatedEndpoint, tmp_path: Path, **options: Any) -> AIAgent:
    """An agent on `endpoint` with the terminal and file tools in local sandboxes under tmp_path."""
    options.setdefault("enabled_toolsets", ["terminal", "file"])
    options.setdefault("max_retries", 0)
    return AIAgent(
        base_url=endpoint.base_url,
        api_key=KEY,
        model="sim-model",
        sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
        trajectory_dir=str(tmp_path),
        **options,
    )


def call(name: str, **arguments: Any) -> tuple[str, str]:
    return name, json.dumps(arguments)


def saved(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / name).read_text(encoding="utf-8").splitlines()]


def tool_results(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in result["messages"] if m["role"] == "tool"]


def leftover_sandboxes(tmp_path: Path) -> list[Path]:
    root = tmp_path / "sandboxes"
    return list(root.rglob("*")) if root.exists() else []


# ---------------------------------------------------------------- outcomes


def test_tool_call_then_answer_completes_with_every_result_field(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    turns = [
        Turn(reasoning="compute it", tool_calls=(call("terminal", command="echo $((6 * 7)) && pwd"),)),
        Turn(content="The answer is 42.", reasoning="done"),
    ]
    sim_endpoint.script("compute", turns)
    result = agent_for(sim_endpoint, tmp_path).run_conversation("compute")

    assert (result["outcome"], result["completed"], result["partial"], result["failed"]) == (
        "completed",
        True,
        False,
        False,
    )
    assert (result["error"], result["error_class"]) == (None, None)
    assert result["final_response"] == "The answer is 42."
    assert result["api_calls"] == 2 == len(sim_endpoint.requests)
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    (answer,) = tool_results(result)
    assert answer["tool_call_id"] == result["messages"][1]["tool_calls"][0]["id"]
    output = json.loads(answer["content"])
    assert output["exit_code"] == 0 and output["error"] is None
    number, workdir = output["output"].split()
    assert number == "42"  # the command really ran …
    assert workdir == "/workspace"  # … inside the prompt's sandbox (shown as bwrap shows it)
    assert sim_endpoint.requests[1].body["messages"][-1]["content"] == answer["content"]  # the model saw it
    assert leftover_sandboxes(tmp_path) == []  # destroyed when the conversation ended

    reported = [
        build_completion(r.body, t, "sim-model")["usage"]
        for r, t in zip(sim_endpoint.requests, turns, strict=True)
    ]
    prompt = sum(u["prompt_tokens"] for u in reported)
    completion = sum(u["completion_tokens"] for u in reported)
    reasoning = sum(u["completion_tokens_details"]["reasoning_tokens"] for u in reported)
    assert result["usage"] == {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "reasoning_tokens": reasoning,
        "total_tokens": prompt + completion,
    }
    assert (result["input_tokens"], result["output_tokens"], result["total_tokens"]) == (
        prompt,
        completion,
        prompt + completion,
    )
    assert reasoning > 0


def test_an_answer_on_the_last_allowed_call_is_completed(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script(
        "just in time",
        [
            Turn(tool_calls=(call("terminal", command="true"),)),
            Turn(tool_calls=(call("terminal", command="true"),)),
            Turn(content="made it"),
        ],
    )
    agent = agent_for(sim_endpoint, tmp_path, max_iterations=3, save_trajectories=True)
    result = agent.run_conversation("just in time")
    assert (result["outcome"], result["completed"], result["partial"]) == ("completed", True, False)
    assert result["api_calls"] == 3 and result["final_response"] == "made it"
    (line,) = saved(tmp_path, "trajectory_samples.jsonl")
    assert set(line) == {"conversations", "timestamp", "model", "completed"}
    assert (line["model"], line["completed"]) == ("sim-model", True)
    assert [t["from"] for t in line["conversations"]] == [
        "system",
        "human",
        "gpt",
        "tool",
        "gpt",
        "tool",
        "gpt",
    ]
    assert not (tmp_path / "failed_trajectories.jsonl").exists()


def test_hitting_the_limit_is_max_iterations_partial_not_failed(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script("forever", [Turn(tool_calls=(call("terminal", command="echo again"),))] * 5)
    agent = agent_for(sim_endpoint, tmp_path, max_iterations=3, save_trajectories=True)
    result = agent.run_conversation("forever")
    assert (result["outcome"], result["completed"], result["partial"], result["failed"]) == (
        "max_iterations",
        False,
        True,
        False,
    )
    assert result["final_response"] is None and result["error_class"] is None
    assert result["error"] == "no final answer within 3 model calls (raise --max_turns)"
    assert result["api_calls"] == 3 == len(sim_endpoint.requests)
    assert len(tool_results(result)) == 3  # every call's tools ran before the limit
    (line,) = saved(tmp_path, "failed_trajectories.jsonl")
    assert line["completed"] is False
    assert not (tmp_path / "trajectory_samples.jsonl").exists()


@pytest.mark.parametrize("turn", [Turn(content=""), Turn(content="  \n", reasoning="I have nothing to add")])
def test_an_empty_reply_is_gave_up(sim_endpoint: SimulatedEndpoint, tmp_path: Path, turn: Turn) -> None:
    sim_endpoint.script("shrug", [turn])
    result = agent_for(sim_endpoint, tmp_path, max_iterations=5).run_conversation("shrug")
    assert (result["outcome"], result["completed"], result["partial"], result["failed"]) == (
        "gave_up",
        False,
        True,
        False,
    )
    assert result["api_calls"] == 1 and result["final_response"] is None
    assert "empty" in result["error"]


def test_a_final_answer_cut_at_max_tokens_is_truncated(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script("long", [Turn(content="The first half of an ans", finish_reason="length")])
    agent = agent_for(sim_endpoint, tmp_path, max_tokens=8, save_trajectories=True)
    result = agent.run_conversation("long")
    assert (result["outcome"], result["completed"], result["partial"], result["failed"]) == (
        "truncated",
        False,
        True,
        False,
    )
    assert result["final_response"] is None and "max_tokens" in result["error"]
    assert result["messages"][-1]["truncated"] is True
    assert saved(tmp_path, "failed_trajectories.jsonl")[0]["completed"] is False


def test_tool_arguments_cut_at_max_tokens_become_an_error_the_model_reads(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script(
        "cut call",
        [
            Turn(tool_calls=(("terminal", '{"command": "ec'),), finish_reason="length"),
            Turn(content="retrying"),
        ],
    )
    result = agent_for(sim_endpoint, tmp_path).run_conversation("cut call")
    (error,) = tool_results(result)
    assert "not valid JSON" in json.loads(error["content"])["error"]
    assert result["outcome"] == "completed" and result["api_calls"] == 2


@pytest.mark.parametrize(
    ("fault", "error_class"),
    [
        (EndpointFault(401, "invalid api key"), "auth"),
        (EndpointFault(400, "bad request"), "bad_request"),
        (EndpointFault(500, "down"), "server_error"),
    ],
)
def test_an_api_failure_is_failed_with_its_class_never_completed(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, fault: EndpointFault, error_class: str
) -> None:
    sim_endpoint.script(
        "doomed", [Turn(tool_calls=(call("terminal", command="echo step"),)), Turn(fault=fault)]
    )
    agent = agent_for(sim_endpoint, tmp_path, save_trajectories=True)
    result = agent.run_conversation("doomed")
    assert (result["outcome"], result["completed"], result["partial"], result["failed"]) == (
        "api_failure",
        False,
        False,
        True,
    )
    assert result["error_class"] == error_class and fault.message in result["error"]
    assert result["final_response"] is None
    assert result["api_calls"] == 2 and len(tool_results(result)) == 1  # the work so far is kept
    (line,) = saved(tmp_path, "failed_trajectories.jsonl")
    assert line["completed"] is False
    assert not (tmp_path / "trajectory_samples.jsonl").exists()
    assert leftover_sandboxes(tmp_path) == []


def test_the_loop_rides_out_transient_failures(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 0.01)
    limited = EndpointFault(429, "slow down", headers={"Retry-After": "0.1"})
    sim_endpoint.script(
        "bumpy",
        [
            Turn(fault=EndpointFault(kind="hang")),
            Turn(tool_calls=(call("terminal", command="echo step"),)),
            Turn(fault=limited),
            Turn(fault=EndpointFault(kind="drop")),
            Turn(fault=EndpointFault(502)),
            Turn(content="arrived"),
        ],
    )
    agent = agent_for(sim_endpoint, tmp_path, max_retries=3, request_timeout=1.0)  # a hang costs one timeout
    result = agent.run_conversation("bumpy")
    assert (result["outcome"], result["final_response"]) == ("completed", "arrived")
    assert result["api_calls"] == 2  # retries are not turns
    assert len(sim_endpoint.requests) == 6
    assert sim_endpoint.stats.faults == {"hang": 1, "429": 1, "drop": 1, "502": 1}


def test_retries_exhausted_fail_the_conversation_after_max_retries_plus_one_requests(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 0.01)
    sim_endpoint.script("down", [Turn(fault=EndpointFault(503, "overloaded"))])
    result = agent_for(sim_endpoint, tmp_path, max_retries=2).run_conversation("down")
    assert (result["outcome"], result["failed"], result["completed"]) == ("api_failure", True, False)
    assert result["error_class"] == "server_error" and result["api_calls"] == 1
    assert len(sim_endpoint.requests) == 3


# ---------------------------------------------------------------- errors the model sees


def test_errors_the_model_should_see_become_tool_results_and_the_loop_continues(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    calls = (
        ("terminal", '{"command": "echo unterminated'),  # invalid JSON
        ("terminal", "[1, 2]"),  # JSON, but not an object
        call("terminal", command=5),  # wrong type
        call("read_file"),  # required field missing
        call("terminal", command="echo hi", timeout=3, colour="red"),  # an unknown extra field is fine
        call("read_file", path="."),  # a directory: the handler's own error
        call("read_file", path="bad\x00name"),  # the handler raises (ValueError: embedded null byte)
        call("terminal", command="echo failing >&2; exit 3"),  # a failing command
    )
    sim_endpoint.script("errors", [Turn(tool_calls=calls), Turn(content="handled")])
    result = agent_for(sim_endpoint, tmp_path).run_conversation("errors")

    results = tool_results(result)
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in result["messages"][1]["tool_calls"]]
    contents = [json.loads(r["content"]) for r in results]
    assert "not valid JSON" in contents[0]["error"]
    assert "must be a JSON object" in contents[1]["error"]
    assert "field 'command' must be string" in contents[2]["error"]
    assert "missing required field 'path'" in contents[3]["error"]
    assert contents[4] == {"output": "hi\n", "exit_code": 0, "error": None}
    assert "is a directory" in contents[5]["error"]
    assert contents[6]["error"].startswith("Tool 'read_file' failed: ValueError")
    assert contents[7] == {"output": "failing\n", "exit_code": 3, "error": None}
    assert (result["outcome"], result["final_response"], result["api_calls"]) == ("completed", "handled", 2)
    sent = sim_endpoint.requests[1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "tool"] == [r["content"] for r in results]


def test_an_unknown_tool_is_an_error_not_renamed(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    sim_endpoint.script(
        "case",
        [
            Turn(tool_calls=(call("Terminal", command=f"touch {marker}"),)),
            Turn(content="ok, lower case then"),
        ],
    )
    result = agent_for(sim_endpoint, tmp_path, save_trajectories=True).run_conversation("case")
    (answer,) = tool_results(result)
    error = json.loads(answer["content"])["error"]
    assert error.startswith("Unknown tool 'Terminal'") and "terminal" in error  # lists the real ones
    assert answer["name"] == "Terminal"
    assert not marker.exists()  # `terminal` was not run in its place
    assert result["outcome"] == "completed"
    gpt = saved(tmp_path, "trajectory_samples.jsonl")[0]["conversations"][2]["value"]
    assert '"name": "Terminal"' in gpt


@pytest.mark.parametrize("ids", [["dup", "dup"], [None, "call_0"]])
def test_calls_sharing_an_id_each_get_their_own_result(tmp_path: Path, ids: list[str | None]) -> None:
    turns = [
        Turn(
            tool_calls=(call("terminal", command="echo from-terminal"), call("read_file", path="/etc/hosts"))
        ),
        Turn(content="both ran"),
    ]
    with endpoint_with_call_ids(turns, ids) as endpoint:
        agent = AIAgent(
            base_url=endpoint.base_url,
            api_key=KEY,
            model="sim-model",
            enabled_toolsets=["terminal", "file"],
            max_retries=0,
            save_trajectories=True,
            sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
            trajectory_dir=str(tmp_path),
        )
        result = agent.run_conversation("two calls, one id")

    asked = result["messages"][1]
    first_id, second_id = (c["id"] for c in asked["tool_calls"])
    assert first_id != second_id
    assert asked["_renamed_call_ids"] == {second_id: "call_0" if None in ids else "dup"}
    terminal, read_file = tool_results(result)
    assert (terminal["tool_call_id"], terminal["name"]) == (first_id, "terminal")
    assert (read_file["tool_call_id"], read_file["name"]) == (second_id, "read_file")
    assert "from-terminal" in terminal["content"] and "from-terminal" not in read_file["content"]
    (entry,) = saved(tmp_path, "trajectory_samples.jsonl")
    responses = entry["conversations"][3]["value"].split("</tool_response>")[:-1]
    labelled = [json.loads(r.split("<tool_response>\n")[1]) for r in responses]
    assert [(r["tool_call_id"], r["name"]) for r in labelled] == [
        (first_id, "terminal"),
        (second_id, "read_file"),
    ]
    assert "from-terminal" in str(labelled[0]["content"])
    assert "from-terminal" not in str(labelled[1]["content"])


def test_each_conversation_gets_its_own_sandbox_destroyed_afterwards(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script(
        "first",
        [Turn(tool_calls=(call("terminal", command="echo secret > note.txt; pwd"),)), Turn(content="a")],
    )
    sim_endpoint.script("second", [Turn(tool_calls=(call("read_file", path="note.txt"),)), Turn(content="b")])
    agent = agent_for(sim_endpoint, tmp_path)
    first = agent.run_conversation("first")
    assert leftover_sandboxes(tmp_path) == []
    second = agent.run_conversation("second")
    workdir = json.loads(tool_results(first)[0]["content"])["output"].strip()
    assert workdir == "/workspace"  # as bwrap and docker show it, never the host directory
    assert "File not found" in json.loads(tool_results(second)[0]["content"])["error"]
    assert leftover_sandboxes(tmp_path) == []


def test_without_usable_tools_none_are_offered_and_a_call_is_still_answered(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script(
        "no tools", [Turn(tool_calls=(call("terminal", command="true"),)), Turn(content="fine")]
    )
    agent = agent_for(sim_endpoint, tmp_path, enabled_toolsets=["web"])  # declared, no backend here
    result = agent.run_conversation("no tools")
    assert "tools" not in sim_endpoint.requests[0].body
    assert result["toolsets_used"] == []
    assert json.loads(tool_results(result)[0]["content"])["error"].startswith("Unknown tool 'terminal'")
    assert result["outcome"] == "completed"
    assert not (tmp_path / "sandboxes").exists()  # no sandbox was needed


# ---------------------------------------------------------------- the API key stays out


def test_the_api_key_never_reaches_trajectory_tool_output_or_logs(
    sim_endpoint: SimulatedEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    sim_endpoint.script(
        "show env",
        [Turn(tool_calls=(call("terminal", command="env; cat /proc/self/environ"),)), Turn(content="ok")],
    )
    agent = agent_for(sim_endpoint, tmp_path, save_trajectories=True, verbose_logging=True)
    result = agent.run_conversation("show env")

    assert sim_endpoint.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was used
    (env,) = tool_results(result)
    assert "PATH=" in env["content"] and "HOME=" in env["content"]  # `env` really ran
    assert KEY not in json.dumps(result["messages"])
    assert KEY not in (tmp_path / "trajectory_samples.jsonl").read_text(encoding="utf-8")
    assert any("terminal" in r.getMessage() for r in caplog.records)  # debug logging was on
    assert KEY not in caplog.text
    assert all(KEY not in r.getMessage() for r in caplog.records)
    assert KEY not in repr(agent.config)


def test_a_patch_of_a_file_that_is_not_utf8_reaches_the_model_and_the_trajectory(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    """The diff of a Latin-1 file carries undecodable bytes: the model reads them as U+FFFD,
    and the next request (and the saved trajectory) can still be encoded as UTF-8."""
    sim_endpoint.script(
        "latin1",
        [
            Turn(tool_calls=[call("terminal", command="printf 'caf\\351 old\\n' > l1.txt")]),
            Turn(tool_calls=[call("patch", path="l1.txt", old_string="old", new_string="new")]),
            Turn(content="patched"),
        ],
    )
    result = agent_for(sim_endpoint, tmp_path, save_trajectories=True).run_conversation("latin1")

    assert (result["outcome"], result["final_response"]) == ("completed", "patched")
    diff = json.loads(tool_results(result)[1]["content"])["diff"]
    assert "+caf\ufffd new" in diff
    sent = [m["content"] for m in sim_endpoint.requests[2].body["messages"] if m["role"] == "tool"]
    assert "+caf\ufffd new" in json.loads(sent[1])["diff"]
    turns = saved(tmp_path, "trajectory_samples.jsonl")[0]["conversations"]
    patch_turn = next(t["value"] for t in turns if t["from"] == "tool" and "diff" in t["value"])
    assert "caf\\ufffd new" in patch_turn or "caf\ufffd new" in patch_turn


# ---------------------------------------------------------------- the facade and its config


def test_from_config_runs_a_whole_config_with_the_toolsets_given(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script("cfg", [Turn(tool_calls=(call("read_file", path="nope.txt"),)), Turn(content="ok")])
    config = AgentConfig(
        model="sim-model",
        base_url=sim_endpoint.base_url,
        api_key=KEY,
        max_retries=0,
        enabled_toolsets=("web",),
    )
    agent = AIAgent.from_config(
        config,
        enabled_toolsets=["terminal", "file"],
        sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
    )
    result = agent.run_conversation("cfg")

    assert agent.config == dataclasses.replace(config, enabled_toolsets=("terminal", "file"))
    assert result["completed"] and result["toolsets_used"] == ["terminal", "file"]
    assert "error" in json.loads(tool_results(result)[0]["content"])  # the file tool ran: no such file
    offered = {t["function"]["name"] for t in sim_endpoint.requests[0].body["tools"]}
    assert {"terminal", "read_file"} <= offered and "web_search" not in offered


def test_the_turn_limit_default_is_the_configs(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    assert agent_for(sim_endpoint, tmp_path).config.max_iterations == AgentConfig().max_iterations
    assert agent_for(sim_endpoint, tmp_path, max_iterations=3).config.max_iterations == 3


def test_a_remote_endpoint_without_a_key_is_a_config_error_before_any_call() -> None:
    agent = AIAgent(base_url="http://192.0.2.1:9/v1", model="m", enabled_toolsets=[])
    with pytest.raises(ConfigError, match=r"no API key for http://192\.0\.2\.1:9/v1: pass --api_key"):
        agent.run_conversation("q")


def test_an_endpoint_on_this_machine_needs_no_key(sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.script("local", [Turn(content="fine")])
    agent = AIAgent(base_url=sim_endpoint.base_url, model="sim-model", enabled_toolsets=[])
    assert agent.run_conversation("local")["final_response"] == "fine"


def test_a_whole_config_and_config_keywords_together_are_refused() -> None:
    with pytest.raises(TypeError, match="config= and config keywords together: max_iterations"):
        AIAgent(config=AgentConfig(), max_iterations=3)
