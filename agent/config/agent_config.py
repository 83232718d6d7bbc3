"""The agent's typed, frozen configuration, its defaults (one constant each), and the checks
and loaders that turn already-typed flag values into it (flag text is parsed in agent.cli)."""

from __future__ import annotations

import difflib
import ipaddress
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from agent.common.config_text import read_config_text
from agent.config.sampling import Sampling
from agent.errors import ConfigError
from agent.protocols import ToolConfig
from agent.protocols.tokens import TOKEN_CAPTURE_MODES

log = logging.getLogger("agent.embedded")  # the batch runner shows its INFO lines (loading the model)

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
PROVIDER_SORTS = ("price", "throughput", "latency")
DIALECTS = ("auto", "openrouter", "openai", "generic")
DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
DEFAULT_MODEL = "anthropic/claude-sonnet-4.6"
# Written once: AgentConfig's defaults, hence both CLIs' (agent.cli.flags reads them from the
# dataclass) and AIAgent's keyword defaults.
DEFAULT_MAX_TURNS = 10  # the spec's --max_turns default: model calls per conversation
DEFAULT_MAX_RETRIES = 6
DEFAULT_REQUEST_TIMEOUT = 600.0
# 3x a 128k-token reply escaped and repeated in three reasoning fields (~9 MiB); a bound on
# what one hostile or broken endpoint reply can make a worker hold.
DEFAULT_MAX_REPLY_BYTES = 32 * 2**20
DEFAULT_LOG_PREFIX_CHARS = 100


def check_choice(flag: str, value: str | None, choices: tuple[str, ...]) -> None:
    """A value that must be one of `choices` (None: not set)."""
    if value is not None and value not in choices:
        raise ConfigError(f"--{flag}={value}: must be one of {', '.join(choices)}")


def reasoning_config(effort: str | None, disabled: bool) -> dict[str, Any] | None:
    """The reasoning request object from --reasoning_effort / --reasoning_disabled."""
    if disabled and effort is not None:
        raise ConfigError(
            f"--reasoning_effort={effort} and --reasoning_disabled contradict each other: give one"
        )
    if disabled:
        return {"effort": "none"}
    if effort is None:
        return None
    check_choice("reasoning_effort", effort, REASONING_EFFORTS)
    return {"enabled": True, "effort": effort}


def load_prefill(name: str | None) -> tuple[dict[str, Any], ...]:
    """Prefill messages from a JSON file holding a list of {role, content} objects."""
    if not name:
        return ()
    try:
        data = json.loads(read_config_text(name))
    except RecursionError:
        raise ConfigError(f"{name}: prefill file nests too deeply") from None
    except OSError as exc:
        raise ConfigError(f"--prefill_messages_file={name}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name}:{exc.lineno}: prefill file is not valid JSON: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: prefill file is not UTF-8 text (at byte {exc.start})") from None
    if not isinstance(data, list):
        raise ConfigError(f"{name}: prefill file must hold a JSON array of messages")
    for i, item in enumerate(data):
        ok = isinstance(item, dict) and item.get("role") in ("system", "user", "assistant")
        if not ok or not isinstance(item.get("content"), str):
            raise ConfigError(f"{name}: item {i}: each message needs a role and a string content")
    return tuple(data)


def check_base_url(url: str) -> None:
    """An http(s) URL with a host and a valid port: anything else would only fail, call after
    call, at run time. No user:password in it: that is no key the SDK sends, and the URL is
    saved (run_config.json) and shown in messages."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - read for its ValueError: out of range, or not a number
    except ValueError as exc:
        raise ConfigError(f"--base_url: not a URL the runner can use ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--base_url={url!r}: must be an http:// or https:// URL with a host")
    if "@" in parts.netloc:
        raise ConfigError(
            "--base_url: holds credentials (user:password@); give the key with --api_key or "
            "OPENAI_API_KEY / OPENROUTER_API_KEY instead (a URL is saved and shown)"
        )


def resolve_api_key(key: str | None, base_url: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The key from the flag, else OPENROUTER_API_KEY / OPENAI_API_KEY from `environ` (the
    command lines pass the variables `agent.common.secrets` took out of the environment)."""
    if key:
        return key
    order = ("OPENROUTER_API_KEY", "OPENAI_API_KEY")
    if "openrouter" not in base_url:
        order = order[::-1]
    return next((environ[name] for name in order if environ.get(name)), None)


@dataclass(frozen=True)
class AgentConfig:
    """Everything one conversation needs to know; secrets are excluded from `public()`."""

    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    max_iterations: int = DEFAULT_MAX_TURNS
    enabled_toolsets: tuple[str, ...] = ()
    disabled_toolsets: tuple[str, ...] = ()
    ephemeral_system_prompt: str | None = None
    prefill_messages: tuple[dict[str, Any], ...] = ()
    max_tokens: int | None = None
    sampling: Sampling = field(default_factory=Sampling)  # temperature, top_p, stop, seed, extra fields
    reasoning_config: dict[str, Any] | None = None
    providers_allowed: tuple[str, ...] = ()
    providers_ignored: tuple[str, ...] = ()
    providers_order: tuple[str, ...] = ()
    provider_sort: str | None = None
    api_dialect: str = "auto"
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    log_prefix_chars: int = DEFAULT_LOG_PREFIX_CHARS
    log_prefix: str = ""
    tools: ToolConfig = field(default_factory=ToolConfig)
    capture_tokens: str = "off"  # agent.protocols.tokens.TOKEN_CAPTURE_MODES
    # The token API the start-up probe found (agent.llm.tokens); None: text only. Set at the
    # CLI edge, never by a flag: with capture_tokens "off", or "auto" and no API found, None.
    token_api: str | None = None

    def __post_init__(self) -> None:
        check_choice("provider_sort", self.provider_sort, PROVIDER_SORTS)
        check_choice("capture_tokens", self.capture_tokens, TOKEN_CAPTURE_MODES)
        check_choice("api_dialect", self.api_dialect, DIALECTS)
        if self.max_iterations < 1:
            raise ConfigError(f"--max_turns must be at least 1, got {self.max_iterations}")
        check_base_url(self.base_url)
        if both := sorted(set(self.providers_allowed) & set(self.providers_ignored)):
            raise ConfigError(
                f"--providers_allowed and --providers_ignored both name {', '.join(both)}: "
                "give each in one of them"
            )

    @property
    def dialect(self) -> str:
        if self.api_dialect != "auto":
            return self.api_dialect
        if "openrouter.ai" in self.base_url:
            return "openrouter"
        if "api.openai.com" in self.base_url:
            return "openai"
        return "generic"

    def prompt_sampling(self, row: Sampling | None = None) -> Sampling:
        """What one prompt's requests are sampled with: a dataset row's choices over the
        flags' (`--max_tokens` included, so the result says every field that is sent)."""
        own = self.sampling
        flags = replace(own, max_tokens=self.max_tokens) if own.max_tokens is None else own
        return flags if row is None else row.over(flags)

    def with_sampling(self, sampling: Sampling | None) -> AgentConfig:
        """This config sampling with `sampling` (a prompt's, from `prompt_sampling`); None: as is."""
        return self if sampling is None else replace(self, sampling=sampling)

    def secrets(self) -> tuple[str | None, ...]:
        """What a process holding this config redacts: the key, the web search keys, the MCP
        servers' env and headers values."""
        tools = self.tools
        mcp = (secret for server in tools.mcp_servers for secret in server.secrets())
        return (self.api_key, *tools.web_keys.values(), *mcp)

    def public(self) -> dict[str, Any]:
        """The config as JSON-able data without secrets (saved with a run), nor the ephemeral
        system prompt and the prefill messages: those are used at call time and never saved
        (their flags' promise), only whether they were given."""
        unsaved = ("api_key", "tools", "sampling", "ephemeral_system_prompt", "prefill_messages")
        data = {k: v for k, v in self.__dict__.items() if k not in unsaved}
        data["sampling"] = self.sampling.public()
        data["api_key_set"] = self.api_key is not None
        data["ephemeral_system_prompt_set"] = self.ephemeral_system_prompt is not None
        data["prefill_messages_count"] = len(self.prefill_messages)
        data["tools"] = self.tools.public()
        return json.loads(json.dumps(data))  # type: ignore[no-any-return]


def is_embedded(model: str) -> bool:
    """`embedded` or `embedded:/path/to/model.gguf`: served locally for the run."""
    return model == "embedded" or model.startswith("embedded:")


def embedded_hint(model: str) -> str:
    """A hint for a model name that is almost `embedded` (a typo is not a remote model)."""
    name = model.split(":", 1)[0]
    close = difflib.get_close_matches(name, ["embedded"], n=1, cutoff=0.75)
    return f" (did you mean --model=embedded{model[len(name) :]}?)" if close and name != "embedded" else ""


def is_loopback(url: str) -> bool:
    """An endpoint on this machine (no API key needed): localhost, 127.0.0.0/8 or ::1, any case."""
    try:
        host = urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost":  # hostname is lower-cased
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    # Said before and after: loading takes seconds to a minute, while nothing else moves.
    log.info("loading the embedded model (%s, %d thread(s)) …", spec.path or "bundled SmolLM2-135M", threads)
    began = time.monotonic()  # the weights' checksum and llama.cpp's import count too
    server.start()
    log.info("embedded model loaded in %.1f s; serving it on %s", time.monotonic() - began, server.base_url)
    try:
        yield server.base_url, server.model_id
    finally:
        server.stop()


@contextmanager
def serving(config: AgentConfig, threads: int) -> Iterator[AgentConfig]:
    """The config to talk with for the block: `config` itself or, for `--model=embedded[:path]`,
    one pointing at the embedded model served on loopback (no real key is sent, not even there)."""
    with served_endpoint(config.model, config.base_url, threads) as (url, model):
        if is_embedded(config.model):
            config = replace(config, base_url=url, model=model, api_key="local")
        yield config
