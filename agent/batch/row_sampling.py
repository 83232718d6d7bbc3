"""A dataset row's `sampling` object: its own sampling choices, which win over the flags'.

    {"prompt": "...", "sampling": {"temperature": 0.2, "stop": ["END"], "seed": 7, "top_k": 40}}

The keys are those of the flags: `temperature` (0 to 2), `top_p` (above 0, at most 1), `stop`
(a string or a list of at most four strings), `seed` (the model's) and `max_tokens` (at least 1);
any other key is an extra request field passed through as `--sampling_extra`'s are (never one
the runner sets itself, `messages` or `tools`…). A key set to JSON `null` counts as absent. A
bad value is the row's error, named `sampling.<key>` (`agent.batch.row_fields` reports it
with the file and line, as it reports every bad field).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent.config.sampling import Sampling, SamplingError

KEYS = ("temperature", "top_p", "stop", "seed", "max_tokens")


def _stop(value: Any, error: Callable[[str, str], Exception]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise error("sampling.stop", "must be a string or a list of strings")
    return tuple(value)


def _is_text(value: Any) -> bool:
    """Whether `value` (any JSON) can be written back as UTF-8: an unpaired surrogate escape
    (`"\\ud800"`) would fail every request that carried it, mid-run."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_sampling(value: Any, error: Callable[[str, str], Exception]) -> Sampling | None:
    """The row's `sampling` value as its choices (None when absent or null); raises
    `error(field, reason)` (the row parser's own error type) when it is no valid one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise error("sampling", 'must be a JSON object of sampling fields, such as {"temperature": 0.7}')
    if not _is_text(value):
        raise error(
            "sampling", "holds an unpaired surrogate escape (\\ud800-\\udfff), which is not Unicode text"
        )
    chosen = {key: item for key, item in value.items() if item is not None}
    own = {key: chosen.pop(key) for key in KEYS if key in chosen}
    if "stop" in own:
        own["stop"] = _stop(own["stop"], error)
    try:
        return Sampling(**own, extra=chosen)
    except SamplingError as exc:
        raise error(f"sampling.{exc.key}", exc.reason) from None
