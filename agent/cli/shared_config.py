"""The AgentConfig both command lines build from their flag values (the flags they share:
model, endpoint, turns, sampling, reasoning, routing, prompts, retries)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.cli.mcp_cli import mcp_servers
from agent.common.network_policy import NetworkPolicy
from agent.common.secrets import started_secrets
from agent.config.agent_config import AgentConfig, is_embedded, load_prefill, reasoning_config
from agent.config.sampling import flag_sampling
from agent.errors import ConfigError
from agent.protocols import ToolConfig
from agent.toolbox.extensions import install_extensions, resolve_tool_modules
from agent.toolbox.registry import unavailable_toolsets
from tools.web.backends import FIRECRAWL_URL_VARIABLE, corpus_files, needs_corpus, web_keys

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
    sampling = flag_sampling(values)
    if is_embedded(values["model"]):
        from agent.servers.embedded.adapter import unsent_sampling  # only for the embedded model

        if (unsent := unsent_sampling(sampling.stop, sampling.extra)) is not None:
            raise ConfigError(unsent)
    return AgentConfig(
        **{name: values[name] for name in _SAME_NAME},
        api_key=api_key,
        max_iterations=values["max_turns"],
        sampling=sampling,
        prefill_messages=load_prefill(values["prefill_messages_file"]),
        reasoning_config=reasoning_config(values["reasoning_effort"], values["reasoning_disabled"]),
        tools=build_tool_config(values),
    )


# ToolConfig fields filled by the flag of the same name.
_TOOL_FLAGS = (
    "web_backend",
    "web_corpus_url",
    "allow_hosts",
    "vision_model",
    "image_model",
    "moa_models",
    "moa_aggregator",
    "browser_executable",
    "image_api",
)


def build_tool_config(values: Mapping[str, Any], artifacts_dir: str | None = None) -> ToolConfig:
    """The tools' settings from typed flag values, the search API keys the process started
    with (never the flags: they would show in `ps`) and FIRECRAWL_API_URL; the run's own
    toolsets (--mcp_config's servers, listed now) registered in this process."""
    NetworkPolicy.from_allow_list(values["allow_hosts"])  # a bad entry: one line, exit 2, now
    tools_modules, tools_path = resolve_tool_modules(values["tools_module"])
    config = ToolConfig(
        **{name: values[name] for name in _TOOL_FLAGS},
        tools_modules=tools_modules,
        tools_path=tools_path,
        web_corpus=_corpus_folder(values["web_backend"], values["web_corpus"]),
        web_keys=web_keys(started_secrets().environ),
        web_api_url=_search_api_url(values),
        artifacts_dir=artifacts_dir,
        images_unsupported=TEXT_ONLY if is_embedded(values["model"]) else None,
        image_output_unsupported=NO_IMAGE_OUTPUT if is_embedded(values["model"]) else None,
        mcp_servers=mcp_servers(values),
    )
    return with_extensions(config)


def with_extensions(config: ToolConfig) -> ToolConfig:
    """`config` once the run's own toolsets (--tools_module, --mcp_config) are registered in this
    process: before any toolset or distribution is checked. Workers do the same before their
    first job (`agent.batch.worker.main`, `agent.cluster.actor.WorkerActor.start`)."""
    install_extensions(config)  # idempotent: the same config registers the same toolsets
    return config


# Honest for every GGUF: the embedded server loads no vision projector and its adapter sends
# the model the text parts of a message alone (agent.servers.embedded.prompt).
TEXT_ONLY = (
    "the embedded model reads text only (no image reaches it, whatever its GGUF); "
    "use a multimodal --model on an endpoint for image tools"
)

NO_IMAGE_OUTPUT = (
    "the embedded model makes text only (it serves no images endpoint and no image output); "
    "use --model on an endpoint that generates images for image_gen"
)


def _corpus_folder(backend: str, folder: str | None) -> str | None:
    """--web_corpus as an absolute path (workers may start elsewhere), checked now."""
    if folder is None:
        if needs_corpus(backend):
            raise ConfigError("--web_backend=corpus needs --web_corpus=DIR (a folder of .md/.html/.txt)")
        return None
    path = Path(folder).absolute()
    if not path.is_dir():
        raise ConfigError(f"--web_corpus: {folder} is not a directory")
    if not corpus_files(path):
        raise ConfigError(f"--web_corpus: {folder} holds no documents (.md, .html or .txt)")
    return str(path)


def _search_api_url(values: Mapping[str, Any]) -> str | None:
    """--web_api_url, else FIRECRAWL_API_URL when Firecrawl may be the backend (it comes first
    in the auto order, so a set FIRECRAWL_API_URL makes it the one unless a corpus is given)."""
    url = values["web_api_url"] or None
    if url is None and values["web_backend"] in ("auto", "firecrawl") and not values["web_corpus"]:
        url = os.environ.get(FIRECRAWL_URL_VARIABLE) or None
    for flag, value in (
        (f"web_api_url (or {FIRECRAWL_URL_VARIABLE})", url),
        ("web_corpus_url", values["web_corpus_url"]),
    ):
        if value is not None and not value.startswith(("http://", "https://")):
            raise ConfigError(f"--{flag}={value!r}: give an http:// or https:// URL")
    return url


def check_toolsets(asked: str, toolsets: list[str], tools: ToolConfig, allowed: bool) -> dict[str, str]:
    """The one rule of both command lines: toolsets asked for that cannot run here stop the
    command before any token (one line per toolset and how to enable it) unless
    --allow_missing_toolsets; returns them (empty when all run). `asked` names the flag that
    asked for them, as typed (`--distribution=default`, `--enabled_toolsets=all`)."""
    missing = unavailable_toolsets(toolsets, tools)
    if missing and not allowed:
        lines = [f"  {toolset}: {why}" for toolset, why in missing.items()]
        raise ConfigError(
            f"{asked} needs toolsets that are unavailable here "
            "(enable them, or pass --allow_missing_toolsets to run without them):\n" + "\n".join(lines)
        )
    return missing
