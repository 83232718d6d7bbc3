"""The parts of statistics.json that describe the run rather than its entries: what was run
on which dataset, and the filter notes and budget (checkpoint.json: `agent.batch.tally`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from agent.batch.backend import Tally
from agent.batch.dataset import DatasetScan
from agent.batch.recovery import filter_warnings
from agent.config.run_config import RunConfig


def run_summary(cfg: RunConfig, scan: DatasetScan, duration: float) -> dict[str, Any]:
    """The run's identity and its dataset's counts."""
    return {
        "run_name": cfg.run_name,
        "distribution": cfg.distribution,
        "model": cfg.agent.model,
        "total_prompts": scan.valid,
        "batch_size": cfg.batch_size,
        "total_batches": -(-scan.valid * cfg.samples_per_prompt // cfg.batch_size),  # of attempts
        "duration_seconds": duration,
        "dataset": {
            "file": scan.path,
            "lines": scan.total_lines,
            "valid": scan.valid + scan.truncated,  # valid rows of the file
            "used": scan.valid,  # those this run used (all but what --max_samples left out)
            "max_samples": cfg.max_samples,
            "invalid": scan.error_count,
        },
    }


def filters_and_budget(
    cfg: RunConfig,
    whole_run: tuple[Mapping[str, int], int],
    moved: Mapping[str, Counter[str]],
    tally: Tally | None,
) -> dict[str, Any]:
    """The filter notes (heavy discards of the whole run: `whole_run`, the current discards by
    reason and the output's entries, set against both together; entries the re-applied filters
    moved: `moved`, per section name) and the budget. Of the whole run, not this invocation:
    a resume with nothing left to run, or one that re-applied a filter, still says what the
    output lacks."""
    return {
        "filter_warnings": filter_warnings(whole_run[0], whole_run[1] + sum(whole_run[0].values())),
        **{name: dict(sorted(counts.items())) for name, counts in moved.items()},
        "budget": {
            "max_cost_usd": cfg.max_cost,
            "reached": tally is not None and tally.stopped_by == "max_cost",
            "prices_per_million": asdict(cfg.prices) if cfg.prices else None,
        },
    }


def worker_losses(tally: Tally | None) -> dict[str, Any]:
    """The `worker_losses` section: workers that died and were replaced."""
    losses = tally.losses if tally is not None else None
    return {"worker_losses": losses.as_dict()} if losses is not None else {}


def sample_counts(cfg: RunConfig, scan: DatasetScan) -> dict[str, Any]:
    """--samples_per_prompt and the attempts it makes of the dataset's prompts (units of work:
    `total_prompts` counts prompts, batches and the `completion` counts attempts)."""
    per_prompt = cfg.samples_per_prompt
    return {"samples_per_prompt": per_prompt, "total_attempts": scan.valid * per_prompt}
