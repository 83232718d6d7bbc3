"""The `verification` section of statistics.json: what the checks said of a run's attempts.

Counted from the entries themselves, as the merge streams the run directory at the end of every
invocation (`RunStatistics.add_entry`) and then the discarded entries whose prompt is not in
the output (`add_discarded_entry`): every invocation recounts every attempt on disk, so the
section stays true after `--resume`, a raised `--samples_per_prompt`, a changed `--keep` or a
re-score, and an attempt `--keep` moved to discarded.jsonl still counts (pass@k is about the
model's attempts, not about what was kept). An attempt is verified when its entry has a
`metadata.verification` object; failures (failures.jsonl) never are.

Memory: per prompt only its (decided samples, passed) pair, never an entry.

By toolsets: keyed by the attempt's sorted `toolsets_used` (each sample draws its own), with
attempt-level pass rate and mean reward, not pass@k: a prompt's samples under one combination
are too few for k > 1 to mean anything. The run has one `--distribution`, so no split by it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from agent.store.keys import split_key
from agent.store.tool_counts import TOOL_ROWS

REWARD_BINS = 10  # the reward histogram: [0, 0.1), [0.1, 0.2), ... [0.9, 1.0]
_VERDICTS = ("passed", "failed", "undecided")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of Chen et al. (2021) for one prompt: of `n` decided samples `c`
    passed; the chance that at least one of `k` drawn without replacement passes,
    1 - C(n-c, k) / C(n, k). Defined for 1 <= k <= n only (ValueError otherwise)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c})")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Mapping[tuple[int, int], int]) -> dict[int, tuple[float, int]]:
    """pass@k for each k from 1 to N (the largest n), averaged over the prompts with n >= k:
    {k: (pass@k, prompts averaged)}. `counts`: (n, c) -> prompts with those counts; prompts
    with n = 0 (no decided sample) count in none."""
    largest = max((n for n, _c in counts), default=0)
    result: dict[int, tuple[float, int]] = {}
    for k in range(1, largest + 1):
        total, prompts = 0.0, 0
        for (n, c), number in counts.items():
            if n >= k:
                total += pass_at_k(n, c, k) * number
                prompts += number
        result[k] = (total / prompts, prompts)
    return result


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def verdict(metadata: Mapping[str, Any]) -> str | None:
    """`passed`, `failed` or `undecided` (a check errored) of a verified entry; None when no
    check applied."""
    verification = metadata.get("verification")
    if not isinstance(verification, Mapping):
        return None
    passed = verification.get("passed")
    return "passed" if passed is True else "failed" if passed is False else "undecided"


def toolset_key(toolsets: Any) -> str:
    """An attempt's toolset combination, as statistics.json names it."""
    names = sorted({str(t) for t in toolsets}) if isinstance(toolsets, list) else []
    return "+".join(names) or "(none)"


class VerificationTally:
    """Counts of the verified attempts; `section` gives the statistics.json section (None when
    no attempt was verified)."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()  # verified, passed, failed, undecided, rewarded
        self.output: Counter[str] = Counter()  # the same, of the entries in the output
        self.reward_sum = 0.0
        self.histogram = [0] * REWARD_BINS
        self.prompts: dict[str, list[int]] = {}  # prompt id -> [decided samples, passed]
        self.methods: dict[str, Counter[str]] = {}  # method -> passed, failed, error
        self.toolsets: dict[str, Counter[str]] = {}  # combination -> verdicts, rewarded
        self.toolset_rewards: dict[str, float] = {}  # combination -> sum of its rewards

    def add(self, entry: Mapping[str, Any], *, in_output: bool) -> None:
        metadata = entry.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        result = verdict(metadata)
        if result is None:
            return
        reward = _number(metadata.get("reward"))
        for counts in (self.attempts, self.output) if in_output else (self.attempts,):
            counts["verified"] += 1
            counts[result] += 1
        name = toolset_key(entry.get("toolsets_used"))
        combination = self.toolsets.setdefault(name, Counter())
        combination[result] += 1
        if reward is not None:
            self.attempts["rewarded"] += 1
            self.reward_sum += reward
            self.histogram[min(max(int(reward * REWARD_BINS), 0), REWARD_BINS - 1)] += 1
            combination["rewarded"] += 1
            self.toolset_rewards[name] = self.toolset_rewards.get(name, 0.0) + reward
        self._add_checks(metadata["verification"].get("checks"))
        if result != "undecided":
            counts_of = self.prompts.setdefault(_prompt_id(metadata), [0, 0])
            counts_of[0] += 1
            counts_of[1] += result == "passed"

    def _add_checks(self, checks: Any) -> None:
        for check in checks if isinstance(checks, list) else ():
            if isinstance(check, Mapping):
                row = self.methods.setdefault(str(check.get("method")), Counter())
                passed = check.get("passed")
                undecided = check.get("error") is not None or passed is None
                row["error" if undecided else "true" if passed else "false"] += 1

    def section(self) -> dict[str, Any] | None:
        """The `verification` section of statistics.json."""
        if not self.attempts["verified"]:
            return None
        pairs = Counter((n, c) for n, c in self.prompts.values())
        rates = mean_pass_at_k(pairs)
        rewarded = self.attempts["rewarded"]
        return {
            "attempts": {key: self.attempts[key] for key in ("verified", *_VERDICTS)},
            "in_output": {key: self.output[key] for key in ("verified", *_VERDICTS)},
            "mean_reward": round(self.reward_sum / rewarded, 6) if rewarded else None,
            "rewarded": rewarded,
            "reward_histogram": {"bins": REWARD_BINS, "counts": list(self.histogram)},
            "prompts": len(self.prompts),
            "samples_per_prompt": max((n for n, _c in pairs), default=0),
            "pass_at_k": {str(k): round(rate, 6) for k, (rate, _p) in rates.items()},
            "pass_at_k_prompts": {str(k): prompts for k, (_r, prompts) in rates.items()},
            "by_method": {m: _method(row) for m, row in sorted(self.methods.items())},
            "by_toolsets": self._by_toolsets(),
        }

    def _by_toolsets(self) -> dict[str, Any]:
        """The TOOL_ROWS most tried combinations (a run samples few; the rest summed)."""
        ranked = sorted(self.toolsets.items(), key=lambda item: (-item[1].total(), item[0]))
        rewards = self.toolset_rewards
        rows = {name: _combination(row, rewards.get(name, 0.0)) for name, row in ranked[:TOOL_ROWS]}
        if len(ranked) > TOOL_ROWS:
            rest = sum((row for _name, row in ranked[TOOL_ROWS:]), Counter[str]())
            rest_reward = sum(rewards.get(name, 0.0) for name, _row in ranked[TOOL_ROWS:])
            rows["(other combinations)"] = _combination(rest, rest_reward)
        return rows


def _prompt_id(metadata: Mapping[str, Any]) -> str:
    """The prompt an attempt is a sample of: `prompt_id`, else the one its key names."""
    prompt_id = metadata.get("prompt_id")
    if isinstance(prompt_id, str) and prompt_id:
        return prompt_id
    return split_key(str(metadata.get("prompt_key") or ""))[0]


def _method(row: Counter[str]) -> dict[str, Any]:
    decided = row["true"] + row["false"]
    rate = round(row["true"] / decided, 6) if decided else None
    return {"passed": row["true"], "failed": row["false"], "error": row["error"], "pass_rate": rate}


def _combination(row: Counter[str], reward_sum: float) -> dict[str, Any]:
    decided = row["passed"] + row["failed"]
    rewarded = row["rewarded"]
    return {
        **{key: row[key] for key in _VERDICTS},
        "pass_rate": round(row["passed"] / decided, 6) if decided else None,
        "mean_reward": round(reward_sum / rewarded, 6) if rewarded else None,
    }
