"""Every runner and worker process imports the CLI and batch modules: a heavy package that a
run may not need (Parquet, the MCP SDK, `datasets`, the Hub client, Playwright, trafilatura,
the Docker client, Ray) is imported only by the code that uses it, never at start-up."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cli import ROOT

HEAVY = (
    "pyarrow",
    "mcp",
    "mcp_types",
    "datasets",
    "huggingface_hub",
    "playwright",
    "trafilatura",
    "docker",
    "ray",
)


def test_the_start_up_modules_import_no_heavy_extra() -> None:
    code = (
        "import sys\n"
        "import agent.cli.batch_cli, agent.cli.agent_cli, agent.batch.run, agent.batch.worker\n"
        "import agent.batch.dataset, agent.toolbox.extensions, tools.mcp\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
