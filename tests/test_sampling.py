"""Sampling controls, end to end: --temperature, --top_p, --stop, --model_seed, --sampling_extra
and a dataset row's `sampling` object reach the endpoint (read in the request bodies the
simulated endpoint recorded over HTTP) in the OpenAI, OpenRouter and generic dialects; a row's
choices win over the flags'; nothing is sent (the request unchanged) without them; bad values
are one line and exit 2 before any model call; run_config.json and each entry's
`metadata.sampling` record what was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.batch.row_fields import FieldError, parse_line
from agent.cli.command_line import read_command_line
from agent.cli.flags import BATCH, QUERY
from agent.cli.shared_config import build_agent_config
from agent.config.agent_config import AgentConfig
from agent.config.sampling import Sampling
from agent.errors import ConfigError
from agent.llm.request import _dialect_fields, build_request
from agent.protocols import ChatRequest
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, human_prompt, read_json, read_jsonl, write_dataset
from tests.support.cli import endpoint_flags, run_cli

FLAGS = (
    "--temperature=0.3",
    "--top_p=0.9",
    '--stop=["END", "a, b"]',
    "--model_seed=11",
    '--sampling_extra={"top_k": 40, "min_p": 0.05}',
)
SENT = {"temperature": 0.3, "top_p": 0.9, "stop": ["END", "a, b"], "seed": 11, "top_k": 40, "min_p": 0.05}
SAMPLING_KEYS = {*SENT, "max_tokens", "max_completion_tokens", "repetition_penalty"}
ANSWER = [Turn(content="All done.", reasoning="Let me think.")]


def sampling_fields(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key in SAMPLING_KEYS}


# ---------------------------------------------------------------- run_agent.py, each dialect


@pytest.mark.parametrize(
    ("dialect", "extra_flags", "tokens_key", "dialect_keys"),
    [
        ("openai", ["--reasoning_effort=low"], "max_completion_tokens", {"reasoning_effort"}),
        ("openrouter", ["--reasoning_effort=low"], "max_tokens", {"reasoning"}),
        ("generic", [], "max_tokens", set()),
    ],
)
def test_every_flag_reaches_the_body_in_each_dialect(
    tmp_path: Path,
    sim_endpoint: SimulatedEndpoint,
    dialect: str,
    extra_flags: list[str],
    tokens_key: str,
    dialect_keys: set[str],
) -> None:
    sim_endpoint.script("sample me", ANSWER)
    flags = [f"--api_dialect={dialect}", "--max_tokens=64", *FLAGS, *extra_flags]
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "sample me"), *flags)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "All done."
    (request,) = sim_endpoint.requests
    body = request.body
    assert sampling_fields(body) == {**SENT, tokens_key: 64}
    assert dialect_keys <= set(body)  # the dialect's own fields still go as before


def test_without_sampling_flags_no_field_is_sent_and_the_request_is_unchanged(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    sim_endpoint.script("plain", ANSWER)
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "plain"))
    assert done.returncode == 0, done.stderr
    (request,) = sim_endpoint.requests
    assert list(request.body) == ["model", "messages", "tools"]  # as sent before the flags existed


@pytest.mark.parametrize(
    "config",
    [
        AgentConfig(),
        AgentConfig(api_dialect="openai", max_tokens=9, reasoning_config={"enabled": True, "effort": "low"}),
        AgentConfig(api_dialect="openrouter", max_tokens=9, providers_allowed=("a",)),
    ],
)
def test_no_sampling_builds_the_request_the_runner_built_before(config: AgentConfig) -> None:
    """The request as it was built before sampling existed: the client is unchanged, so the
    bytes on the wire are too."""
    history = [{"role": "user", "content": "hi"}]
    request = build_request(config, history, tools=[])
    extra, params = _dialect_fields(config)
    before = ChatRequest(
        messages=request.messages,
        tools=[],
        max_tokens=config.max_tokens,
        extra_body=extra,
        extra_params=params,
    )
    assert request == before


# ---------------------------------------------------------------- batch_runner.py


def test_batch_flags_rows_metadata_and_run_config(cli: BatchCLI, sim_endpoint: SimulatedEndpoint) -> None:
    rows: list[dict[str, Any]] = [
        {"prompt": "flags only"},
        {
            "prompt": "row wins",
            "sampling": {"temperature": 1.5, "stop": "HALT", "seed": 5, "max_tokens": 32, "top_k": 3},
        },
        {"prompt": "row adds", "sampling": {"repetition_penalty": 1.1, "top_p": None}},
    ]
    for row in rows:
        sim_endpoint.script(row["prompt"], ANSWER)
    write_dataset(cli.workdir / "d.jsonl", rows)
    run = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=4", "--run_name=s", "--num_workers=1",
        "--api_dialect=openrouter", "--max_tokens=64", *FLAGS,
    )  # fmt: skip
    assert run.returncode == 0, run
    flags = {**SENT, "max_tokens": 64}
    expected = {
        "flags only": flags,
        "row wins": {**flags, "temperature": 1.5, "stop": ["HALT"], "seed": 5, "max_tokens": 32, "top_k": 3},
        "row adds": {**flags, "repetition_penalty": 1.1},
    }
    sent = {human_prompt_of(r.body): sampling_fields(r.body) for r in sim_endpoint.requests}
    assert sent == expected
    entries = read_jsonl(cli.run_dir("s") / "trajectories.jsonl")
    assert {human_prompt(e): e["metadata"]["sampling"] for e in entries} == expected
    recorded = read_json(cli.run_dir("s") / "run_config.json")["agent"]
    assert recorded["sampling"] == {
        "temperature": 0.3,
        "top_p": 0.9,
        "stop": ["END", "a, b"],
        "seed": 11,
        "max_tokens": None,  # the flag's is agent.max_tokens
        "extra": {"top_k": 40, "min_p": 0.05},
    }
    assert recorded["max_tokens"] == 64


def test_batch_without_sampling_sends_none_and_records_no_metadata(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    sim_endpoint.script("plain", ANSWER)
    write_dataset(cli.workdir / "d.jsonl", [{"prompt": "plain"}])
    run = cli.run("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=p", "--num_workers=1")
    assert run.returncode == 0, run
    (request,) = sim_endpoint.requests
    assert list(request.body) == ["model", "messages", "tools"]
    (entry,) = read_jsonl(cli.run_dir("p") / "trajectories.jsonl")
    assert "sampling" not in entry["metadata"]
    recorded = read_json(cli.run_dir("p") / "run_config.json")["agent"]["sampling"]
    assert recorded == {
        "temperature": None,
        "top_p": None,
        "stop": [],
        "seed": None,
        "max_tokens": None,
        "extra": {},
    }


def human_prompt_of(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")


@pytest.fixture
def cli(tmp_path: Path, sim_endpoint: SimulatedEndpoint) -> BatchCLI:
    return BatchCLI(tmp_path, sim_endpoint)


# ---------------------------------------------------------------- bad values


BAD_FLAGS = {
    "--temperature=2.5": "--temperature: must be a number from 0 to 2, got 2.5",
    "--temperature=-0.1": "--temperature: must be a number from 0 to 2, got -0.1",
    "--temperature=warm": "--temperature must be a number, got 'warm'",
    "--top_p=0": "--top_p: must be a number greater than 0 and at most 1, got 0",
    "--top_p=1.5": "--top_p: must be a number greater than 0 and at most 1, got 1.5",
    "--stop=a,b,c,d,e": "--stop: at most 4 stop sequences (OpenAI's limit), got 5",
    "--stop=[1]": "--stop: a JSON array must hold strings only",
    "--stop=[oops": "--stop: not a valid JSON array: Expecting value (column 2)",
    "--model_seed=1.5": "--model_seed must be an integer, got '1.5'",
    "--sampling_extra={oops": (
        "--sampling_extra: not valid JSON: Expecting property name enclosed in double quotes (column 2)"
    ),
    '--sampling_extra={"top_k": NaN}': "--sampling_extra: not valid JSON: NaN is not JSON",
    '--sampling_extra={"top_k": 1e999}': "--sampling_extra: not valid JSON: 1e999 (out of range) is not JSON",
    "--sampling_extra=[1]": "--sampling_extra: must be a JSON object such as {\"top_k\": 40}, got '[1]'",
    '--sampling_extra={"messages": []}': (
        "--sampling_extra: 'messages' is a request field the runner sets itself; it cannot be passed through"
    ),
    '--sampling_extra={"stream": true}': (
        "--sampling_extra: 'stream' is a request field the runner sets itself; it cannot be passed through"
    ),
    '--sampling_extra={"temperature": 1}': (
        "--sampling_extra: 'temperature' has a control of its own: --temperature"
    ),
}


@pytest.mark.parametrize("cli_name", [BATCH, QUERY])
@pytest.mark.parametrize(("flag", "line"), BAD_FLAGS.items())
def test_a_bad_flag_value_is_one_line_naming_the_flag(cli_name: str, flag: str, line: str) -> None:
    required = (
        ["--dataset_file=d.jsonl", "--batch_size=1", "--run_name=r"] if cli_name == BATCH else ["--query=q"]
    )
    with pytest.raises(ConfigError) as caught:
        values = read_command_line(cli_name, [*required, flag])
        assert values is not None
        build_agent_config(values, api_key=None)
    assert str(caught.value) == line


def test_a_bad_flag_stops_both_commands_with_exit_2_before_any_call(
    cli: BatchCLI, tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    write_dataset(cli.workdir / "d.jsonl", [{"prompt": "never asked"}])
    run = cli.run("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=b", "--temperature=9")
    assert run.returncode == 2, run
    assert [line for line in run.stderr.splitlines() if line.strip()] == [
        "error: --temperature: must be a number from 0 to 2, got 9"
    ]
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "never"), '--sampling_extra={"tools": 1}')
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --sampling_extra: 'tools' is a request field the runner sets itself; "
        "it cannot be passed through"
    ]
    assert sim_endpoint.requests == []


BAD_ROWS = {
    '{"prompt": "p", "sampling": {"temperature": 3}}': (
        "sampling.temperature: must be a number from 0 to 2, got 3"
    ),
    '{"prompt": "p", "sampling": {"temperature": "hot"}}': (
        'sampling.temperature: must be a number from 0 to 2, got "hot"'
    ),
    '{"prompt": "p", "sampling": {"top_p": 0}}': (
        "sampling.top_p: must be a number greater than 0 and at most 1, got 0"
    ),
    '{"prompt": "p", "sampling": {"top_p": true}}': (
        "sampling.top_p: must be a number greater than 0 and at most 1, got true"
    ),
    '{"prompt": "p", "sampling": {"stop": 5}}': "sampling.stop: must be a string or a list of strings",
    '{"prompt": "p", "sampling": {"stop": ["a", 1]}}': "sampling.stop: must be a string or a list of strings",
    '{"prompt": "p", "sampling": {"stop": ["a", "b", "c", "d", "e"]}}': (
        "sampling.stop: at most 4 stop sequences (OpenAI's limit), got 5"
    ),
    '{"prompt": "p", "sampling": {"seed": 1.5}}': "sampling.seed: must be an integer, got 1.5",
    '{"prompt": "p", "sampling": {"max_tokens": 0}}': "sampling.max_tokens: must be at least 1, got 0",
    '{"prompt": "p", "sampling": {"messages": []}}': (
        "sampling.messages: 'messages' is a request field the runner sets itself; it cannot be passed through"
    ),
    '{"prompt": "p", "sampling": "hot"}': (
        'sampling: must be a JSON object of sampling fields, such as {"temperature": 0.7}'
    ),
}


@pytest.mark.parametrize(("line", "error"), BAD_ROWS.items())
def test_a_bad_row_sampling_value_names_the_field(line: str, error: str) -> None:
    with pytest.raises(FieldError) as caught:
        parse_line(line.encode())
    assert f"{caught.value.field_name}: {caught.value.reason}" == error


def test_row_sampling_parses_into_choices() -> None:
    row = '{"prompt": "p", "sampling": {"temperature": 0, "stop": "X", "seed": null, "top_k": 5}}'
    fields = parse_line(row.encode())
    assert fields is not None
    assert fields.sampling == Sampling(temperature=0, stop=("X",), extra={"top_k": 5})
    plain = parse_line(b'{"prompt": "p"}')
    assert plain is not None and plain.sampling is None


def test_bad_row_values_are_reported_with_file_and_line_exit_2_and_no_call(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    lines = list(BAD_ROWS)[:4]
    write_dataset(cli.workdir / "bad.jsonl", lines)
    run = cli.run("--dataset_file=bad.jsonl", "--batch_size=1", "--run_name=b")
    assert run.returncode == 2, run
    for number, line in enumerate(lines, start=1):
        assert f"skipped bad.jsonl:{number}: {BAD_ROWS[line]}" in run.stderr.splitlines(), run
    assert sim_endpoint.requests == []
    assert not cli.run_dir("b").exists()


def test_the_row_wins_in_the_library_too() -> None:
    config = AgentConfig(max_tokens=10, sampling=Sampling(temperature=0.5, top_p=0.5, extra={"top_k": 1}))
    row = Sampling(temperature=1.0, max_tokens=20, extra={"top_k": 2, "min_p": 0.1})
    assert config.prompt_sampling(row).sent() == {
        "temperature": 1.0,
        "top_p": 0.5,
        "max_tokens": 20,
        "top_k": 2,
        "min_p": 0.1,
    }
    assert config.prompt_sampling().sent() == {"temperature": 0.5, "top_p": 0.5, "max_tokens": 10, "top_k": 1}
    assert json.dumps(AgentConfig().public()["sampling"]) == json.dumps(Sampling().public())
