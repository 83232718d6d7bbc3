"""The one reader of a run's `run_config.json` (what `RunConfig.public()` wrote when the run
began): --resume and --rescore read back its dataset, distributions and toolsets from it; and of
its `statistics.json` outside a run (an export, a push's card, a resume's checks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.store.layout import STATISTICS_FILE

RUN_CONFIG_FILE = "run_config.json"


class RunConfigUnreadable(ConfigError):
    """The run has a run_config.json, but not a readable JSON object: each caller decides whether
    that stops it (a rescore, a resume's distributions) or counts as nothing recorded."""


def read_run_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's recorded config; None when it has no run_config.json (no run there yet, or one
    from before the file). RunConfigUnreadable (its message names the path) when it is corrupt."""
    path = run_dir / RUN_CONFIG_FILE
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError covers bad JSON and bad UTF-8
        raise RunConfigUnreadable(f"{path} cannot be read ({exc})") from None
    if not isinstance(saved, dict):
        raise RunConfigUnreadable(f"{path} is not a run's config")
    return saved


def recorded_config(run_dir: Path) -> dict[str, Any]:
    """The run's recorded config for a comparison with this start's: empty where there is none
    (no run there yet) or where it cannot be read (compares as nothing recorded)."""
    try:
        saved = read_run_config(run_dir)
    except RunConfigUnreadable:
        return {}
    return saved if saved is not None else {}


def read_statistics(run_dir: Path) -> dict[str, Any]:
    """The run's statistics.json; {} when there is none, or none that reads as a JSON object."""
    try:
        stats = json.loads((run_dir / STATISTICS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError covers bad JSON and bad UTF-8
        return {}
    return stats if isinstance(stats, dict) else {}
