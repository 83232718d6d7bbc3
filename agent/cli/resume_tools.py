"""A resumed run must register the toolsets of its own it ran with: an entry calling a tool
that this invocation does not offer would be judged malformed at the merge (`tool_not_offered`)
and moved out of the output. So `--resume` without the `--mcp_config` servers or the
`--tools_module` modules that run_config.json recorded stops before anything is touched; so
does `--rescore`, which merges again too. A `--resume` with another `--distribution` than the
run recorded stops too: its prompts would sample from another set of toolsets than the entries
already written, and run_config.json, rewritten, would no longer say what those ran with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.config.run_config import RunConfig
from agent.errors import ConfigError
from agent.store.run_config_file import recorded_config


def _recorded_tools(run_dir: Path) -> dict[str, Any]:
    tools = recorded_config(run_dir).get("agent", {}).get("tools")
    return tools if isinstance(tools, dict) else {}


def check_resumed_distribution(config: RunConfig) -> None:
    """ConfigError when this --resume samples from another distribution than the run recorded."""
    if not config.resume:
        return
    recorded = recorded_config(config.run_dir).get("distribution")
    if not isinstance(recorded, str) or recorded == config.distribution:
        return
    raise ConfigError(
        f"--resume: run {config.run_name} ran with --distribution={recorded} (run_config.json), "
        f"not {config.distribution}: one run samples one distribution; pass --distribution={recorded}, "
        "or choose another --run_name"
    )


def check_resumed_tools(config: RunConfig) -> None:
    """ConfigError when this --resume (or --rescore) lacks servers or modules the run recorded."""
    if not (config.resume or config.rescore):
        return
    recorded = _recorded_tools(config.run_dir)
    tools = config.agent.tools
    servers = {s.get("name") for s in recorded.get("mcp_servers") or () if isinstance(s, dict)}
    missing_servers = sorted(str(name) for name in servers - {s.name for s in tools.mcp_servers})
    missing_modules = [m for m in recorded.get("tools_modules") or () if m not in tools.tools_modules]
    if not missing_servers and not missing_modules:
        return
    lacking = [
        *([f"--mcp_config servers {', '.join(missing_servers)}"] if missing_servers else []),
        *([f"--tools_module={','.join(map(str, missing_modules))}"] if missing_modules else []),
    ]
    flag = "--rescore" if config.rescore else "--resume"
    raise ConfigError(
        f"{flag}: run {config.run_name} ran with toolsets of its own that this command does not "
        f"register ({'; '.join(lacking)}; run_config.json): pass them again, or its entries calling "
        "their tools would be moved out of the output"
    )
