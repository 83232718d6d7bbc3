"""Filters re-applied on resume, said out loud; the cost of a run and its budget (--max_cost).

Real runner subprocesses: the simulated endpoint (no reasoning at all, or its token counts
priced by a price table), or an endpoint server whose replies carry a provider cost
(`usage.cost`, as OpenRouter sends it) and cached prompt tokens.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent.servers.endpoint_server import EndpointServer
from agent.servers.simulated.replies import Turn, build_completion
from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    API_KEY,
    BatchCLI,
    batch_prompts,
    read_json,
    read_jsonl,
    trajectory_prompts,
    write_dataset,
)

PROMPTS = [f"Cost prompt {i}" for i in range(20)]


def dataset(tmp_path: Path, prompts: list[str]) -> None:
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])


def flat(text: str) -> str:
    """Console text with the summary panel's borders and wrapping undone."""
    return " ".join(text.replace("│", " ").split())


def test_a_filter_that_dropped_everything_says_so_and_resume_recovers_without_calls(tmp_path: Path) -> None:
    prompts = [f"Silent {i}" for i in range(5)]
    dataset(tmp_path, prompts)
    flags = ("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=nr", "--num_workers=1")
    with SimulatedEndpoint(reasoning="none") as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        first = cli.run(*flags)
        assert first.returncode == 0, first  # discarded by a filter is an outcome
        text = flat(first.stderr)
        assert (
            "the no_reasoning filter discarded 5 of 5 entries (100%); --keep_no_reasoning keeps them" in text
        )
        run_dir = cli.run_dir("nr")
        assert trajectory_prompts(run_dir) == Counter()
        # A resume with nothing to run still says what the output lacks: the whole run's discards.
        idle = cli.run(*flags, "--resume")
        assert idle.returncode == 0, idle
        assert "the no_reasoning filter discarded 5 of 5 entries (100%)" in flat(idle.stderr)
        assert "Next: rerun with --resume --keep_no_reasoning to keep the 5 no_reasoning" in flat(idle.stderr)

        endpoint.clear_requests()
        kept = cli.run(*flags, "--resume", "--keep_no_reasoning")
        assert kept.returncode == 0, kept
        assert endpoint.requests == []  # recovered from discarded.jsonl, no model call
        assert trajectory_prompts(run_dir) == Counter(prompts)
        stats = read_json(run_dir / "statistics.json")
        assert stats["recovered_discards"] == {"no_reasoning": 5}
        assert stats["trajectories"]["entries"] == 5
        assert "Moved from discarded.jsonl into the output (filter off): no_reasoning 5" in flat(kept.stderr)

        again = cli.run(*flags, "--resume", "--keep_no_reasoning")
        assert again.returncode == 0, again
        assert endpoint.requests == []
        assert batch_prompts(run_dir) == Counter(prompts)  # exactly once: not appended again
        assert read_json(run_dir / "statistics.json")["recovered_discards"] == {}

        refiltered = cli.run(*flags, "--resume")  # the filter on again: all 5 move back, and it says so
        assert refiltered.returncode == 0, refiltered
        assert "the no_reasoning filter discarded 5 of 5 entries (100%)" in flat(refiltered.stderr)
        warnings = read_json(run_dir / "statistics.json")["filter_warnings"]
        assert [(w["reason"], w["discarded"], w["entries"]) for w in warnings] == [("no_reasoning", 5, 5)]


def test_the_filter_note_counts_discards_and_entries_of_one_scope(tmp_path: Path) -> None:
    """A resume over fewer rows (--max_samples=1) once set the run's 2 discards against the 1
    entry of its window: "discarded 2 of 1 entries (200%)". Both are the run directory's now."""
    dataset(tmp_path, ["Kept 0", "Plain 1", "Plain 2"])
    flags = ("--dataset_file=d.jsonl", "--batch_size=3", "--run_name=scope", "--num_workers=1")
    with SimulatedEndpoint() as endpoint:
        for prompt in ("Plain 1", "Plain 2"):
            endpoint.script(prompt, [Turn(content="An answer.")])  # no reasoning: discarded
        cli = BatchCLI(tmp_path, endpoint)
        assert cli.run(*flags).returncode == 0
        narrowed = cli.run(*flags, "--resume", "--max_samples=1")
    assert narrowed.returncode == 0, narrowed
    assert "the no_reasoning filter discarded 2 of 3 entries (67%)" in flat(narrowed.stderr), narrowed
    warnings = read_json(cli.run_dir("scope") / "statistics.json")["filter_warnings"]
    assert [(w["discarded"], w["entries"]) for w in warnings] == [(2, 3)]


def test_cost_from_a_price_table_per_entry_and_per_run(tmp_path: Path) -> None:
    dataset(tmp_path, PROMPTS)
    flags = ("--dataset_file=d.jsonl", "--batch_size=5", "--run_name=priced", "--num_workers=2")
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        done = cli.run(*flags, "--price_input=3", "--price_output=15")
    assert done.returncode == 0, done
    run_dir = cli.run_dir("priced")
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(entries) == 20
    expected = 0.0
    for entry in entries:
        usage = entry["metadata"]["usage"]
        cost = (usage["prompt_tokens"] * 3 + usage["completion_tokens"] * 15) / 1_000_000
        assert usage["cost_usd"] == pytest.approx(cost, abs=1e-10)
        expected += cost
    cost_stats = read_json(run_dir / "statistics.json")["cost"]
    assert cost_stats["this_invocation_usd"] == pytest.approx(expected, abs=1e-6)
    assert cost_stats["merged_output_usd"] == pytest.approx(expected, abs=1e-6)
    assert f"Cost this run: ${round(expected, 6):,.6f}" in flat(done.stderr)


def test_without_prices_the_entries_keep_their_bytes(tmp_path: Path) -> None:
    dataset(tmp_path, PROMPTS[:2])
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        done = cli.run("--dataset_file=d.jsonl", "--batch_size=5", "--run_name=plain", "--num_workers=1")
    assert done.returncode == 0, done
    for entry in read_jsonl(cli.run_dir("plain") / "trajectories.jsonl"):
        assert list(entry["metadata"]["usage"]) == [
            "prompt_tokens",
            "completion_tokens",
            "reasoning_tokens",
            "total_tokens",
        ]
    assert read_json(cli.run_dir("plain") / "statistics.json")["cost"]["this_invocation_usd"] is None


def provider(call_cost: float, delay: float = 0.0, tool_turns: int = 1) -> EndpointServer:
    """An endpoint whose every reply says what it cost (`usage.cost`) and that 10 prompt
    tokens came from the cache: `tool_turns` terminal calls first, then the answer (each after
    `delay` s)."""

    async def respond(body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(delay)
        turns = sum(m.get("role") == "assistant" for m in body.get("messages") or [])
        answered = turns >= tool_turns
        call = (("terminal", json.dumps({"command": "echo hi"})),)
        turn = (
            Turn(content="Done.", reasoning="Think.")
            if answered
            else Turn(reasoning="Plan.", tool_calls=call)
        )
        completion = build_completion(body, turn, "sim-model")
        completion["usage"]["cost"] = call_cost
        completion["usage"]["prompt_tokens_details"] = {"cached_tokens": 10}
        return completion

    return EndpointServer(respond)


def provider_flags(
    tmp_path: Path, server: EndpointServer, run_name: str, prompts: list[str] = PROMPTS
) -> tuple[str, ...]:
    dataset(tmp_path, prompts)
    return (
        "--dataset_file=d.jsonl",
        "--batch_size=5",
        f"--run_name={run_name}",
        f"--base_url={server.base_url}",
        f"--api_key={API_KEY}",
    )


def test_the_providers_cost_wins_over_the_price_table(tmp_path: Path) -> None:
    with provider(0.00125) as server:
        flags = provider_flags(tmp_path, server, "billed")
        done = BatchCLI(tmp_path).run(*flags, "--num_workers=2", "--price_input=1000", "--price_output=1000")
    assert done.returncode == 0, done
    run_dir = BatchCLI(tmp_path).run_dir("billed")
    for entry in read_jsonl(run_dir / "trajectories.jsonl"):
        assert entry["metadata"]["usage"]["cost_usd"] == pytest.approx(0.0025)  # two calls
        assert entry["metadata"]["usage"]["cached_tokens"] == 20
    assert read_json(run_dir / "statistics.json")["cost"]["this_invocation_usd"] == pytest.approx(0.05)


@pytest.mark.parametrize("count", [20, 6])  # more jobs than the queue holds, and fewer
def test_max_cost_stops_new_prompts_exits_1_and_resume_finishes(tmp_path: Path, count: int) -> None:
    # $0.001 a call, two calls a prompt, a $0.005 budget: the fifth call (the first of the
    # third prompt) reaches it; no model call starts after that, so the third prompt fails as
    # `budget`, no new prompt starts, and --resume runs the rest.
    cli, prompts = BatchCLI(tmp_path), PROMPTS[:count]
    with provider(0.001, delay=0.1) as server:
        flags = provider_flags(tmp_path, server, "budget", prompts)
        flags += ("--num_workers=1", "--max_inflight=1")
        stopped = cli.run(*flags, "--max_cost=0.005")
        assert stopped.returncode == 1, stopped
        run_dir = cli.run_dir("budget")
        stats = read_json(run_dir / "statistics.json")
        assert stats["budget"]["reached"] is True and stats["budget"]["max_cost_usd"] == 0.005
        assert stats["completion"]["in_output"] == 2 and stats["completion"]["failed"] == 1
        assert stats["completion"]["not_started"] == count - 3
        assert stats["cost"]["this_invocation_usd"] == pytest.approx(0.005)
        last = stopped.stderr.rstrip().splitlines()[-1]
        assert last.endswith(
            "(--max_cost reached). Next: rerun with --resume and a higher --max_cost to run them."
        ), stopped
        assert [f["error_class"] for f in read_jsonl(run_dir / "failures.jsonl")] == ["budget"]

        resumed = cli.run(*flags, "--resume")
        assert resumed.returncode == 0, resumed
    assert batch_prompts(run_dir) == Counter(prompts)
    assert trajectory_prompts(run_dir) == Counter(prompts)


def test_max_cost_counts_every_model_call_and_resume_completes_the_cut_prompts(tmp_path: Path) -> None:
    """Six calls a prompt at $0.001 each, four calls in flight over two workers, $0.01 budget.
    The bound: every call starts on a permit the hub grants only while the answered calls it
    has counted cost less than the budget, so the calls that end after it was reached are
    those holding permits then, no more than the in-flight limit: spend <= budget +
    max_inflight x (one call's cost) = $0.014. Before, a prompt in flight ran all its calls:
    $0.036 spent, exit 0 once they were done."""
    cli, prompts, budget, inflight = BatchCLI(tmp_path), PROMPTS[:12], 0.01, 4
    with provider(0.001, delay=0.05, tool_turns=5) as server:
        flags = provider_flags(tmp_path, server, "per_call", prompts)
        flags += ("--num_workers=2", f"--max_inflight={inflight}", "--max_turns=10")
        stopped = cli.run(*flags, f"--max_cost={budget}")
        assert stopped.returncode == 1, stopped
        run_dir = cli.run_dir("per_call")
        stats = read_json(run_dir / "statistics.json")
        spent = stats["cost"]["this_invocation_usd"]
        assert budget <= spent <= budget + inflight * 0.001 + 1e-9, spent
        cut = read_jsonl(run_dir / "failures.jsonl")
        assert cut and {f["error_class"] for f in cut} == {"budget"}, cut
        assert "--max_cost reached" in stopped.stderr and "a higher --max_cost" in stopped.stderr
        assert stats["completion"]["in_output"] + len(cut) + stats["completion"]["not_started"] == 12

        resumed = cli.run(*flags, "--resume", "--max_cost=1")
        assert resumed.returncode == 0, resumed
    assert batch_prompts(run_dir) == Counter(prompts)  # each prompt once, cut ones included
    assert trajectory_prompts(run_dir) == Counter(prompts)
