"""`--rescore` on the batch runner's command line: an existing run's entries checked again from
their transcripts (`agent.batch.rescore`), then kept, merged and reported as a run ends; no
prompt runs. The run's dataset, batch size, samples per prompt, row limit and distribution come
from its `run_config.json` (`--dataset_file` names another copy of the dataset); the checks are
this command line's flags over the rows' `verify` objects, `--verify_command` the run's unless
given. Bad input is one line and exit 2."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from agent.backends import backend_factory
from agent.batch.dataset import check_readable, scan_dataset
from agent.batch.run import BatchRun
from agent.cli.batch_cli import build_run_config
from agent.cli.dataset_cli import pin_dataset, saved_dataset_flags
from agent.cli.resume_tools import check_resumed_tools
from agent.cli.verify_cli import check_verification, refuse_bad_checks
from agent.config.run_config import RunConfig, check_run_name
from agent.errors import ConfigError
from agent.store.run_config_file import RUN_CONFIG_FILE, RunConfigUnreadable, read_run_config

# Flags a rescore takes from the run when the command line leaves them out, and those it always takes.
_UNLESS_GIVEN = ("dataset_file", "batch_size")
_THE_RUNS = ("samples_per_prompt", "max_samples", "distribution")


def rescore_config(values: Mapping[str, Any]) -> RunConfig:
    """The config of a rescore of `--run_name`: ConfigError when there is no such run."""
    if values["run_name"] is None:
        raise ConfigError("--rescore re-checks an existing run: pass its --run_name")
    run_dir = Path(values["output_dir"]) / check_run_name(values["run_name"])
    saved = _saved_config(run_dir)
    filled = dict(values)
    for name in _UNLESS_GIVEN:
        filled[name] = values[name] if values[name] is not None else saved.get(name)
    for name in _THE_RUNS:
        filled[name] = saved.get(name, values[name])
    filled.update(saved_dataset_flags(saved))  # its columns, and its Hub revision (pinned below)
    if values["verify_command"] is None:  # it cannot run again: the run's stands, unless another is named
        filled["verify_command"] = (saved.get("verify") or {}).get("verify_command")
    filled["resume"] = True  # it continues the run's files and statistics
    # no agent runs: the model its figures name is the run's (--judge_model names the judge)
    filled["model"] = (saved.get("agent") or {}).get("model") or values["model"]
    return build_run_config(filled)


def _saved_config(run_dir: Path) -> dict[str, Any]:
    try:
        saved = read_run_config(run_dir)
    except RunConfigUnreadable as exc:
        raise ConfigError(f"--rescore: {exc}") from None
    if saved is None:
        raise ConfigError(f"--rescore: no run in {run_dir} (it has no {RUN_CONFIG_FILE})")
    return saved


def rescore(values: Mapping[str, Any], console: Console) -> int:
    """Check the run again, keep, merge, report; the exit code of the run's completion."""
    config = rescore_config(values)
    check_resumed_tools(config)
    check_readable(config.dataset_file, config.dataset)
    config = pin_dataset(config)  # the commit the run read (a rescore is a --resume)
    backend = config.sandbox.backend
    scan = scan_dataset(  # with keys: the run's plan (checkpoint.json) is made as a resume's
        config.dataset_file,
        config.max_samples,
        require_valid=False,
        backend=backend,
        options=config.dataset,
        keys=True,
    )
    refuse_bad_checks(scan)
    check_verification(config, scan)
    return BatchRun(config, console, backend=backend_factory(config.backend)).run(scan)
