"""The parts of statistics.json that describe the run rather than its entries: what was run
on which dataset, and the filter notes and budget."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from agent.batch.dataset import DatasetScan
from agent.batch.recovery import filter_warnings
from agent.config.run_config import RunConfig
from agent.store.statistics import RunStatistics


def run_summary(cfg: RunConfig, scan: DatasetScan, duration: float) -> dict[str, Any]:
    """The run's identity and its dataset's counts."""
    return {
        "run_name": cfg.run_name,
        "distribution": cfg.distribution,
        "model": cfg.agent.model,
        "total_prompts": scan.valid,
        "batch_size": cfg.batch_size,
        "total_batches": -(-scan.valid // cfg.batch_size),
        "duration_seconds": duration,
        "dataset": {
            "file": scan.path,
            "lines": scan.total_lines,
            "valid": scan.valid,
            "invalid": scan.error_count,
        },
    }


def filters_and_budget(
    cfg: RunConfig, stats: RunStatistics, recovered: Counter[str], *, budget_reached: bool
) -> dict[str, Any]:
    """The filter notes (heavy discards, recovered ones) and the budget."""
    return {
        "filter_warnings": filter_warnings(stats.discards, stats.entries_this_run),
        "recovered_discards": dict(sorted(recovered.items())),
        "budget": {
            "max_cost_usd": cfg.max_cost,
            "reached": budget_reached,
            "prices_per_million": asdict(cfg.prices) if cfg.prices else None,
        },
    }
