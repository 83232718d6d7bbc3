"""The dataset's flags into `DatasetOptions` (--prompt_field, --field_map, --dataset_revision),
and the Hub commit a run reads: resolved once when the run begins, pinned in run_config.json,
and taken from there by --resume and --rescore, so every invocation reads the same rows."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agent.batch.dataset_hub import HUB_PREFIX, resolve_commit
from agent.batch.row_columns import check_field_map
from agent.config.dataset_config import DatasetOptions
from agent.config.run_config import RunConfig
from agent.errors import ConfigError
from agent.store.run_config_file import RunConfigUnreadable, read_run_config

log = logging.getLogger("agent.cli.dataset")

# The flags of DatasetOptions, by field: a rescore takes the run's.
FLAG_OF = {"prompt_field": "prompt_field", "field_map": "field_map", "revision": "dataset_revision"}


def build_dataset_options(values: Mapping[str, Any]) -> DatasetOptions:
    """The dataset's options from typed flag values; ConfigError for a bad --field_map."""
    prompt_field = values["prompt_field"]
    if not prompt_field.strip():
        raise ConfigError("--prompt_field: name the column holding the prompt")
    try:
        field_map = check_field_map(tuple(values["field_map"]))
    except ValueError as exc:
        raise ConfigError(f"--field_map: {exc}") from None
    return DatasetOptions(prompt_field, field_map, values["dataset_revision"])


def saved_dataset_flags(saved: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset flags a run's run_config.json recorded, by flag name (none when absent)."""
    options = saved.get("dataset")
    if not isinstance(options, dict):
        return {}
    flags = {FLAG_OF[name]: value for name, value in options.items() if name in FLAG_OF}
    if isinstance(flags.get("field_map"), list):  # JSON has no tuples: [["answer", "gold"]]
        flags["field_map"] = tuple("=".join(pair) for pair in flags["field_map"])
    return flags


def pin_dataset(config: RunConfig) -> RunConfig:
    """`config` with the Hub commit its dataset is read at: the run's pinned one on --resume,
    else the one --dataset_revision (default main) resolves to now."""
    options = config.dataset
    if not config.dataset_file.startswith(HUB_PREFIX):
        if options.revision is not None:
            raise ConfigError("--dataset_revision is a Hub dataset's: --dataset_file is not hf://…")
        return config
    pinned = _pinned(config) if config.resume else None
    if pinned is not None:
        revision, commit = pinned
        if options.revision not in (None, revision, commit):
            log.warning(
                "--resume reads %s at the run's pinned commit %s (revision %s when it began); "
                "--dataset_revision=%s is ignored",
                config.dataset_file,
                commit,
                revision or "main",
                options.revision,
            )
        return replace(config, dataset=replace(options, revision=revision, commit=commit))
    commit = resolve_commit(config.dataset_file, options.revision)
    return replace(config, dataset=replace(options, commit=commit))


def _pinned(config: RunConfig) -> tuple[str | None, str] | None:
    """(revision, commit) the run's run_config.json pinned for this dataset, if any."""
    try:
        saved = read_run_config(config.run_dir)
    except RunConfigUnreadable:
        return None  # as if no earlier start wrote it: this start pins the commit
    if saved is None:
        return None  # no earlier start wrote it: this start pins the commit
    options = saved.get("dataset")
    if saved.get("dataset_file") != config.dataset_file or not isinstance(options, dict):
        return None
    commit, revision = options.get("commit"), options.get("revision")
    if not isinstance(commit, str) or not commit:
        return None
    return (revision if isinstance(revision, str) else None), commit
