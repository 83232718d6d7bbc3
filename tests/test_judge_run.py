"""A judged run end to end: `batch_runner.py --judge_model` as a subprocess against the
simulated endpoint over HTTP, local sandboxes. The endpoint answers right or wrong by its rule
(`[answer=…]` markers and the request's seed) and its `sim-judge` model judges by rule, so each
entry's judge check is known in advance; the judge's tokens and cost are the entry's too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI, human_prompt, read_json, read_jsonl, write_dataset
from tests.support.media import sim_prompt_tokens

RIGHT, WRONG, OWN, SKIP = (
    "Right [answer=42]",
    "Wrong [answer=42 right=1]",
    "Own [answer=7]",
    "Skip [answer=1]",
)
PRICES = (3.0, 15.0)  # USD per million prompt and completion tokens


def _requests_of(
    endpoint: SimulatedEndpoint, prompt: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the conversation's request bodies, the judge's) for `prompt`."""
    bodies = [r.body for r in endpoint.requests]
    task = f"<task>\n{prompt}\n</task>"
    judged = [b for b in bodies if b["model"] == "sim-judge" and task in b["messages"][1]["content"]]
    talked = [b for b in bodies if b["model"] != "sim-judge" and b["messages"][1]["content"] == prompt]
    return talked, judged


@pytest.mark.timeout(180)
def test_a_judged_run_records_each_verdict_and_counts_the_judge_in_usage_and_cost(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    (tmp_path / "rubric.md").write_text("Pass when the final answer is the task's answer.\n")
    write_dataset(
        tmp_path / "d.jsonl",
        [
            {"prompt": RIGHT},
            {"prompt": WRONG, "verify": {"answer": "42"}},
            {"prompt": OWN, "verify": {"judge": {"rubric": "Pass when it counts apples. [expect=apples]"}}},
            {"prompt": SKIP, "verify": {"judge": False}},
        ],
    )
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl",
        "--batch_size=4",
        "--run_name=j",
        "--sandbox=local",
        "--model_seed=0",  # every request sends seed 0: WRONG's rule is right only for seed 1
        "--judge_model=sim-judge",
        "--judge_rubric=rubric.md",
        f"--price_input={PRICES[0]}",
        f"--price_output={PRICES[1]}",
    )
    assert run.returncode == 0, run
    entries = {human_prompt(e): e for e in read_jsonl(cli.run_dir("j") / "trajectories.jsonl")}
    verdicts = {
        prompt: [(c["method"], c["passed"], c["score"]) for c in e["metadata"]["verification"]["checks"]]
        for prompt, e in entries.items()
        if "verification" in e["metadata"]
    }
    assert verdicts == {
        RIGHT: [("judge", True, 1.0)],
        WRONG: [("answer", False, 0.0), ("judge", False, 0.0)],
        OWN: [("judge", False, 0.0)],  # the row's rubric won over --judge_rubric's
    }
    assert "verification" not in entries[SKIP]["metadata"] and not _requests_of(sim_endpoint, SKIP)[1]
    judge = entries[RIGHT]["metadata"]["verification"]["checks"][0]
    assert judge["details"] == {
        "model": "sim-judge",
        "tries": 1,
        "rationale": "Judged by rule: the final answer contains '42'.",
    }
    for prompt in (RIGHT, WRONG, OWN):
        _assert_judge_counted(sim_endpoint, prompt, entries[prompt]["metadata"])
    statistics = read_json(cli.run_dir("j") / "statistics.json")
    requests = sim_endpoint.requests
    assert statistics["tokens"]["whole_run"]["prompt"] == sum(sim_prompt_tokens(r.body) for r in requests)
    # The judge's calls went through the run's limiter (its counts); api_calls counts the agent's.
    assert statistics["rate_limiting"]["calls"] == len(requests) == 8 + 3
    assert statistics["trajectories"]["api_calls"] == 8


def _assert_judge_counted(endpoint: SimulatedEndpoint, prompt: str, metadata: dict[str, Any]) -> None:
    talked, [judged] = _requests_of(endpoint, prompt)
    check = next(c for c in metadata["verification"]["checks"] if c["method"] == "judge")
    assert check["tokens"]["prompt"] == sim_prompt_tokens(judged)
    assert judged["response_format"]["type"] == "json_schema"
    usage = metadata["usage"]
    assert usage["prompt_tokens"] == sum(sim_prompt_tokens(b) for b in [*talked, judged])
    judge_cost = (check["tokens"]["prompt"] * PRICES[0] + check["tokens"]["completion"] * PRICES[1]) / 1e6
    assert check["cost_usd"] == pytest.approx(judge_cost)
    prompt = usage["prompt_tokens"] - check["tokens"]["prompt"]
    completion = usage["completion_tokens"] - check["tokens"]["completion"]
    expected = (prompt * PRICES[0] + completion * PRICES[1]) / 1e6 + judge_cost
    assert usage["cost_usd"] == pytest.approx(expected)


@pytest.mark.timeout(180)
def test_each_sample_is_right_or_wrong_by_its_seed_and_judged_so(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    prompt = "Samples [answer=42 right=0,2]"
    write_dataset(tmp_path / "d.jsonl", [{"prompt": prompt, "verify": {"answer": "42", "judge": True}}])
    (tmp_path / "rubric.md").write_text("Pass when the final answer is the task's answer.\n")
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl",
        "--batch_size=4",
        "--run_name=s",
        "--sandbox=local",
        "--samples_per_prompt=4",
        "--model_seed=0",  # sample s sends seed s
        "--judge_model=sim-judge",
        "--judge_rubric=rubric.md",
    )
    assert run.returncode == 0, run
    entries = read_jsonl(cli.run_dir("s") / "trajectories.jsonl")
    outcomes = {
        e["metadata"]["sample_index"]: [c["passed"] for c in e["metadata"]["verification"]["checks"]]
        for e in entries
    }
    assert outcomes == {0: [True, True], 1: [False, False], 2: [True, True], 3: [False, False]}
    judged = [r.body for r in sim_endpoint.requests if r.body["model"] == "sim-judge"]
    assert len(judged) == 4 and all("seed" not in body for body in judged)  # the judge is not sampled
