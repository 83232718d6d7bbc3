"""run_agent.py takes the sandbox's memory and disk caps too (`--sandbox_memory_mb`,
`--sandbox_disk_mb`): a command past the memory cap is killed and the model reads why; the
defaults hold when no flag is given. Real processes on the local backend, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from agent.sandboxes.host import memory_limits
from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.cli import endpoint_flags, run_cli, script_tool_then_answer

HOG = "python3 -c \"b = b'x' * (200 << 20); print('allocated')\""  # 200 MB, touched


def _tool_result(endpoint: SimulatedEndpoint) -> dict[str, object]:
    result: dict[str, object] = json.loads(endpoint.requests[1].body["messages"][-1]["content"])
    return result


def test_a_command_past_the_memory_cap_is_killed_and_the_model_is_told(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    script_tool_then_answer(sim_endpoint, "fill memory", "done", command=HOG)
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "fill memory"), "--api_key=k",
                   "--sandbox_memory_mb=64", "--max_turns=3")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = _tool_result(sim_endpoint)
    assert "allocated" not in str(result["output"])
    assert memory_limits.oom_message(64) in json.dumps(result)


def test_without_the_flag_the_same_command_gets_its_memory(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    script_tool_then_answer(sim_endpoint, "fill memory", "done", command=HOG)
    done = run_cli(tmp_path, *endpoint_flags(sim_endpoint, "fill memory"), "--api_key=k", "--max_turns=3")
    assert done.returncode == 0, done.stderr
    assert _tool_result(sim_endpoint)["output"] == "allocated\n"


def test_a_bad_cap_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--query=x", "--model=m", "--base_url=http://127.0.0.1:9/v1",
                   "--api_key=k", "--sandbox_memory_mb=-1")  # fmt: skip
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--sandbox_memory_mb" in done.stderr
