"""MCP servers as toolsets in `run_agent.py` (a real subprocess, the simulated endpoint over
HTTP, the test servers of tests/support): a stdio server listed at the start and called with
the model's arguments in the prompt's sandbox (local, bwrap, docker, podman) and on the host;
an HTTP server on 127.0.0.1 (refused without --allow_hosts); a server that crashes at start,
crashes mid-call or hangs is a tool error the model reads, the command still answers, nothing
is left running; the secrets of the config appear in no output."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.fixtures.containers import ENGINES, connect
from tests.support.cli import ROOT, endpoint_flags, run_cli
from tests.support.mcp_files import SECRET, servers_left, stdio_entry, work_fixture, write_mcp_config
from tests.support.mcp_fixtures import STDIO_SERVER, McpHttpServer

HEADER_TOKEN_NAME = "MCP_TEST_TOKEN"


work = work_fixture("mcp-query-")


def script(endpoint: SimulatedEndpoint, query: str, *calls: tuple[str, dict[str, Any]]) -> None:
    turns = [Turn(tool_calls=((name, json.dumps(args)),)) for name, args in calls]
    endpoint.script(query, [*turns, Turn(content="done.")])


def tool_results(endpoint: SimulatedEndpoint) -> list[str]:
    """The tool messages the model was sent, in order (from the last request)."""
    messages = endpoint.requests[-1].body["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def offered(endpoint: SimulatedEndpoint) -> list[str]:
    return sorted(t["function"]["name"] for t in endpoint.requests[0].body["tools"])


def _backend_env(sandbox: str, request: pytest.FixtureRequest) -> dict[str, str] | None:
    """What the run needs for `sandbox`, which must be here: bwrap, or an engine (Docker's, or
    Podman's compat socket for the docker backend); without it the test skips, or fails under
    CI=true (tests/fixtures/containers.py)."""
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_available")
    if sandbox not in ENGINES:
        return None
    connect(sandbox).close()
    return {"DOCKER_HOST": os.environ[ENGINES[sandbox]]}


@pytest.mark.parametrize(
    "sandbox",
    [
        "local",
        "bwrap",
        # as tests/test_batch_docker.py: the engine's runs share one xdist worker
        pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.xdist_group("docker-engine")]),
        pytest.param("podman", marks=[pytest.mark.podman, pytest.mark.xdist_group("docker-engine")]),
    ],
)
def test_a_stdio_server_in_the_sandbox_is_called_with_the_models_arguments(
    sim_endpoint: SimulatedEndpoint, work: Path, sandbox: str, request: pytest.FixtureRequest
) -> None:
    env = _backend_env(sandbox, request)
    config = write_mcp_config(work / "mcp.json", {"notes": stdio_entry(work, env={"NOTE_KEY": SECRET})})
    query = f"add and write on {sandbox}"
    script(
        sim_endpoint,
        query,
        ("add", {"a": 2, "b": 40}),
        ("note_write", {"name": "todo", "text": "buy milk"}),
        ("note_read", {"name": "todo"}),
        ("env_value", {"name": "NOTE_KEY"}),
    )
    flags = endpoint_flags(sim_endpoint, query)
    done = run_cli(
        work, *flags, f"--mcp_config={config}", "--enabled_toolsets=notes",
        f"--sandbox={'docker' if sandbox == 'podman' else sandbox}", "--save_trajectories", env=env,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "done.\n"), done.stderr
    assert "add" in offered(sim_endpoint) and "note_read" in offered(sim_endpoint)
    # its env reached it: the server read the value ("(unset)" otherwise), which the model gets
    # redacted, as the trajectory records it
    assert tool_results(sim_endpoint) == ["42", "wrote todo", "buy milk", "[REDACTED]"]
    saved = (work / "trajectory_samples.jsonl").read_text(encoding="utf-8")
    assert SECRET not in saved and SECRET not in done.stdout + done.stderr
    assert servers_left(work) == []


# TAVILY_API_KEY: a variable the runner takes out of its environment at start (agent.common.secrets)
@pytest.mark.parametrize("variable", [HEADER_TOKEN_NAME, "TAVILY_API_KEY"])
def test_a_host_server_gets_its_env_and_not_the_runners_secrets(
    sim_endpoint: SimulatedEndpoint, work: Path, variable: str
) -> None:
    config = write_mcp_config(
        work / "mcp.json", {"calc": stdio_entry(work, host=True, env={"CALC_KEY": f"${{{variable}}}"})}
    )
    query = "host calls"
    script(sim_endpoint, query, ("add", {"a": 1.5, "b": 2}), ("env_value", {"name": "OPENAI_API_KEY"}),
           ("env_value", {"name": "CALC_KEY"}))  # fmt: skip
    env = {variable: SECRET, "OPENAI_API_KEY": "sk-runner-key-never-passed-on"}
    done = run_cli(work, *endpoint_flags(sim_endpoint, query), f"--mcp_config={config}",
                   "--enabled_toolsets=calc", "--verbose", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert tool_results(sim_endpoint) == ["3.5", "(unset)", "[REDACTED]"]  # the value, redacted
    assert "env_value" in done.stderr and "[REDACTED]" in done.stderr  # logged, redacted
    assert SECRET not in done.stdout + done.stderr


def test_an_http_server_on_loopback_needs_allow_hosts(
    sim_endpoint: SimulatedEndpoint, work: Path, mcp_http_server: McpHttpServer
) -> None:
    entry = {"url": mcp_http_server.url, "headers": {"Authorization": f"Bearer ${{{HEADER_TOKEN_NAME}}}"}}
    config = write_mcp_config(work / "mcp.json", {"remote": entry})
    env = {HEADER_TOKEN_NAME: mcp_http_server.token}
    query = "remote add"
    script(sim_endpoint, query, ("add", {"a": 20, "b": 22}), ("echo", {"text": "hi there"}))
    flags = [*endpoint_flags(sim_endpoint, query), f"--mcp_config={config}", "--enabled_toolsets=remote"]
    refused = run_cli(work, *flags, env=env)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "remote" in line and "--allow_hosts" in line, line
    done = run_cli(work, *flags, "--allow_hosts=127.0.0.1", "--save_trajectories", env=env)
    assert done.returncode == 0, done.stderr
    assert tool_results(sim_endpoint)[:2] == ["42.0", "hi there"]
    saved = (work / "trajectory_samples.jsonl").read_text(encoding="utf-8")
    assert mcp_http_server.token not in saved + done.stdout + done.stderr


def test_a_wrong_header_is_one_line_naming_the_server(
    sim_endpoint: SimulatedEndpoint, work: Path, mcp_http_server: McpHttpServer
) -> None:
    entry = {"url": mcp_http_server.url, "headers": {"Authorization": "Bearer wrong-token-1234"}}
    config = write_mcp_config(work / "mcp.json", {"remote": entry})
    flags = [*endpoint_flags(sim_endpoint, "q"), f"--mcp_config={config}", "--enabled_toolsets=remote"]
    done = run_cli(work, *flags, "--allow_hosts=127.0.0.1")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --mcp_config: MCP server remote:"), line
    assert "wrong-token-1234" not in line


def test_a_url_that_is_no_mcp_server_is_one_line(sim_endpoint: SimulatedEndpoint, work: Path) -> None:
    # A web page at the URL: the SDK logged its own ERROR line beside ours (two lines).
    class Page(http.server.BaseHTTPRequestHandler):
        def _page(self) -> None:
            body = b"<!doctype html><title>Not MCP</title>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _page

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
        config = write_mcp_config(work / "mcp.json", {"site": {"url": url}})
        flags = [*endpoint_flags(sim_endpoint, "q"), f"--mcp_config={config}", "--enabled_toolsets=site"]
        done = run_cli(work, *flags, "--allow_hosts=127.0.0.1")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --mcp_config: MCP server site:"), line


@pytest.mark.parametrize("host", [False, True])
def test_crashes_and_hangs_are_tool_errors_and_nothing_is_left(
    sim_endpoint: SimulatedEndpoint, work: Path, host: bool
) -> None:
    config = write_mcp_config(work / "mcp.json", {"flaky": stdio_entry(work, host=host, call_timeout=3)})
    query = f"crash and hang {host}"
    script(sim_endpoint, query, ("crash", {}), ("add", {"a": 1, "b": 1}), ("hang", {}), ("fail", {}))
    flags = [*endpoint_flags(sim_endpoint, query), f"--mcp_config={config}", "--enabled_toolsets=flaky"]
    done = run_cli(work, *flags, "--sandbox=local")
    assert (done.returncode, done.stdout) == (0, "done.\n"), done.stderr
    crash, again, hang, fail = (json.loads(r) if r.startswith("{") else r for r in tool_results(sim_endpoint))
    assert crash["error"].startswith("MCP server flaky:"), crash
    assert again == "2"  # started again for the next call
    assert "no answer to the call of hang within 3 s" in hang["error"], hang
    assert "error" in fail
    assert servers_left(work) == []


def test_a_server_that_crashes_at_start_is_one_line_with_its_stderr(
    sim_endpoint: SimulatedEndpoint, work: Path
) -> None:
    config = write_mcp_config(work / "mcp.json", {"broken": stdio_entry(work, "--crash-at-start", host=True)})
    flags = [*endpoint_flags(sim_endpoint, "q"), f"--mcp_config={config}", "--enabled_toolsets=broken"]
    done = run_cli(work, *flags)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --mcp_config: MCP server broken:") and "stderr:" in line, line
    assert not sim_endpoint.requests


def test_a_tool_list_the_sdk_cannot_read_is_one_line(sim_endpoint: SimulatedEndpoint, work: Path) -> None:
    """Once a pydantic ValidationError traceback, exit 1."""
    config = write_mcp_config(work / "mcp.json", {"odd": stdio_entry(work, "--bad-schema", host=True)})
    flags = [*endpoint_flags(sim_endpoint, "q"), f"--mcp_config={config}", "--enabled_toolsets=odd"]
    done = run_cli(work, *flags)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: --mcp_config: MCP server odd: its tools/list answer is malformed: tools."
    ), line


def test_a_program_missing_from_the_sandbox_is_one_line_saying_where_it_was_looked_for(
    sim_endpoint: SimulatedEndpoint, work: Path
) -> None:
    config = write_mcp_config(work / "mcp.json", {"gone": {"command": "no-such-mcp-server"}})
    flags = [*endpoint_flags(sim_endpoint, "q"), f"--mcp_config={config}", "--enabled_toolsets=gone"]
    done = run_cli(work, *flags, "--sandbox=local")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "program not found: no-such-mcp-server" in line and 'or set "host": true)' in line, line
    assert not sim_endpoint.requests


def test_a_server_that_keeps_failing_is_started_three_times_at_most(
    sim_endpoint: SimulatedEndpoint, work: Path
) -> None:
    config = write_mcp_config(work / "mcp.json", {"flaky": stdio_entry(work, host=True)})
    query = "crash four times"
    script(sim_endpoint, query, *([("crash", {})] * 3), ("add", {"a": 1, "b": 2}))
    flags = [*endpoint_flags(sim_endpoint, query), f"--mcp_config={config}", "--enabled_toolsets=flaky"]
    done = run_cli(work, *flags)
    assert done.returncode == 0, done.stderr
    errors = [json.loads(result)["error"] for result in tool_results(sim_endpoint)]
    assert all("crashing on purpose" in error for error in errors[:3]), errors
    assert errors[3] == "MCP server flaky: not started again: it failed 3 times in this conversation"
    assert servers_left(work) == []


def test_a_server_that_hangs_at_start_is_one_line_and_is_stopped(
    sim_endpoint: SimulatedEndpoint, work: Path
) -> None:
    entry = stdio_entry(work, "--hang-at-start", startup_timeout=2)
    config = write_mcp_config(work / "mcp.json", {"stuck": entry})
    flags = [*endpoint_flags(sim_endpoint, "q"), f"--mcp_config={config}", "--enabled_toolsets=stuck"]
    done = run_cli(work, *flags, "--sandbox=local")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --mcp_config: MCP server stuck: did not start within 2 s"
    ]
    assert servers_left(work) == []


def test_tools_named_alike_need_a_prefix_and_the_listing_shows_backends(work: Path) -> None:
    one = stdio_entry(work, host=True)
    clash = write_mcp_config(work / "mcp.json", {"one": one, "two": stdio_entry(work, host=True)})

    def listing(config: Path) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable,
            str(ROOT / "batch_runner.py"),
            "--list_distributions",
            f"--mcp_config={config}",
        ]
        return subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)

    done = listing(clash)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {clash}: mcpServers.two: its tool 'add' is named like a tool of the server 'one'; "
        'set "tool_prefix" in its entry to tell them apart'
    ]
    apart = write_mcp_config(work / "mcp.json", {"one": one, "two": stdio_entry(work, tool_prefix="two_")})
    done = listing(apart)
    assert done.returncode == 0, done.stderr
    rows = {
        line.split()[0]: line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("  ")
    }
    assert rows["one"] == f"mcp stdio on the host: {sys.executable} {STDIO_SERVER} --name={work.name}"
    assert rows["two"] == f"mcp stdio in the sandbox: python3 server.py --name={work.name}"
    assert servers_left(work) == []
