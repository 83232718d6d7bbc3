"""A resumed run must register the toolsets of its own it ran with: an entry calling a tool
that this invocation does not offer would be judged malformed at the merge (`tool_not_offered`)
and moved out of the output. So `--resume` without the `--mcp_config` servers or the
`--tools_module` modules that run_config.json recorded stops before anything is touched; so
does `--rescore`, which merges again too. A `--resume` with another value of a setting a run
keeps for its whole life (`FIXED_FOR_A_RUN`: `--distribution`, `--batch_size`) stops too: its
prompts would sample from other toolsets, or be sharded otherwise, than the entries already
written, and run_config.json, rewritten, would no longer say what those ran with. Where
run_config.json is gone, statistics.json says what the run ran with; the batch files say its
batch size too."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

from agent.config.run_config import RunConfig
from agent.errors import ConfigError
from agent.store.jsonl import read_lines
from agent.store.layout import STATISTICS_FILE, batch_files
from agent.store.run_config_file import RUN_CONFIG_FILE, read_statistics, recorded_config


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
    the run recorded in run_config.json (or, where that is gone, statistics.json), or another
    batch size than its batch files were written with."""
    if not config.resume:
        return
    recorded = _recorded(config.run_dir)
    for name, why in FIXED_FOR_A_RUN.items():
        then, where = recorded.get(name, (None, ""))
        now = getattr(config, name)
        if type(then) is not type(now) or then == now:  # none recorded (or unreadable), or the same
            continue
        raise ConfigError(
            f"--resume: run {config.run_name} ran with --{name}={then} ({where}), not {now}: "
            f"{why}; pass --{name}={then}, or choose another --run_name"
        )
    _check_shards(config)


def _recorded(run_dir: Path) -> dict[str, tuple[Any, str]]:
    """Each `FIXED_FOR_A_RUN` setting the run recorded, with where: run_config.json, else
    statistics.json (read only when run_config.json lacks one)."""
    found = {name: (value, RUN_CONFIG_FILE) for name, value in recorded_config(run_dir).items()}
    if all(name in found for name in FIXED_FOR_A_RUN):
        return found
    figures = read_statistics(run_dir)  # {}: none (stopped before its first figures), or unreadable
    return {name: (figures[name], STATISTICS_FILE) for name in FIXED_FOR_A_RUN if name in figures} | found


def _check_shards(config: RunConfig) -> None:
    """The first line of each batch file, made for batch N, holds an attempt this batch size
    puts in batch N: with every record of the run's settings gone, its shards still say."""
    for path in batch_files(config.run_dir):
        made = _first_made(path)
        if made is None or made[0] // config.batch_size == made[1]:
            continue
        raise ConfigError(
            f"--resume: run {config.run_name} ran with another --batch_size than {config.batch_size}: "
            f"{path.name} holds attempt {made[0]}, which it would put in batch "
            f"{made[0] // config.batch_size}; {FIXED_FOR_A_RUN['batch_size']}; pass the run's "
            "--batch_size, or choose another --run_name"
        )


def _first_made(path: Path) -> tuple[int, int] | None:
    """(attempt number, batch number) of the file's first line; None where it says neither."""
    first = next(read_lines(path), (b"", None))[1] or {}
    metadata = first.get("metadata")
    number = metadata.get("batch_num") if isinstance(metadata, dict) else None
    index = first.get("prompt_index")
    if _count(index) and _count(number):
        return index, number
    return None


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
