"""The agent's typed, frozen configuration, and the conversions from CLI values into it.

python-fire infers types from flag values (`--run_name=2024` arrives as an int, `a,b` as a
tuple), so every CLI edge converts through the helpers here before building a config.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import ConfigError

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
PROVIDER_SORTS = ("price", "throughput", "latency")
DIALECTS = ("auto", "openrouter", "openai", "generic")
DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
DEFAULT_MODEL = "anthropic/claude-sonnet-4.6"


def as_str(value: Any, flag: str) -> str | None:
    """A flag value as text, whatever type Fire inferred (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"--{flag} needs a value")
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def as_str_list(value: Any, flag: str) -> tuple[str, ...]:
    """A comma-separated flag (`a,b` arrives as a tuple, `a` as a str) as a tuple of names."""
    if value is None or value == "":
        return ()
    if isinstance(value, bool):
        raise ConfigError(f"--{flag} needs a comma-separated list")
    items = value if isinstance(value, (tuple, list)) else str(value).split(",")
    return tuple(str(item).strip() for item in items if str(item).strip())


def as_int(value: Any, flag: str, *, minimum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"--{flag} must be an integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"--{flag} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"--{flag} must be at least {minimum}, got {number}")
    return number


def reasoning_config(effort: Any, disabled: Any) -> dict[str, Any] | None:
    """The reasoning request object from --reasoning_effort / --reasoning_disabled."""
    if disabled:
        return {"effort": "none"}
    name = as_str(effort, "reasoning_effort")
    if name is None:
        return None
    if name not in REASONING_EFFORTS:
        raise ConfigError(f"--reasoning_effort={name}: must be one of {', '.join(REASONING_EFFORTS)}")
    return {"enabled": True, "effort": name}


def load_prefill(path: Any) -> tuple[dict[str, Any], ...]:
    """Prefill messages from a JSON file holding a list of {role, content} objects."""
    name = as_str(path, "prefill_messages_file")
    if not name:
        return ()
    try:
        data = json.loads(Path(name).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--prefill_messages_file={name}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name}:{exc.lineno}: prefill file is not valid JSON: {exc.msg}") from None
    if not isinstance(data, list):
        raise ConfigError(f"{name}: prefill file must hold a JSON array of messages")
    for i, item in enumerate(data):
        ok = isinstance(item, dict) and item.get("role") in ("system", "user", "assistant")
        if not ok or not isinstance(item.get("content"), str):
            raise ConfigError(f"{name}: item {i}: each message needs a role and a string content")
    return tuple(data)


def call_settings(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags both CLIs share for how each model call is made, converted once. The keys are
    both `AgentConfig` fields and `AIAgent` keywords."""
    return {
        "max_iterations": as_int(flags["max_turns"], "max_turns", minimum=1) or 10,
        "ephemeral_system_prompt": as_str(flags["ephemeral_system_prompt"], "ephemeral_system_prompt"),
        "prefill_messages": load_prefill(flags["prefill_messages_file"]),
        "max_tokens": as_int(flags["max_tokens"], "max_tokens", minimum=1),
        "reasoning_config": reasoning_config(flags["reasoning_effort"], flags["reasoning_disabled"]),
        "providers_allowed": as_str_list(flags["providers_allowed"], "providers_allowed"),
        "providers_ignored": as_str_list(flags["providers_ignored"], "providers_ignored"),
        "providers_order": as_str_list(flags["providers_order"], "providers_order"),
        "provider_sort": as_str(flags["provider_sort"], "provider_sort"),
        "api_dialect": as_str(flags["api_dialect"], "api_dialect") or "auto",
        "max_retries": as_int(flags["max_retries"], "max_retries", minimum=0) or 0,
    }


def resolve_api_key(api_key: Any, base_url: str) -> str | None:
    """The key from the flag, else OPENROUTER_API_KEY / OPENAI_API_KEY from the environment."""
    key = as_str(api_key, "api_key")
    if key:
        return key
    order = ("OPENROUTER_API_KEY", "OPENAI_API_KEY")
    if "openrouter" not in base_url:
        order = order[::-1]
    return next((os.environ[name] for name in order if os.environ.get(name)), None)


@dataclass(frozen=True)
class AgentConfig:
    """Everything one conversation needs to know; secrets are excluded from `public()`."""

    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    max_iterations: int = 90
    enabled_toolsets: tuple[str, ...] = ()
    disabled_toolsets: tuple[str, ...] = ()
    ephemeral_system_prompt: str | None = None
    prefill_messages: tuple[dict[str, Any], ...] = ()
    max_tokens: int | None = None
    reasoning_config: dict[str, Any] | None = None
    providers_allowed: tuple[str, ...] = ()
    providers_ignored: tuple[str, ...] = ()
    providers_order: tuple[str, ...] = ()
    provider_sort: str | None = None
    api_dialect: str = "auto"
    request_timeout: float = 600.0
    max_retries: int = 6
    log_prefix_chars: int = 100
    log_prefix: str = ""

    def __post_init__(self) -> None:
        if self.provider_sort is not None and self.provider_sort not in PROVIDER_SORTS:
            choices = ", ".join(PROVIDER_SORTS)
            raise ConfigError(f"--provider_sort={self.provider_sort}: must be one of {choices}")
        if self.api_dialect not in DIALECTS:
            raise ConfigError(f"--api_dialect={self.api_dialect}: must be one of {', '.join(DIALECTS)}")
        if self.max_iterations < 1:
            raise ConfigError(f"--max_turns must be at least 1, got {self.max_iterations}")

    @property
    def dialect(self) -> str:
        if self.api_dialect != "auto":
            return self.api_dialect
        if "openrouter.ai" in self.base_url:
            return "openrouter"
        if "api.openai.com" in self.base_url:
            return "openai"
        return "generic"

    def public(self) -> dict[str, Any]:
        """The config as JSON-able data without secrets (saved with a run)."""
        data = {k: v for k, v in self.__dict__.items() if k != "api_key"}
        data["api_key_set"] = self.api_key is not None
        return json.loads(json.dumps(data))  # type: ignore[no-any-return]


def is_embedded(model: str) -> bool:
    """`embedded` or `embedded:/path/to/model.gguf`: served locally for the run."""
    return model == "embedded" or model.startswith("embedded:")


def is_loopback(url: str) -> bool:
    """An endpoint on this machine (no API key needed)."""
    return any(host in url for host in ("://127.", "://localhost", "://[::1]"))


@contextmanager
def served_endpoint(model: str, base_url: str, threads: int) -> Iterator[tuple[str, str]]:
    """(base_url, model) to talk to for the block: the given ones, or — for `--model=embedded[:path]` —
    the embedded model served on loopback until the block ends (one server, shared by all workers)."""
    if not is_embedded(model):
        yield base_url, model
        return
    from agent.servers.embedded.server import EmbeddedEndpoint, EmbeddedSettings, resolve_embedded

    spec = resolve_embedded(model)
    assert spec is not None  # is_embedded said so
    server = EmbeddedEndpoint(spec, EmbeddedSettings(threads=threads))
    server.start()
    try:
        yield server.base_url, server.model_id
    finally:
        server.stop()
