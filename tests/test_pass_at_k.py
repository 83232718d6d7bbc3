"""pass@k, the unbiased estimator (Chen et al. 2021), and the `verification` section of
statistics.json counted from entries of the contract's shape: against a hand computation on
attempts with known outcomes; n < k, all passing, none passing, undecided attempts."""

from __future__ import annotations

from typing import Any

import pytest

from agent.store.statistics import RunStatistics
from agent.store.verification_stats import VerificationTally, mean_pass_at_k, pass_at_k

SUMMARY = dict(
    run_name="r",
    distribution="d",
    model="m",
    total_prompts=4,
    batch_size=1,
    total_batches=4,
    duration_seconds=1.0,
)


def entry(
    prompt: str,
    sample: int,
    passed: bool | None,
    reward: float | None,
    *,
    methods: tuple[str, ...] = ("answer",),
    toolsets: tuple[str, ...] = ("terminal",),
) -> dict[str, Any]:
    """An entry as the contract has it (`metadata.prompt_id`, `sample_index`, `reward`,
    `verification`); a check errors when `passed` is None."""
    checks = [
        {
            "method": method,
            "passed": passed,
            "score": reward,
            "details": {},
            "duration_s": 0.0,
            "cost_usd": 0.0,
            **({"error": "verifier_error: boom"} if passed is None else {}),
        }
        for method in methods
    ]
    key = prompt if sample == 0 else f"{prompt}#{sample}"
    metadata = {
        "prompt_key": key,
        "prompt_id": prompt,
        "sample_index": sample,
        "outcome": "completed",
        "reward": reward,
        "verification": {"passed": passed, "checks": checks},
    }
    return {"conversations": [], "metadata": metadata, "toolsets_used": list(toolsets), "completed": True}


# Known outcomes per prompt and sample: True passed, False failed, None undecided (a check errored).
OUTCOMES: dict[str, list[bool | None]] = {
    "a": [False, True, False, False],  # n=4, c=1
    "b": [False, False, False, False],  # n=4, c=0: none passes
    "c": [True, True, True, True],  # n=4, c=4: all pass
    "d": [True, None, False, True],  # one undecided: n=3, c=2
}
# By hand: pass@k = 1 - C(n-c, k) / C(n, k) per prompt, averaged over the prompts with n >= k.
#   a: 1/4, 1 - 3/6 = 1/2, 1 - 1/4 = 3/4, 1      b: 0, 0, 0, 0      c: 1, 1, 1, 1
#   d: 2/3, 1 - 0/3 = 1, 1, (n=3 < 4: not in pass@4)
HAND = {
    1: (1 / 4 + 0 + 1 + 2 / 3) / 4,
    2: (1 / 2 + 0 + 1 + 1) / 4,
    3: (3 / 4 + 0 + 1 + 1) / 4,
    4: (1 + 0 + 1) / 3,
}


def attempts() -> list[dict[str, Any]]:
    made = []
    for prompt, outcomes in OUTCOMES.items():
        for sample, passed in enumerate(outcomes):
            reward = None if passed is None else float(passed)
            made.append(entry(prompt, sample, passed, reward))
    return made


def test_the_estimator_matches_the_hand_computation() -> None:
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 3) == pytest.approx(0.75)
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(3, 2, 2) == 1.0  # fewer failures than k: a pass is always drawn
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # C(7,5)=21, C(10,5)=252


def test_all_and_none_passing() -> None:
    assert all(pass_at_k(5, 5, k) == 1.0 for k in range(1, 6))
    assert all(pass_at_k(5, 0, k) == 0.0 for k in range(1, 6))


def test_k_above_n_is_not_defined_and_such_prompts_are_left_out_of_the_mean() -> None:
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError):
        pass_at_k(0, 0, 1)
    rates = mean_pass_at_k({(1, 1): 1, (3, 0): 1})
    assert rates == {1: (0.5, 2), 2: (0.0, 1), 3: (0.0, 1)}  # k=2, 3: the n=1 prompt is left out
    assert mean_pass_at_k({}) == {}


def test_the_section_on_known_outcomes_equals_the_hand_computation() -> None:
    tally = VerificationTally()
    for made in attempts():
        tally.add(made, in_output=True)
    section = tally.section()
    assert section is not None
    assert section["attempts"] == {"verified": 16, "passed": 7, "failed": 8, "undecided": 1}
    assert section["samples_per_prompt"] == 4 and section["prompts"] == 4
    assert {int(k): v for k, v in section["pass_at_k"].items()} == pytest.approx(HAND, abs=1e-6)
    assert section["pass_at_k_prompts"] == {"1": 4, "2": 4, "3": 4, "4": 3}
    assert section["mean_reward"] == pytest.approx(7 / 15)  # the undecided attempt has no reward
    assert section["rewarded"] == 15
    assert section["reward_histogram"] == {"bins": 10, "counts": [8, 0, 0, 0, 0, 0, 0, 0, 0, 7]}
    assert section["by_method"] == {
        "answer": {"passed": 7, "failed": 8, "error": 1, "pass_rate": round(7 / 15, 6)}
    }


def test_undecided_attempts_are_no_samples() -> None:
    """A prompt whose every attempt errored has no decided sample: in no pass@k."""
    tally = VerificationTally()
    tally.add(entry("p", 0, None, None), in_output=True)
    tally.add(entry("q", 0, True, 1.0), in_output=True)
    section = tally.section()
    assert section is not None
    assert section["pass_at_k"] == {"1": 1.0} and section["pass_at_k_prompts"] == {"1": 1}
    assert section["attempts"]["undecided"] == 1 and section["mean_reward"] == 1.0


def test_unchecked_entries_and_a_users_own_reward_are_not_counted() -> None:
    stats = RunStatistics()
    plain = {"conversations": [], "metadata": {"prompt_key": "p", "reward": 0.9}}  # the row's own
    stats.add_entry(plain)
    assert "verification" not in stats.to_dict(**SUMMARY)  # no check applied: no section


def test_by_method_and_by_toolsets() -> None:
    tally = VerificationTally()
    tally.add(
        entry("p", 0, True, 1.0, methods=("answer", "command"), toolsets=("web", "terminal")), in_output=True
    )
    tally.add(entry("p", 1, False, 0.0, toolsets=("terminal", "web")), in_output=False)
    tally.add(entry("q", 0, None, 0.5, methods=("python",), toolsets=()), in_output=True)
    section = tally.section()
    assert section is not None
    assert section["by_method"]["command"] == {"passed": 1, "failed": 0, "error": 0, "pass_rate": 1.0}
    assert section["by_method"]["python"] == {"passed": 0, "failed": 0, "error": 1, "pass_rate": None}
    assert section["by_toolsets"] == {
        "terminal+web": {"passed": 1, "failed": 1, "undecided": 0, "pass_rate": 0.5, "mean_reward": 0.5},
        "(none)": {"passed": 0, "failed": 0, "undecided": 1, "pass_rate": None, "mean_reward": 0.5},
    }
    assert section["in_output"] == {"verified": 2, "passed": 1, "failed": 0, "undecided": 1}
    assert section["attempts"]["verified"] == 3


def test_statistics_counts_discarded_attempts_too() -> None:
    """An attempt --keep moved to discarded.jsonl is still an attempt of its prompt."""
    stats = RunStatistics()
    stats.add_entry(entry("p", 0, True, 1.0))
    stats.add_discarded_entry(entry("p", 1, False, 0.0))
    section = stats.to_dict(**SUMMARY)["verification"]
    assert section["pass_at_k"] == {"1": 0.5, "2": 1.0}
    assert section["in_output"]["verified"] == 1 and section["attempts"]["verified"] == 2
