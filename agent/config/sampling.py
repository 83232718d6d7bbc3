"""Sampling controls: what the model is asked to sample with (temperature, top_p, stop, seed,
max_tokens, and extra fields a server may take, such as top_k), from the flags or a dataset row.

Every field is None (or empty) when not chosen: then it is not sent at all and the server's own
default applies, so a run without sampling flags sends the same bytes as before they existed.
A row's choices win over the flags' (`Sampling.over`). The checks here serve both sources; a
bad value is a `SamplingError` naming the key, which the flags report as `--flag` and the
dataset as `file:line: sampling.key`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from agent.common.strict_json import NonStandardJSON, strict_loads
from agent.errors import ConfigError

MAX_STOP = 4  # OpenAI's limit on stop sequences
TEMPERATURE_MAX = 2.0
# The request fields the runner sets itself: an extra field may not replace them.
RUNNER_FIELDS = frozenset({"model", "messages", "tools", "stream", "stream_options", "n"})
# Fields with a flag (or a `sampling` key) of their own, which an extra field may not bypass.
OWN_FIELDS = {
    "temperature": "--temperature",
    "top_p": "--top_p",
    "stop": "--stop",
    "seed": "--model_seed",
    "max_tokens": "--max_tokens",
    "max_completion_tokens": "--max_tokens",
    "reasoning": "--reasoning_effort",
    "reasoning_effort": "--reasoning_effort",
    "provider": "--providers_allowed/--providers_order/--provider_sort",
}
# The flag of each Sampling field, for error lines.
FLAG_OF = {"temperature": "temperature", "top_p": "top_p", "stop": "stop", "seed": "model_seed",
           "max_tokens": "max_tokens", "extra": "sampling_extra"}  # fmt: skip


class SamplingError(ConfigError):
    """A bad sampling value: `key` is the field (`temperature`, or an extra field's name)."""

    def __init__(self, key: str, reason: str, flag: str | None = None) -> None:
        super().__init__(f"--{flag or FLAG_OF[key]}: {reason}")
        self.key = key
        self.reason = reason


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: Any) -> str:
    """A bad value as its source wrote it: a number as typed (9, not 9.0), else as JSON."""
    return f"{value:g}" if _is_number(value) else json.dumps(value, ensure_ascii=False, default=repr)


def check_extra(extra: Mapping[str, Any]) -> None:
    """Extra request fields: any JSON value, but never one the runner or another flag sets."""
    for key in extra:
        if key in RUNNER_FIELDS:
            reason = f"{key!r} is a request field the runner sets itself; it cannot be passed through"
            raise SamplingError(key, reason, "sampling_extra")
        if key in OWN_FIELDS:
            reason = f"{key!r} has a control of its own: {OWN_FIELDS[key]}"
            raise SamplingError(key, reason, "sampling_extra")


@dataclass(frozen=True)
class Sampling:
    """Sampling choices; None (or empty) is "not chosen". In `AgentConfig.sampling` these are
    the flags' choices, except `max_tokens`, whose flag fills `AgentConfig.max_tokens` (the
    reference's keyword); a row's `sampling` and a prompt's resolved sampling set it too."""

    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    max_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # top-level request fields (top_k, min_p…)

    def __post_init__(self) -> None:
        t, p = self.temperature, self.top_p
        if t is not None and not (_is_number(t) and 0 <= t <= TEMPERATURE_MAX):
            reason = f"must be a number from 0 to {TEMPERATURE_MAX:g}, got {_shown(t)}"
            raise SamplingError("temperature", reason)
        if p is not None and not (_is_number(p) and 0 < p <= 1):
            raise SamplingError("top_p", f"must be a number greater than 0 and at most 1, got {_shown(p)}")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise SamplingError("stop", "must be non-empty strings")
        if len(self.stop) > MAX_STOP:
            reason = f"at most {MAX_STOP} stop sequences (OpenAI's limit), got {len(self.stop)}"
            raise SamplingError("stop", reason)
        for name in ("seed", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise SamplingError(name, f"must be an integer, got {_shown(value)}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise SamplingError("max_tokens", f"must be at least 1, got {self.max_tokens}")
        check_extra(self.extra)

    def over(self, base: Sampling) -> Sampling:
        """These choices where made, `base`'s elsewhere; extra fields merged, these win."""
        chosen = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        kept = {name: getattr(base, name) if value in (None, ()) else value for name, value in chosen.items()}
        return Sampling(**kept, extra={**base.extra, **self.extra})

    def sent(self) -> dict[str, Any]:
        """The request fields these choices add (what `metadata.sampling` records): the chosen
        ones only, extra fields last. `max_tokens` is sent under the dialect's name for it."""
        chosen = {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        data: dict[str, Any] = {name: value for name, value in chosen.items() if value is not None}
        if self.stop:
            data["stop"] = list(self.stop)
        if self.max_tokens is not None:
            data["max_tokens"] = self.max_tokens
        return {**data, **self.extra}

    def public(self) -> dict[str, Any]:
        """Every field as JSON-able data (what run_config.json records; null: the server's default)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**data, "stop": list(self.stop), "extra": dict(self.extra)}


def parse_stop(text: str) -> tuple[str, ...]:
    """--stop: a comma list (`--stop=END,STOP`), or a JSON array of strings for sequences that
    hold a comma, a newline or edge spaces (`--stop='["\\n\\n", "User:"]'`)."""
    if not text.lstrip().startswith("["):
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items:  # "," or "  ": no sequence, where leaving the flag out says the same
            raise SamplingError("stop", f"{text!r} names no stop sequence (leave the flag out for none)")
        return items
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SamplingError("stop", f"not a valid JSON array: {exc.msg} (column {exc.colno})") from None
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise SamplingError("stop", "a JSON array must hold strings only")
    return tuple(value)


def parse_extra(text: str | None) -> dict[str, Any]:
    """--sampling_extra: a JSON object of top-level request fields (`{"top_k": 40}`)."""
    if text is None:
        return {}
    try:
        value = strict_loads(text)
    except NonStandardJSON as exc:  # it could be neither saved nor sent
        raise SamplingError("extra", f"not valid JSON: {exc} is not JSON") from None
    except json.JSONDecodeError as exc:
        raise SamplingError("extra", f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(value, dict):
        raise SamplingError("extra", f'must be a JSON object such as {{"top_k": 40}}, got {text!r}')
    return value


def flag_sampling(values: Mapping[str, Any]) -> Sampling:
    """The flags' sampling choices from their typed values (`--max_tokens` is AgentConfig's)."""
    stop = values["stop"]
    return Sampling(
        temperature=values["temperature"],
        top_p=values["top_p"],
        stop=parse_stop(stop) if stop is not None else (),
        seed=values["model_seed"],
        extra=parse_extra(values["sampling_extra"]),
    )
