"""The single-query command line of `run_agent.py` (the CLI edge: Fire values converted here)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import fire
import yaml

from agent.config.agent_config import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    as_int,
    as_str,
    as_str_list,
    call_settings,
    is_embedded,
    is_loopback,
    resolve_api_key,
    served_endpoint,
)
from agent.errors import AgentError, ConfigError
from agent.sandboxes import SandboxOptions, resolve_backend


def _config_file_saves(path: Path = Path("config.yaml")) -> bool:
    """`agent.save_trajectories` from ./config.yaml, when that file exists."""
    if not path.exists():
        return False
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    agent = data.get("agent") if isinstance(data, dict) else None
    return bool(agent.get("save_trajectories")) if isinstance(agent, dict) else False


def run(
    query: Any = None,
    model: Any = DEFAULT_MODEL,
    base_url: Any = DEFAULT_BASE_URL,
    api_key: Any = None,
    enabled_toolsets: Any = None,
    disabled_toolsets: Any = None,
    max_turns: Any = 10,
    save_trajectories: bool = False,
    verbose: bool = False,
    quiet: bool = False,
    sandbox: Any = None,
    max_tokens: Any = None,
    reasoning_effort: Any = None,
    reasoning_disabled: bool = False,
    ephemeral_system_prompt: Any = None,
    prefill_messages_file: Any = None,
    providers_allowed: Any = None,
    providers_ignored: Any = None,
    providers_order: Any = None,
    provider_sort: Any = None,
    api_dialect: Any = "auto",
    max_retries: Any = 2,
    embedded_threads: Any = 1,
) -> None:
    """Run one conversation and print the final answer; the exit code says how it ended."""
    from run_agent import AIAgent  # imported here: run_agent imports this module's package

    flags = dict(locals())
    text = as_str(query, "query")
    if not text:
        raise ConfigError("--query is required")
    settings = call_settings(flags)  # converted before the embedded model starts
    model_name = as_str(model, "model") or DEFAULT_MODEL
    url = as_str(base_url, "base_url") or DEFAULT_BASE_URL
    threads = as_int(embedded_threads, "embedded_threads", minimum=1) or 1
    with served_endpoint(model_name, url, threads) as (url, name):
        key = resolve_api_key(api_key, url) or ("local" if is_loopback(url) else None)
        if is_embedded(model_name):
            key = "local"  # our own loopback server: no real key is sent, not even there
        agent = AIAgent(
            base_url=url,
            api_key=key,
            model=name,
            enabled_toolsets=as_str_list(enabled_toolsets, "enabled_toolsets") or None,
            disabled_toolsets=as_str_list(disabled_toolsets, "disabled_toolsets") or None,
            save_trajectories=bool(save_trajectories) or _config_file_saves(),
            verbose_logging=bool(verbose),
            quiet_mode=bool(quiet),
            sandbox=SandboxOptions(backend=resolve_backend(as_str(sandbox, "sandbox"))),
            **settings,
        )
        result = agent.run_conversation(text)
    if result["failed"]:
        error_class, error = result["error_class"], result["error"]
        print(f"error: the model endpoint at {url} failed ({error_class}): {error}", file=sys.stderr)
        sys.exit(1)
    if not result["completed"]:
        outcome, error = result["outcome"], result["error"]
        print(f"error: the conversation ended without a final answer ({outcome}): {error}", file=sys.stderr)
        sys.exit(4)
    print(result["final_response"])
    sys.exit(0)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        fire.Fire(run)
    except AgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
