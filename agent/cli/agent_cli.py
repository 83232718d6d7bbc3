"""The single-query command line of `run_agent.py`: its typed flag values (and ./config.yaml's
`agent.save_trajectories`) into one frozen QueryConfig. Building and running the agent is
run_agent.main's part: nothing under agent/ imports the top-level scripts."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import yaml

from agent.cli.command_line import resolve_key, run_command
from agent.cli.flag_values import check_required
from agent.cli.flags import QUERY
from agent.cli.shared_config import build_agent_config, check_toolsets
from agent.common.config_text import read_config_text, unreadable
from agent.config.agent_config import AgentConfig, is_loopback
from agent.config.query_config import QueryConfig
from agent.errors import ConfigError
from agent.sandboxes import SandboxOptions, resolve_backend
from agent.toolbox.registry import ALL, expand_toolsets

log = logging.getLogger("agent.cli")


def config_file_saves(path: Path = Path("config.yaml")) -> bool:
    """`agent.save_trajectories` from ./config.yaml, when that file exists."""
    if not path.exists():
        return False
    try:
        data = yaml.safe_load(read_config_text(path)) or {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {unreadable(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nests too deeply to be a configuration") from None
    agent = data.get("agent") if isinstance(data, dict) else None
    return bool(agent.get("save_trajectories")) if isinstance(agent, dict) else False


def build_query_config(values: Mapping[str, Any]) -> QueryConfig:
    """The query's config from typed flag values; no key is needed on loopback."""
    check_required(QUERY, values)
    base_url = values["base_url"]
    api_key = resolve_key(values) or ("local" if is_loopback(base_url) else None)
    agent = build_agent_config(values, api_key=api_key)
    # Tools save files (image_generate's images/) in the current directory: a query has no run one.
    agent = replace(agent, tools=replace(agent.tools, artifacts_dir=str(Path.cwd())))
    _check_toolsets(values, agent)
    return QueryConfig(
        query=values["query"],
        agent=agent,
        sandbox=SandboxOptions(
            backend=resolve_backend(values["sandbox"]),
            disk_mb=values["sandbox_disk_mb"],
            memory_mb=values["sandbox_memory_mb"],
        ),
        save_trajectories=values["save_trajectories"] or config_file_saves(),
        verbose=values["verbose"],
        quiet=values["quiet"],
        embedded_threads=values["embedded_threads"],
        allow_missing_toolsets=values["allow_missing_toolsets"],
    )


def _check_toolsets(values: Mapping[str, Any], agent: AgentConfig) -> None:
    """The toolsets offered (--enabled_toolsets less --disabled_toolsets) under the batch
    runner's rule; allowed to be missing, they are named once on stderr."""
    left_out = set(expand_toolsets(agent.disabled_toolsets))
    toolsets = [t for t in expand_toolsets(agent.enabled_toolsets or [ALL]) if t not in left_out]
    asked = f"--enabled_toolsets={','.join(agent.enabled_toolsets) or ALL}"
    if agent.disabled_toolsets:
        asked += f" --disabled_toolsets={','.join(agent.disabled_toolsets)}"
    missing = check_toolsets(asked, toolsets, agent.tools, values["allow_missing_toolsets"])
    if missing:
        log.warning("toolsets unavailable here, not offered: %s", ", ".join(missing))


def _error_line(line: str) -> None:
    print(line, file=sys.stderr)


def run_query_command(answer: Callable[[QueryConfig], int], argv: Sequence[str] | None = None) -> NoReturn:
    """The whole command: flags (sys.argv unless `argv`) into a QueryConfig handed to `answer`,
    which returns the exit code; an operator error is one line and exit 2."""
    run_command(QUERY, lambda values: _interruptible(answer, build_query_config(values)), _error_line, argv)


def _interruptible(answer: Callable[[QueryConfig], int], config: QueryConfig) -> int:
    """`answer`, saying so in one line when Ctrl-C or SIGTERM stops it (exit 130)."""
    try:
        return answer(config)
    except KeyboardInterrupt:
        _error_line("interrupted: the conversation was stopped before its answer (exit 130)")
        return 130
