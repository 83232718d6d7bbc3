"""`--export` and `--push_to_hub` on the batch runner's command line: the options from the
flag values, the post-process mode (no `--dataset_file`: export an existing run, run nothing),
and the step both modes end with (export the run's files, then push them with their card).

A run exports only what it merged: an interrupted run's `trajectories.jsonl` is stale, so it
exports nothing (the next `--resume` or a post-process call does). A post-process export of a
run whose last invocation was interrupted exports that stale file and says so (how many entries
the batch files hold beyond it, and that `--resume` merges them). An export or push that fails
is one line and exit 1 (2 for bad input); the run's own files are never changed by either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent.config.export_config import EXPORT_FORMATS, TOKEN_FORMATS, ExportOptions
from agent.config.run_config import check_run_name
from agent.errors import ConfigError
from agent.store.jsonl import json_int
from agent.store.run_config_file import read_statistics

__all__ = [
    "build_export_options",
    "check_publishable",
    "export_and_push",
    "is_post_process",
    "merged",
    "post_process",
]

Say = Callable[[str], None]
HUB_DIR = "export/hub"  # the Parquet files a push uploads, kept for the next push


def hub_configs(formats: tuple[str, ...]) -> tuple[str, ...]:
    """The Hub configs of the exported formats: `openai`, and `sharegpt` for `sharegpt` or
    `parquet` (the same rows: the entries with the fixed columns), each as Parquet."""
    wanted = {"openai": "openai" in formats, "sharegpt": bool({"sharegpt", "parquet"} & set(formats))}
    return tuple(name for name, yes in wanted.items() if yes)


def build_export_options(values: Mapping[str, Any]) -> ExportOptions:
    """The export options of the flag values; `--push_to_hub` alone exports every text format.
    A run (not a post-process) asking for `--export=rl` must capture token ids."""
    formats = tuple(dict.fromkeys(values["export"] or ()))
    if values["push_to_hub"] is not None and not formats:
        formats = tuple(name for name in EXPORT_FORMATS if name not in TOKEN_FORMATS)
    running = values["dataset_file"] is not None
    if running and values["capture_tokens"] == "off" and (wanted := set(formats) & set(TOKEN_FORMATS)):
        raise ConfigError(
            f"--export={sorted(wanted)[0]} needs the model's token ids: add --capture_tokens=required"
        )
    if values["push_to_hub"] is not None and not hub_configs(formats):
        raise ConfigError(
            f"--push_to_hub pushes the text formats (sharegpt, parquet, openai), and "
            f"--export={','.join(formats)} has none: add one (--export={','.join(formats)},parquet)"
        )
    return ExportOptions(
        export=formats,
        export_reasoning=values["export_reasoning"],
        push_to_hub=values["push_to_hub"],
        hub_private=values["hub_private"],
        hub_license=values["hub_license"],
    )


def is_post_process(values: Mapping[str, Any]) -> bool:
    """No dataset, but something to export or push: post-process the run `--run_name`."""
    return values["dataset_file"] is None and (bool(values["export"]) or values["push_to_hub"] is not None)


def post_process_dir(values: Mapping[str, Any]) -> Path:
    """The existing run directory to post-process; ConfigError when there is none to export."""
    if values["run_name"] is None:
        raise ConfigError("--export/--push_to_hub without --dataset_file post-process a run: pass --run_name")
    run_dir = Path(values["output_dir"]) / check_run_name(values["run_name"])
    if not run_dir.is_dir():
        raise ConfigError(f"--run_name={values['run_name']}: no run directory {run_dir}")
    return run_dir  # what it holds is read under its lock: a runner may be writing it now


def check_publishable(options: ExportOptions) -> None:
    """Before a run spends anything: a push needs a token (ConfigError when there is none)."""
    if options.push_to_hub is not None:
        from agent.publish.hub import hub_token  # lazily: see export_and_push

        hub_token()


def merged(run_dir: Path) -> bool:
    """Whether the run's last invocation merged its output (statistics.json says so)."""
    return read_statistics(run_dir).get("merged") is True


def unmerged_warning(run_dir: Path, exported: int) -> str | None:
    """The line that says an export is not the whole run, when its last invocation was
    interrupted: trajectories.jsonl is then the merge before it, and the entries that
    invocation wrote are only in the batch files (statistics.json's `completion.in_output`
    counts them all). Without it "Exported 5 entries" read as complete where the run held 7."""
    stats = read_statistics(run_dir)
    if stats.get("merged") is not False:
        return None
    done = stats.get("completion")
    on_disk = json_int(done.get("in_output")) if isinstance(done, dict) else 0
    held = (
        f"the batch files hold {on_disk - exported} more ({on_disk} in all)"
        if on_disk > exported
        else "the batch files may hold more"
    )
    return (
        f"warning: the export is not the whole run: its last invocation was interrupted before it "
        f"merged, so the {exported} entries exported are trajectories.jsonl as the merge before it "
        f"left it, and {held}; rerun the run with --resume (it merges them at its end), then export again"
    )


def export_and_push(run_dir: Path, options: ExportOptions, say: Say) -> None:
    """Write the exports of `run_dir`, then push them when asked; one line for each step."""
    if not options.export:
        return
    # Imported here: pyarrow and huggingface_hub take ~0.9 s to import, which every start of
    # the runner would pay, exporting or not.
    from agent.export.exports import HUB_EXPORTS
    from agent.export.run_export import export_run
    from agent.publish.hub import push_run

    report = export_run(run_dir, options.export, inline=options.inline_reasoning)
    for name, path in report.files.items():
        say(f"Exported {report.entries} entries ({name}): {path}")
    if replaced := report.replaced_line():  # once: the Hub's files replace the same ones
        say(replaced)
    if stale := unmerged_warning(run_dir, report.entries):  # before a push publishes them
        say(stale)
    if options.push_to_hub is None:
        return
    hub = export_run(
        run_dir,
        hub_configs(options.export),
        inline=options.inline_reasoning,
        formats=HUB_EXPORTS,
        directory=HUB_DIR,
    )
    pushed = push_run(
        run_dir,
        options.push_to_hub,
        hub.files,
        hub.entries,
        private=options.hub_private,
        license_id=options.hub_license,
    )
    say(f"Pushed {len(pushed.files)} files to {pushed.repo_url} ({pushed.commit_url})")


def post_process(values: Mapping[str, Any], say: Say) -> int:
    """Export (and push) the existing run `--run_name`; nothing runs."""
    options = build_export_options(values)
    run_dir = post_process_dir(values)
    check_publishable(options)
    from agent.store import run_lock

    with run_lock.reading(run_dir):  # not while a runner writes it (exit 3), nor one starting meanwhile
        export_and_push(run_dir, options, say)
    return 0
