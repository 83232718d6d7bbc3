"""A `--verifier` whose outcome is known per sample (this module holds no tests): the dataset
row's metadata lists the sample indices that pass (`pass_samples`) and those whose check
errors (`error_samples`: it raises, so the attempt is undecided); every other sample fails."""

from __future__ import annotations

from agent.protocols.sandbox import Sandbox
from agent.protocols.verification import Attempt, Score


async def by_sample(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    if attempt.sample_index in attempt.metadata.get("error_samples", ()):
        raise RuntimeError(f"sample {attempt.sample_index} errors on purpose")
    passed = attempt.sample_index in attempt.metadata.get("pass_samples", ())
    return Score(passed, details={"sample": attempt.sample_index})
