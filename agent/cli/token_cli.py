"""`--capture_tokens` at the CLI edge: the endpoint probed once, the finding said in one line,
and the token API it found put into the run's AgentConfig (`token_api`), which every worker is
handed. One run, one token API: `run_config.json` records the mode and the API, and a
`--resume` with another mode, or whose endpoint now gives another API (or none where the run
had one), stops before anything is touched.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from agent.config.export_config import TOKEN_FORMATS
from agent.config.run_config import RunConfig
from agent.errors import ConfigError, ModelAPIError
from agent.store.run_config_file import recorded_config

log = logging.getLogger("agent.tokens")  # INFO is shown (batch_runner's INFORMATIVE)

SHOWN_DETAIL = 300  # characters of the probe's reasons kept in its line
FIX = "use a server that returns token ids, e.g. vLLM >= 0.10.2, or --capture_tokens=auto"


def _recorded(config: RunConfig) -> dict[str, Any] | None:
    """The agent config a resumed run recorded (None: no resume, or no such record)."""
    if not config.resume:
        return None
    agent = recorded_config(config.run_dir).get("agent")
    return agent if isinstance(agent, dict) else None


def check_resumed_mode(config: RunConfig) -> None:
    """ConfigError when this --resume asks another --capture_tokens than the run ran with (a run
    from before the flag ran with "off")."""
    recorded = _recorded(config)
    if recorded is None:
        return
    mode = recorded.get("capture_tokens", "off")
    if mode != config.agent.capture_tokens:
        raise ConfigError(
            f"--resume: run {config.run_name} ran with --capture_tokens={mode} (run_config.json), "
            f"not {config.agent.capture_tokens}: one run keeps one kind of data; "
            f"pass --capture_tokens={mode}, or choose another --run_name"
        )


def _check_resumed_api(config: RunConfig, api: str | None) -> None:
    recorded = _recorded(config)
    if recorded is None or recorded.get("token_api") == api:
        return
    had = recorded.get("token_api") or "no token ids"
    raise ConfigError(
        f"--resume: run {config.run_name} captured {had} (run_config.json) but "
        f"{config.agent.base_url} now gives {api or 'no token ids'}: one run, one token API; "
        "resume against the server the run began with, or choose another --run_name"
    )


def ready_tokens(config: RunConfig) -> RunConfig:
    """`config` with the token API its endpoint gives (none with --capture_tokens=off), said in
    one line; ConfigError when --capture_tokens=required finds none, or the probe cannot ask.
    Called once the endpoint is served (an embedded model is probed like any other)."""
    agent = config.agent
    if agent.capture_tokens == "off":
        return config
    from agent.llm.token_probe import describe, probe  # the SDK (~1 s): only when a probe is asked

    # said first: a hanging endpoint otherwise held a silent start for up to --request_timeout
    log.info(
        "asking %s which token ids it gives (--capture_tokens=%s)…", agent.base_url, agent.capture_tokens
    )
    try:
        support = probe(agent)
    except ModelAPIError as exc:
        raise ConfigError(
            f"--capture_tokens={agent.capture_tokens}: could not ask {agent.base_url} for token ids "
            f"({exc.error_class}: {' '.join(str(exc).split())[:SHOWN_DETAIL]})"
        ) from None
    # One line: a server's error body may span several.
    support = replace(support, detail=" ".join(support.detail.split())[:SHOWN_DETAIL])
    line = describe(support, agent.base_url)
    if support.usable:
        log.info("%s", line)
    elif agent.capture_tokens == "required":
        raise ConfigError(f"--capture_tokens=required: {line}: {FIX}")
    elif wanted := set(config.export.export) & set(TOKEN_FORMATS):  # it would fail after the run
        raise ConfigError(
            f"--export={sorted(wanted)[0]} needs token ids and {line}: use a server that returns "
            "token ids, e.g. vLLM >= 0.10.2, or leave it out of --export"
        )
    else:
        log.warning("%s; this run keeps text only (--capture_tokens=auto)", line)
    api = support.api if support.usable else None
    _check_resumed_api(config, api)
    return replace(config, agent=replace(agent, token_api=api))
