"""`python run_agent.py ...` as a subprocess against a simulated endpoint started by the test:
answers, Fire-style flags, saving trajectories (flag or config.yaml), the API key's sources and
secrecy, and one clear line with a distinct exit code for each way it can fail."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from agent.cli.flags import QUERY
from agent.servers.endpoint_server import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.cli import assert_lists_every_flag, endpoint_flags, run_cli, script_tool_then_answer

KEY = "sk-test-CLI-9876543210fedcba"
FILE_AND_TERMINAL = ["patch", "process", "read_file", "search_files", "terminal", "write_file"]


def saved_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def error_lines(stderr: str) -> list[str]:
    """What stderr says besides the first retry's notice (`INFO model endpoint …: attempt 1`)."""
    return [line for line in stderr.splitlines() if not line.startswith("INFO model endpoint ")]


def no_sandboxes_left(cwd: Path) -> bool:
    root = cwd / "tmp" / "agent-sandboxes"
    return not root.exists() or not any(root.rglob("*"))


def test_prints_the_answer_and_exits_0(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    script_tool_then_answer(sim_endpoint, "what is six times seven", "It is 42.")
    done = run_cli(
        tmp_path,
        *endpoint_flags(sim_endpoint, "what is six times seven"),
        f"--api_key={KEY}",
        "--enabled_toolsets=terminal,file",  # Fire hands this over as a tuple
        "--max_turns=4",
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "It is 42.\n", "")
    first, second = sim_endpoint.requests
    assert sorted(t["function"]["name"] for t in first.body["tools"]) == FILE_AND_TERMINAL
    assert first.headers["authorization"] == f"Bearer {KEY}"
    tool_result = json.loads(second.body["messages"][-1]["content"])
    assert tool_result == {"output": "42\n", "exit_code": 0, "error": None}  # a real sandbox ran it
    assert not (tmp_path / "trajectory_samples.jsonl").exists()  # not asked to save
    assert no_sandboxes_left(tmp_path)


def test_a_single_toolset_flag_works_too(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "just answer"), "--enabled_toolsets=terminal")
    assert done.returncode == 0, done.stderr
    assert [t["function"]["name"] for t in sim_endpoint.requests[0].body["tools"]] == ["process", "terminal"]


def test_save_trajectories_writes_the_file_in_the_cwd(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    script_tool_then_answer(sim_endpoint, "save me", "saved.")
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "save me"), "--save_trajectories")
    assert (done.returncode, done.stdout) == (0, "saved.\n"), done.stderr
    (line,) = saved_lines(tmp_path / "trajectory_samples.jsonl")
    assert set(line) == {"conversations", "timestamp", "model", "completed"}
    assert (line["model"], line["completed"]) == ("sim-model", True)
    turns = line["conversations"]
    assert isinstance(turns, list) and [t["from"] for t in turns] == ["system", "human", "gpt", "tool", "gpt"]


def test_config_yaml_can_ask_for_saving(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    script_tool_then_answer(sim_endpoint, "configured", "configured answer")
    (tmp_path / "config.yaml").write_text("agent:\n  save_trajectories: true\n", encoding="utf-8")
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "configured"))
    assert done.returncode == 0, done.stderr
    (line,) = saved_lines(tmp_path / "trajectory_samples.jsonl")
    assert line["completed"] is True


def test_the_key_from_the_environment_is_used_but_never_shown(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    script_tool_then_answer(sim_endpoint, "show env", "shown", command="env")
    flags = endpoint_flags(sim_endpoint, "show env")
    done = run_cli(tmp_path, *flags, "--verbose", "--save_trajectories", env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 0, done.stderr
    assert sim_endpoint.requests[0].headers["authorization"] == f"Bearer {KEY}"
    env_output = json.loads(sim_endpoint.requests[1].body["messages"][-1]["content"])["output"]
    assert "PATH=" in env_output and KEY not in env_output  # the sandbox's environment is scrubbed
    assert "terminal" in done.stderr  # verbose logging was on
    assert KEY not in done.stdout + done.stderr
    assert KEY not in (tmp_path / "trajectory_samples.jsonl").read_text(encoding="utf-8")


# ---------------------------------------------------------------- one clear line per failure


def test_a_missing_key_for_a_remote_endpoint_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--query=hi", "--model=m", "--base_url=http://192.0.2.1:9/v1")
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = error_lines(done.stderr)
    assert line.startswith("error: no API key for http://192.0.2.1:9/v1") and "OPENAI_API_KEY" in line


def test_a_model_name_that_is_almost_embedded_gets_a_hint_not_just_a_key_error(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--query=hi", "--model=embeded", "--enabled_toolsets=terminal")
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = error_lines(done.stderr)
    assert line.startswith("error: no API key for https://") and line.endswith(
        "(did you mean --model=embedded?)"
    )


def test_an_unreachable_endpoint_is_one_line_exit_1(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nobody listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_cli(
        tmp_path, "--query=hi", "--model=m", f"--base_url=http://127.0.0.1:{port}/v1", "--max_retries=1"
    )
    assert (done.returncode, done.stdout) == (1, "")
    (line,) = error_lines(done.stderr)
    assert line.startswith(f"error: the model endpoint at http://127.0.0.1:{port}/v1 failed (connection)")
    assert line.endswith("(the endpoint was not reached: check --base_url, that it is up, the network)")
    retried = f"INFO model endpoint http://127.0.0.1:{port}/v1: attempt 1 failed (connection: "
    assert done.stderr.startswith(retried) and "at most 1 more attempt(s)" in done.stderr  # as it waits
    assert no_sandboxes_left(tmp_path)


def test_an_endpoint_refusing_the_key_is_one_line_exit_1(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    sim_endpoint.script("denied", [Turn(fault=EndpointFault(401, "invalid api key"))])
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "denied"), f"--api_key={KEY}")
    assert (done.returncode, done.stdout) == (1, "")
    (line,) = error_lines(done.stderr)
    assert "failed (auth)" in line and "invalid api key" in line and KEY not in line
    assert len(sim_endpoint.requests) == 1  # not retried


def test_running_out_of_turns_is_one_line_exit_4(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    script_tool_then_answer(sim_endpoint, "too long", "never reached")
    done = run_cli(
        tmp_path, *endpoint_flags(sim_endpoint, "too long"), "--max_turns=1", "--save_trajectories"
    )
    assert (done.returncode, done.stdout) == (4, "")
    (line,) = error_lines(done.stderr)
    assert line.endswith(
        "without a final answer (max_iterations): no final answer within 1 model call (raise --max_turns)"
    )
    assert len(sim_endpoint.requests) == 1
    (saved,) = saved_lines(tmp_path / "failed_trajectories.jsonl")
    assert saved["completed"] is False


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--max_turns=zero", "--max_turns must be an integer"),
        ("--enabled_toolsets=terminal,teleport", "teleport"),
        ("--api_key=", "--api_key needs a value"),  # once: the environment's key, silently
    ],
)
def test_a_bad_flag_is_one_line_exit_2(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, flag: str, message: str
) -> None:
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "hi"), flag)
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = error_lines(done.stderr)
    assert line.startswith("error: ") and message in line
    assert sim_endpoint.requests == []


# ---------------------------------------------------------------- flags: names, booleans, --help


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("--bogus=1", "error: unknown flag --bogus (--help lists every flag)"),
        ("--max_turn=1", "error: unknown flag --max_turn: did you mean --max_turns?"),
        ("--save_trajectory", "error: unknown flag --save_trajectory: did you mean --save_trajectories?"),
        ("--num_workers=2", "error: --num_workers is a flag of batch_runner.py, not of run_agent.py"),
        ("what is six times seven", "error: unexpected argument 'what is six times seven'"),
        ("--reasoning_disabled=maybe", "error: --reasoning_disabled=maybe: must be true or false"),
    ],
)
def test_an_unknown_flag_or_argument_is_one_line_exit_2_before_any_request(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, argument: str, message: str
) -> None:
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "hi"), argument)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(message), line
    assert sim_endpoint.requests == []


BOOLEANS = ("save_trajectories", "reasoning_disabled", "verbose", "quiet")


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        *((word, False) for word in ("false", "False", "0", "no")),
        *((word, True) for word in ("true", "1", "Yes", None)),
    ],
)
def test_every_boolean_flag_means_what_it_spells(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, spelling: str | None, expected: bool
) -> None:
    script_tool_then_answer(sim_endpoint, "booleans", "spelled.")
    flags = [f"--{name}" if spelling is None else f"--{name}={spelling}" for name in BOOLEANS]
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "booleans"), "--api_dialect=openrouter", *flags)
    assert (done.returncode, done.stdout) == (0, "spelled.\n"), done.stderr
    assert (tmp_path / "trajectory_samples.jsonl").exists() is expected  # --save_trajectories
    reasoning = {"effort": "none"} if expected else None  # --reasoning_disabled=false once sent it
    assert [r.body.get("reasoning") for r in sim_endpoint.requests] == [reasoning, reasoning]
    assert ("terminal" in done.stderr) is expected  # --verbose logs the tool call (--quiet yields)


def test_help_lists_every_flag_with_its_default(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--help", "--bogus=1")  # --help wins, even over an unknown flag
    assert (done.returncode, done.stderr) == (0, "")
    assert_lists_every_flag(done.stdout, QUERY, {"max_turns": "10", "max_retries": "6"})  # max_retries was 2
    assert sim_endpoint.requests == []
