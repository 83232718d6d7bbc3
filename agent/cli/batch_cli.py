"""The batch runner's command line (`python batch_runner.py ...`): its typed flag values into
one frozen RunConfig, the checks that must pass before a token is spent, and the
`--list_distributions` text."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from agent.backends import check_backend
from agent.batch.capacity import raise_fd_limit
from agent.batch.dataset import DatasetScan, check_readable
from agent.cli.command_line import resolve_key
from agent.cli.dataset_cli import build_dataset_options
from agent.cli.export_cli import build_export_options, check_publishable
from agent.cli.flag_values import check_required
from agent.cli.flags import BATCH
from agent.cli.resume_tools import check_resumed_settings, check_resumed_tools
from agent.cli.shared_config import build_agent_config, build_tool_config, check_toolsets
from agent.cli.token_cli import check_resumed_mode
from agent.config.agent_config import embedded_hint, is_embedded, is_loopback
from agent.config.run_config import RunConfig, check_run_name
from agent.config.verify_config import VerifyOptions
from agent.errors import ConfigError
from agent.protocols import ToolConfig
from agent.sandboxes import (
    SandboxOptions,
    available_backends,
    resolve_backend,
    run_options,
    unavailable_reason,
)
from agent.store import run_lock
from agent.toolbox.distribution_file import load_distributions_file, recorded_distributions
from agent.toolbox.distributions import Distribution, format_distributions, get_distribution
from agent.toolbox.registry import toolset_availability, toolset_backends

log = logging.getLogger("agent.cli")

# RunConfig fields filled by the flag of the same name, as parsed.
_SAME_NAME = (
    "dataset_file",
    "batch_size",
    "output_dir",
    "distribution",
    "distributions_file",
    "seed",
    "num_workers",
    "resume",
    "verbose",
    "max_samples",
    "keep_no_reasoning",
    "prompt_timeout",
    "max_prompt_attempts",
    "rpm",
    "tpm",
    "embedded_threads",
    "keep_malformed",
    "keep_token_drift",
    "price_input",
    "price_output",
    "price_cached",
    "max_cost",
    "allow_missing_toolsets",
    "backend",
    "ray_address",
    "samples_per_prompt",
    "rescore",
)


def build_run_config(values: Mapping[str, Any]) -> RunConfig:
    """The run's config from typed flag values; one clear ConfigError per problem."""
    check_required(BATCH, values)
    agent = build_agent_config(values, api_key=resolve_key(values))  # registers --tools_module's
    run_name = check_run_name(values["run_name"])
    distributions = _file_distributions(values, Path(values["output_dir"], run_name))
    get_distribution(values["distribution"], distributions)  # unknown → ConfigError listing the valid ones
    sandbox = SandboxOptions(
        backend=resolve_backend(values["sandbox"]),
        default_image=values["image"],
        network=values["sandbox_network"],
        disk_mb=values["sandbox_disk_mb"],
        memory_mb=values["sandbox_memory_mb"],
    )
    artifacts = Path(values["output_dir"], run_name).absolute()  # tools save files (images) there
    agent = replace(
        agent,
        tools=replace(agent.tools, artifacts_dir=str(artifacts)),
        capture_tokens=values["capture_tokens"],  # the token API is probed later (check_ready)
    )
    return RunConfig(
        **{name: values[name] for name in _SAME_NAME},
        run_name=run_name,
        agent=agent,
        distributions=distributions,
        # Not raised to --num_workers: the hub's shares cap the calls at the endpoint, and a
        # worker without a slot waits for one (raised, 2 over 4 workers put 4 calls there).
        max_inflight=values["max_inflight"],
        sandbox=sandbox,
        export=build_export_options(values),
        verify=VerifyOptions(**{f.name: values[f.name] for f in fields(VerifyOptions)}),
        dataset=build_dataset_options(values),
    )


def check_ready(config: RunConfig) -> None:
    """Problems that would waste the run, found before a token is spent, in the order a user
    fixes them: the dataset named, then what this machine offers, then where the run goes."""
    check_readable(config.dataset_file, config.dataset)
    needs_key = not is_embedded(config.agent.model) and not is_loopback(config.agent.base_url)
    if needs_key and not config.agent.api_key:
        raise ConfigError(
            f"no API key for {config.agent.base_url}: "
            "pass --api_key or set OPENROUTER_API_KEY / OPENAI_API_KEY" + embedded_hint(config.agent.model)
        )
    _check_writable(config.run_dir)
    raise_fd_limit(config.inflight_per_worker, config.num_workers)  # before the run directory is made
    check_backend(config.backend, config)
    check_publishable(config.export)
    run_dir = config.run_dir
    if not config.resume and run_dir.exists() and any(run_dir.glob("*.jsonl")):
        run_lock.check_free(run_dir)  # a runner writing it: that is what to say (exit 3)
        raise ConfigError(
            f"{run_dir} already holds results: "
            "pass --resume to continue that run, or choose another --run_name"
        )
    check_resumed_tools(config)
    check_resumed_settings(config)
    check_resumed_mode(config)  # the endpoint's token API is probed once it is served (ready_tokens)
    _check_toolsets(config)


def ready_sandbox(config: RunConfig, scan: DatasetScan) -> RunConfig:
    """`config` once its sandbox backend is known to run here, checked after the dataset scan:
    what the backend needs may depend on the rows (docker checks and records the default image,
    --image, only when some row names no image of its own)."""
    sandbox = run_options(config.sandbox, default_image_used=scan.without_image > 0)
    config = replace(config, sandbox=sandbox)
    reason = unavailable_reason(config.sandbox)
    if reason is not None:
        raise ConfigError(f"--sandbox={config.sandbox.backend} is unavailable here: {reason}")
    return config


def _file_distributions(values: Mapping[str, Any], run_dir: Path) -> dict[str, Distribution]:
    """--distributions_file's, read once the run's own toolsets are registered; on --resume
    without it, those the run recorded in run_config.json, so it samples as it did."""
    if values["distributions_file"] is None:
        return recorded_distributions(run_dir) if values["resume"] else {}
    loaded = load_distributions_file(values["distributions_file"])
    name = values["distribution"]
    recorded = recorded_distributions(run_dir) if values["resume"] else {}
    if name in recorded and recorded[name] != loaded.get(name):
        log.warning(
            "--resume: %s now gives distribution %s other odds than the run sampled with so far "
            "(run_config.json); the prompts left are drawn with the file's",
            values["distributions_file"], name,
        )  # fmt: skip
    return loaded


def _check_toolsets(config: RunConfig) -> None:
    """A distribution whose toolsets cannot all run here would make data it is not named for."""
    toolsets = list(get_distribution(config.distribution, config.distributions).toolsets)
    asked = f"--distribution={config.distribution}"
    check_toolsets(asked, toolsets, config.agent.tools, config.allow_missing_toolsets)


def _check_writable(run_dir: Path) -> None:
    """The run directory exists as a directory, or can be made: tried with a scratch directory
    in its nearest existing ancestor (removed at once), so a file, /proc or a read-only place
    is one clear line now, not a traceback after the dataset was read."""
    existing = run_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"--output_dir: {existing} is not a directory, so {run_dir} cannot be made there")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=existing))
    except OSError as exc:
        raise ConfigError(  # (/proc says ENOENT: the place exists, no directory can be made in it)
            f"--output_dir: cannot create {run_dir}: making a directory in {existing} failed ({exc.strerror})"
        ) from None


def list_distributions_text(values: Mapping[str, Any] | None = None) -> str:
    """Every distribution with its toolsets' availability, each toolset's backend with the
    tool flags among `values` (their defaults without), then the sandbox backends."""
    # A run saves images in its run directory, whichever it is: image_gen is usable as in a run.
    run_dir = "<output_dir>/<run_name>"
    tools = build_tool_config(values, run_dir) if values is not None else ToolConfig(artifacts_dir=run_dir)
    source = values["distributions_file"] if values is not None else None
    extra = load_distributions_file(source) if source is not None else None
    backends = available_backends()
    text = format_distributions(toolset_availability(tools), toolset_backends(tools), extra, source)
    lines = [text, "", "Sandbox backends on this machine:"]
    lines += [
        f"  {name:8} {'available' if why is None else 'unavailable: ' + why}"
        for name, why in backends.items()
    ]
    return "\n".join(lines)
