"""The dataset card (the Hub repository's README.md) of an exported run.

The YAML header is `huggingface_hub`'s own `DatasetCardData`, so the Hub reads it as it reads
any card: one `configs` entry per exported format with its data file, the license, the size
category and tags. The body gives the run's figures from its `statistics.json`: model,
toolset distribution, the pass rates when attempts were checked, outcomes, tool usage with
failure rates, failures and discards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from huggingface_hub import DatasetCardData

__all__ = ["DATA_DIR", "card_text", "size_category"]

DATA_DIR = "data"  # where the exported files go in the repository
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))
_FORMAT_TEXT = {
    "openai": "OpenAI chat `messages` + `tools` (a JSON string): the shape TRL's SFTTrainer reads",
    "sharegpt": "ShareGPT `conversations` (the run's trajectory entries)",
}


def size_category(entries: int) -> str:
    """The Hub's size category for a dataset of `entries` rows."""
    return next((name for bound, name in _SIZES if entries < bound), "1M<n<10M")


def _header(files: Mapping[str, str], entries: int, license_id: str, run_name: str) -> str:
    configs: list[dict[str, Any]] = [
        {"config_name": name, "data_files": [{"split": "train", "path": f"{DATA_DIR}/{file}"}]}
        for name, file in files.items()
    ]
    if configs:
        configs[0]["default"] = True
    data = DatasetCardData(
        license=license_id,
        pretty_name=run_name,
        size_categories=[size_category(entries)],
        task_categories=["text-generation"],
        tags=["agent-trajectories", "tool-use", "synthetic", "agent-batch-runner"],
        configs=configs,
    )
    return f"---\n{data.to_yaml()}\n---\n"


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _counts(title: str, counts: Any, what: str) -> list[str]:
    """A section listing `counts` ({name: number}), or saying there were none."""
    items = sorted(counts.items()) if isinstance(counts, Mapping) else []
    items = [(name, n) for name, n in items if n]
    if not items:
        return [f"## {title}", "", f"No {what}.", ""]
    return [f"## {title}", "", *_table([what.rstrip("s").capitalize(), "count"], items), ""]


def _tools(stats: Mapping[str, Any]) -> list[str]:
    tools = stats.get("tool_statistics") or {}
    rows = [
        (f"`{name}`", *(c.get(k, 0) for k in ("count", "success", "failure")), f"{c.get('failure_rate', 0)}%")
        for name, c in tools.items()
        if isinstance(c, Mapping) and c.get("count")
    ]
    if not rows:
        return ["## Tool usage", "", "No tool was called.", ""]
    return ["## Tool usage", "", *_table(["tool", "calls", "success", "failure", "failure rate"], rows), ""]


def _summary(stats: Mapping[str, Any], entries: int) -> list[str]:
    reasoning = stats.get("reasoning_statistics") or {}
    tokens = (stats.get("tokens") or {}).get("merged_output") or {}
    rows = [
        ("model", f"`{stats.get('model', 'unknown')}`"),
        ("toolset distribution", f"`{stats.get('distribution', 'unknown')}`"),
        ("entries", entries),
        ("prompts in the dataset", stats.get("total_prompts", "unknown")),
        ("assistant turns with reasoning", f"{reasoning.get('coverage_percent', 0)}%"),
        ("tokens (prompt / completion)", f"{tokens.get('prompt', 0)} / {tokens.get('completion', 0)}"),
    ]
    return ["## Run", "", *_table(["", ""], rows), ""]


_VERDICTS = ("passed", "failed", "undecided")


def rate(value: Any) -> str:
    """A rate in [0, 1] as a percentage, or "—" when unknown."""
    return f"{100 * value:.1f}%" if isinstance(value, int | float) and not isinstance(value, bool) else "—"


def _verification(stats: Mapping[str, Any]) -> list[str]:
    """The pass rates, when the run's attempts were checked (statistics.json `verification`)."""
    section = stats.get("verification")
    if not isinstance(section, Mapping):
        return []
    attempts = section.get("attempts") or {}
    rows = [
        ("attempts checked", attempts.get("verified", 0)),
        ("passed · failed · undecided", " · ".join(str(attempts.get(k, 0)) for k in _VERDICTS)),
        ("mean reward", f"{section['mean_reward']:.3f}" if section.get("mean_reward") is not None else "—"),
        *((f"pass@{k}", rate(value)) for k, value in (section.get("pass_at_k") or {}).items()),
    ]
    note = (
        "pass@k: the unbiased estimator (Chen et al. 2021) over the prompts with at least k decided "
        "samples; an undecided attempt (a check errored) is no sample. Attempts not kept count too."
    )
    return ["## Pass rates", "", *_table(["", ""], rows), "", note, ""]


def _usage(repo_id: str, files: Mapping[str, str]) -> list[str]:
    rows = [(f"`{name}`", f"`{DATA_DIR}/{file}`", _FORMAT_TEXT.get(name, "")) for name, file in files.items()]
    first = next(iter(files), "openai")
    return [
        "## Files",
        "",
        *_table(["config", "file", "content"], rows),
        "",
        "```python",
        "from datasets import load_dataset",
        f'ds = load_dataset("{repo_id}", "{first}", split="train")',
        "```",
        "",
    ]


def card_text(
    repo_id: str, stats: Mapping[str, Any], files: Mapping[str, str], entries: int, license_id: str
) -> str:
    """README.md for `repo_id`: `files` maps each format to its file name in `DATA_DIR`."""
    run_name = str(stats.get("run_name") or repo_id.split("/")[-1])
    body = [
        f"# {run_name}",
        "",
        "Tool-using agent trajectories generated by agent-batch-runner: one conversation per prompt, "
        "with its reasoning, tool calls and tool results.",
        "",
        *_summary(stats, entries),
        *_verification(stats),
        *_counts("Outcomes", stats.get("outcomes"), "outcomes"),
        *_tools(stats),
        *_counts("Failed prompts", stats.get("failures"), "failures"),
        *_counts("Discarded entries", stats.get("discarded"), "discards"),
        *_usage(repo_id, files),
    ]
    return _header(files, entries, license_id, run_name) + "\n".join(body)
