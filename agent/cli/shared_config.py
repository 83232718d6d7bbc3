"""The AgentConfig both command lines build from their flag values (the flags they share:
model, endpoint, turns, reasoning, routing, prompts, retries)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.config.agent_config import AgentConfig, load_prefill, reasoning_config
from agent.protocols import ToolConfig

# AgentConfig fields filled by the flag of the same name.
_SAME_NAME = (
    "model",
    "base_url",
    "enabled_toolsets",
    "disabled_toolsets",
    "ephemeral_system_prompt",
    "max_tokens",
    "providers_allowed",
    "providers_ignored",
    "providers_order",
    "provider_sort",
    "api_dialect",
    "request_timeout",
    "max_retries",
    "max_reply_bytes",
    "log_prefix_chars",
)


def build_agent_config(values: Mapping[str, Any], *, api_key: str | None) -> AgentConfig:
    """The agent's config from typed flag values (agent.cli.flag_values.parse_flags); reads the
    prefill file."""
    return AgentConfig(
        **{name: values[name] for name in _SAME_NAME},
        api_key=api_key,
        max_iterations=values["max_turns"],
        prefill_messages=load_prefill(values["prefill_messages_file"]),
        reasoning_config=reasoning_config(values["reasoning_effort"], values["reasoning_disabled"]),
        tools=build_tool_config(values),
    )


# ToolConfig fields filled by the flag of the same name.
_TOOL_FLAGS = (
    "web_backend",
    "web_corpus",
    "allow_hosts",
    "vision_model",
    "image_model",
    "moa_models",
    "moa_aggregator",
    "browser_executable",
    "image_api",
)


def build_tool_config(values: Mapping[str, Any], artifacts_dir: str | None = None) -> ToolConfig:
    """The tools' settings from typed flag values."""
    return ToolConfig(**{name: values[name] for name in _TOOL_FLAGS}, artifacts_dir=artifacts_dir)
