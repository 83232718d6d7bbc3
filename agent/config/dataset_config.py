"""Where a run's prompts come from and how a record's columns map to row fields: a JSONL file,
a Parquet file, or a `datasets` dataset (`hf://datasets/org/name[/config][:split]`, or a local
dataset directory). Built at the CLI edge from --dataset_file, --prompt_field, --field_map and
--dataset_revision; the revision a Hub dataset resolved to is pinned in `run_config.json`."""

from __future__ import annotations

from dataclasses import dataclass

# The row fields a column may be mapped to (`--field_map=field=column,...`).
MAPPABLE_FIELDS = ("image", "docker_image", "cwd", "metadata", "sampling", "verify", "answer")


@dataclass(frozen=True)
class DatasetOptions:
    prompt_field: str = "prompt"  # the column holding the prompt
    field_map: tuple[tuple[str, str], ...] = ()  # (row field, column): columns read as row fields
    revision: str | None = None  # a Hub dataset's revision (branch, tag or commit); None: main, pinned
    # The commit `revision` resolved to when the run began (hf:// only): every read of the run,
    # --resume's included, reads that commit, whatever the branch holds since.
    commit: str | None = None
