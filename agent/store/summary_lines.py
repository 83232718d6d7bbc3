"""Lines of the run summary about the whole run and the dataset (`agent.store.summary_view`
prints them): the whole run's figures when several invocations wrote the run directory, the
dataset's counts under --max_samples, and plurals that agree with their numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.store.jsonl import json_int


def n(value: Any) -> str:
    return f"{json_int(value):,}"


def duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d} ({seconds:.2f} s)"


def usd(value: Any) -> str:
    return f"${value:,.6f}" if isinstance(value, int | float) and not isinstance(value, bool) else "unknown"


def plural(count: Any, noun: str) -> str:
    return f"{n(count)} {noun}{'' if json_int(count) == 1 else ('es' if noun.endswith('h') else 's')}"


def whole_run_lines(total: Mapping[str, Any], unit: str = "prompts") -> list[str]:
    """The whole run's figures, when more than one invocation wrote this run directory; `unit`:
    what they count (attempts, with more than one sample per prompt)."""
    if json_int(total.get("invocations")) < 2:
        return []
    tokens = (total.get("tokens") or {}).get("total")
    # a prompt that failed, then ran again, is in the sums of both invocations: said only where
    # one failed ("a retried one in each", always printed, read as if retries had happened)
    retried = " (one retried counts in each invocation that ran it)" if json_int(total.get("failed")) else ""
    return [
        f"Whole run ({n(total.get('invocations'))} invocations): {n(total.get('processed'))} {unit} "
        f"processed{retried} (✓ {n(total.get('completed'))} completed, "
        f"◐ {n(total.get('partial'))} partial, "
        f"⌫ {n(total.get('discarded'))} discarded, ✗ {n(total.get('failed'))} failed) · "
        f"{n(total.get('api_calls'))} model calls · {n(tokens)} tokens · cost {usd(total.get('cost_usd'))} · "
        f"{duration(float(total.get('duration_seconds') or 0.0))} running"
    ]


def dataset_lines(dataset: Mapping[str, Any]) -> list[str]:
    """The dataset's counts; under --max_samples, how many of its valid rows this run used."""
    if not any(json_int(value) for value in dataset.values()):
        return []
    line = f"Dataset: lines {n(dataset.get('lines'))} · valid {n(dataset.get('valid'))}"
    if dataset.get("max_samples") is not None:
        line += f" · used {n(dataset.get('used'))} (--max_samples={n(dataset['max_samples'])})"
    return [line + f" · invalid {n(dataset.get('invalid'))}"]


def endpoint_label(stats: Mapping[str, Any]) -> str:
    invocations = json_int((stats.get("whole_run") or {}).get("invocations"))
    return f"Endpoint (whole run, {invocations} invocations)" if invocations > 1 else "Endpoint"


def verification_lines(section: Any) -> list[str]:
    """One line of pass rates, when the run's attempts were checked."""
    if not isinstance(section, Mapping):
        return []
    attempts = section.get("attempts") or {}
    rates = section.get("pass_at_k") or {}
    mean = section.get("mean_reward")
    parts = [f"pass@{k} {100 * float(v):.1f}%" for k, v in rates.items() if k in ("1", max(rates, key=int))]
    parts.append(f"mean reward {mean:.3f}" if isinstance(mean, int | float) else "mean reward —")
    counts = " · ".join(f"{n(attempts.get(key))} {key}" for key in ("passed", "failed", "undecided"))
    return [f"Verification: {n(attempts.get('verified'))} attempts checked ({counts}) · " + " · ".join(parts)]


def token_capture_lines(tokens: Mapping[str, Any]) -> list[str]:
    """One line on the token data (tokens.jsonl), when the run captured it."""
    if "with_drift" not in tokens:
        return []
    missing = json_int(tokens.get("missing"))
    return [
        f"Token data ({tokens.get('api')}): {n(tokens.get('trajectories'))} trajectories · "
        f"{n(tokens.get('turns'))} turns · {n(tokens.get('prompt_ids'))} prompt ids · "
        f"{n(tokens.get('completion_ids'))} completion ids · {n(tokens.get('with_drift'))} with drift"
        + (f" · {n(missing)} missing" if missing else "")
    ]


def worker_loss_lines(losses: Mapping[str, Any]) -> list[str]:
    """Worker processes that died during the run (replaced; their prompts rerun)."""
    if not json_int(losses.get("losses")):
        return []
    codes = ", ".join(f"{code} x{n(count)}" for code, count in (losses.get("exit_codes") or {}).items())
    line = (
        f"Workers lost: {n(losses['losses'])} (exit codes {codes}), "
        f"replaced {n(losses.get('replacements'))}; prompt attempts lost: {n(losses.get('lost_attempts'))}"
    )
    given_up = losses.get("failed_prompts") or []
    if given_up:
        line += (
            f"; failed after --max_prompt_attempts={n(losses.get('max_prompt_attempts'))}: "
            f"prompts {', '.join(str(i) for i in given_up)}"
        )
    return [line]


def replaced_note(stats: Mapping[str, Any]) -> str:
    """Each worker's own peak is summed: with replacements among them (the dead one's peak and
    its replacement's never at once), the sum is more than were ever in flight together."""
    replacements = json_int((stats.get("worker_losses") or {}).get("replacements"))
    return f", {n(replacements)} of them replacements: an upper bound" if replacements else ""


def unfinished_lines(done: Mapping[str, Any]) -> list[str]:
    """The completion's units not started, interrupted in flight and missing from the output,
    each part counted and its first dataset rows named (with their samples, when a prompt has
    several): the rows and samples of `Completion.as_dict`, never a `prompt_index`."""
    lines = []
    several = json_int(done.get("samples_per_prompt")) > 1
    for key, label in (
        ("not_started", "Not started"),
        ("interrupted_in_flight", "Interrupted in flight"),
        ("missing_from_output", "Missing"),
    ):
        count, rows = json_int(done.get(key)), done.get(f"{key}_indices") or []
        if not count:
            continue
        samples = done.get(f"{key}_samples") or []
        named = [
            f"{row} ({_samples_of(samples[at])})" if several and at < len(samples) else str(row)
            for at, row in enumerate(rows)
        ]
        listed = sum(len(s) for s in samples) if several else len(rows)
        more = " …" if count > listed else ""
        unit = "attempts" if several else "prompts"
        lines.append(f"{label}: {n(count)} {unit} (dataset indices {', '.join(named)}{more})")
    return lines


def _samples_of(samples: Any) -> str:
    listed = [str(s) for s in samples] if isinstance(samples, list) else []
    return f"sample{'s' if len(listed) > 1 else ''} {', '.join(listed)}"
