"""Running the query CLI (`run_agent.py`) as a subprocess, and checking a --help page lists every
flag of its command (shared by the query and batch CLIs' tests)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from agent.cli.flags import flags_of
from agent.cli.help_page import REQUIRED
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support import zygote

ROOT = Path(__file__).resolve().parents[2]


def run_cli(cwd: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in `cwd` with no API key in its environment unless `env` adds one."""
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY")}
    tmp = cwd / "tmp"
    tmp.mkdir(exist_ok=True)
    base.update({"TERMINAL_ENV": "local", "TMPDIR": str(tmp)}, **(env or {}))
    if not any(flag.startswith("--enabled_toolsets") for flag in flags):
        # all toolsets (the default) need some that are unavailable here, which stops the
        # command: tests that are not about toolsets offer the ones every machine has
        flags = (*flags, "--enabled_toolsets=terminal,file")
    return zygote.run([str(ROOT / "run_agent.py"), *flags], cwd=cwd, env=base, timeout=120)


def assert_lists_every_flag(page: str, cli: str, defaults: Mapping[str, str]) -> None:
    """`page` has one row per flag of `cli`, ending in its default; `defaults` pins some as text."""
    rows = {
        line.split()[0].split("=")[0].split("[")[0]: line
        for line in page.splitlines()
        if line.startswith("  --")
    }
    assert sorted(rows) == sorted(f"--{flag.name}" for flag in flags_of(cli))
    for flag in flags_of(cli):
        expected = f"[{REQUIRED[cli]}]" if flag.required else f"[default: {flag.shown_default}]"
        assert rows[f"--{flag.name}"].endswith(expected), rows[f"--{flag.name}"]
    for name, default in defaults.items():
        assert rows[f"--{name}"].endswith(f"[default: {default}]"), rows[f"--{name}"]


def endpoint_flags(endpoint: SimulatedEndpoint, query: str) -> list[str]:
    return [f"--query={query}", "--model=sim-model", f"--base_url={endpoint.base_url}"]


def script_tool_then_answer(
    endpoint: SimulatedEndpoint, query: str, answer: str, command: str = "echo 42"
) -> None:
    call = ("terminal", json.dumps({"command": command}))
    endpoint.script(query, [Turn(tool_calls=(call,)), Turn(content=answer)])
