"""A resumed run must register the toolsets of its own it ran with: an entry calling a tool
that this invocation does not offer would be judged malformed at the merge (`tool_not_offered`)
and moved out of the output. So `--resume` without the `--mcp_config` servers or the
`--tools_module` modules that run_config.json recorded stops before anything is touched; so
does `--rescore`, which merges again too. A `--resume` with another value of a setting a run
keeps for its whole life (`FIXED_FOR_A_RUN`: `--distribution`, `--batch_size`) stops too: its
prompts would sample from other toolsets, or be sharded otherwise, than the entries already
written, and run_config.json, rewritten, would no longer say what those ran with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.config.run_config import RunConfig
from agent.errors import ConfigError
from agent.store.run_config_file import recorded_config


def _recorded_tools(run_dir: Path) -> dict[str, Any]:
    tools = recorded_config(run_dir).get("agent", {}).get("tools")
    return tools if isinstance(tools, dict) else {}


# What a run keeps for its whole life, and why: a --resume with another value is refused.
FIXED_FOR_A_RUN = {
    "distribution": "one run samples one distribution",
    "batch_size": "one run has one batch size (batch_N.jsonl holds its prompts from N × batch size on)",
}


def check_resumed_settings(config: RunConfig) -> None:
    """ConfigError when this --resume gives another value of a `FIXED_FOR_A_RUN` setting than
    the run recorded in run_config.json."""
    if not config.resume:
        return
    recorded = recorded_config(config.run_dir)
    for name, why in FIXED_FOR_A_RUN.items():
        then, now = recorded.get(name), getattr(config, name)
        if type(then) is not type(now) or then == now:  # none recorded (or unreadable), or the same
            continue
        raise ConfigError(
            f"--resume: run {config.run_name} ran with --{name}={then} (run_config.json), not {now}: "
            f"{why}; pass --{name}={then}, or choose another --run_name"
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
