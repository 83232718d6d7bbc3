"""Resume runs every prompt exactly once: repeated prompts run once per copy, a partial run is
finished whatever the new order or length of the dataset, failures are recorded and retried,
discards are recorded and never paid for again; prompt_index is unique and never changes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from agent.servers.endpoint_server import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.store import run_lock
from tests.support.batch import (
    BatchCLI,
    batch_prompts,
    human_prompt,
    prompts_dataset,
    read_json,
    read_jsonl,
    requested_prompts,
    tool_then_answer,
    trajectory_prompts,
    write_dataset,
)


@pytest.fixture
def cli(tmp_path: Path, sim_endpoint: SimulatedEndpoint) -> BatchCLI:
    return BatchCLI(tmp_path, sim_endpoint)


def test_repeats_run_per_copy_and_resume_survives_reorder_and_extension(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    dataset = cli.workdir / "prompts.jsonl"
    prompts_dataset(dataset, ["alpha", "beta", "alpha", "gamma", "delta", "epsilon"])
    first = cli.run(
        f"--dataset_file={dataset}", "--batch_size=2", "--run_name=re", "--max_samples=3", "--num_workers=2"
    )
    assert first.returncode == 0, first
    run_dir = cli.run_dir("re")
    assert trajectory_prompts(run_dir) == Counter({"alpha": 2, "beta": 1})
    assert requested_prompts(sim_endpoint) == Counter({"alpha": 2, "beta": 1})

    # The dataset is reordered and extended; the stale checkpoint's indices mean nothing now.
    prompts_dataset(dataset, ["epsilon", "delta", "gamma", "alpha", "beta", "alpha", "zeta"])
    sim_endpoint.clear_requests()
    second = cli.run(
        f"--dataset_file={dataset}", "--batch_size=2", "--run_name=re", "--resume", "--num_workers=2"
    )
    assert second.returncode == 0, second
    assert requested_prompts(sim_endpoint) == Counter(["epsilon", "delta", "gamma", "zeta"])
    expected = Counter({"alpha": 2, "beta": 1, "gamma": 1, "delta": 1, "epsilon": 1, "zeta": 1})
    assert trajectory_prompts(run_dir) == expected
    assert batch_prompts(run_dir) == expected
    checkpoint = read_json(run_dir / "checkpoint.json")
    assert checkpoint["completed_prompts"] == list(range(7))


def test_failures_are_recorded_and_retried_discards_recorded_and_not_rerun(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    sim_endpoint.script("will fail", [Turn(fault=EndpointFault(401, "invalid api key (simulated)"))])
    sim_endpoint.script("no thoughts", tool_then_answer(reasoning=False))
    dataset = prompts_dataset(cli.workdir / "p.jsonl", ["fine one", "will fail", "no thoughts", "fine two"])
    flags = (f"--dataset_file={dataset}", "--batch_size=2", "--run_name=ff", "--num_workers=2")
    first = cli.run(*flags)
    assert first.returncode == 1, first  # a failed prompt: the run is not done
    assert "--resume" in first.stderr
    run_dir = cli.run_dir("ff")
    assert trajectory_prompts(run_dir) == Counter(["fine one", "fine two"])
    failures = read_jsonl(run_dir / "failures.jsonl")
    assert [(f["prompt_index"], f["error_class"], f["attempt"]) for f in failures] == [(1, "auth", 1)]
    assert "invalid api key" in failures[0]["message"]
    discarded = read_jsonl(run_dir / "discarded.jsonl")
    assert [(d["prompt_index"], d["reason"]) for d in discarded] == [(2, "no_reasoning")]
    assert human_prompt(discarded[0]["entry"]) == "no thoughts"
    stats = read_json(run_dir / "statistics.json")
    assert stats["failures"] == {"auth": 1}
    assert stats["discarded"] == {"no_reasoning": 1} and stats["discarded_no_reasoning"] == 1

    sim_endpoint.clear_requests()
    second = cli.run(*flags, "--resume")
    assert second.returncode == 1, second
    assert requested_prompts(sim_endpoint) == Counter(["will fail"])  # not the discarded one
    failures = read_jsonl(run_dir / "failures.jsonl")
    assert [(f["error_class"], f["attempt"]) for f in failures] == [("auth", 1), ("auth", 2)]

    sim_endpoint.clear()  # the endpoint recovers
    sim_endpoint.clear_requests()
    third = cli.run(*flags, "--resume")
    assert third.returncode == 0, third
    assert requested_prompts(sim_endpoint) == Counter(["will fail"])
    assert trajectory_prompts(run_dir) == Counter(["fine one", "fine two", "will fail"])
    assert len(read_jsonl(run_dir / "discarded.jsonl")) == 1
    assert read_json(run_dir / "statistics.json")["failures"] == {}


def test_no_reasoning_endpoint_is_discarded_unless_kept(tmp_path: Path) -> None:
    prompts = ["plain a", "plain b", "plain c"]
    with SimulatedEndpoint(reasoning="none") as sim:
        cli = BatchCLI(tmp_path, sim)
        dataset = prompts_dataset(tmp_path / "p.jsonl", prompts)
        flags = (f"--dataset_file={dataset}", "--batch_size=2", "--num_workers=2")
        dropped = cli.run(*flags, "--run_name=dropped")
        assert dropped.returncode == 0, dropped
        run_dir = cli.run_dir("dropped")
        assert read_jsonl(run_dir / "trajectories.jsonl") == []
        assert sorted(human_prompt(d["entry"]) for d in read_jsonl(run_dir / "discarded.jsonl")) == prompts
        assert read_json(run_dir / "statistics.json")["discarded"] == {"no_reasoning": 3}

        sim.clear_requests()
        (run_dir / "statistics.json").unlink()
        resumed = cli.run(*flags, "--run_name=dropped", "--resume")
        assert resumed.returncode == 0, resumed
        assert sim.requests == []  # discarded prompts are not paid for again
        assert (run_dir / "statistics.json").exists()

        kept = cli.run(*flags, "--run_name=kept", "--keep_no_reasoning")
        assert kept.returncode == 0, kept
        assert trajectory_prompts(cli.run_dir("kept")) == Counter(prompts)
        assert not read_jsonl(cli.run_dir("kept") / "discarded.jsonl")
        reasoning = read_json(cli.run_dir("kept") / "statistics.json")["reasoning_statistics"]
        assert reasoning["turns_with_reasoning"] == 0 and reasoning["total_assistant_turns"] > 0


def indices_by_prompt(run_dir: Path) -> dict[str, int]:
    """prompt -> prompt_index of every trajectory and discard, asserting no prompt is there twice
    and no two prompts share an index."""
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    entries += [d["entry"] for d in read_jsonl(run_dir / "discarded.jsonl")]
    for entry in entries:  # the shard follows the index
        assert entry["metadata"]["batch_num"] == entry["prompt_index"] // 2, entry
    prompts = [human_prompt(e) for e in entries]
    assert len(set(prompts)) == len(prompts), Counter(prompts)
    numbers = [e["prompt_index"] for e in entries]
    assert len(set(numbers)) == len(numbers), sorted(numbers)
    return dict(zip(prompts, numbers, strict=True))


def failure_indices(run_dir: Path) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for record in read_jsonl(run_dir / "failures.jsonl"):
        found.setdefault(record["prompt_key"], set()).add(record["prompt_index"])
    return found


def test_prompt_index_is_unique_and_kept_across_resumes_of_an_edited_dataset(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    dataset = cli.workdir / "prompts.jsonl"
    prompts_dataset(dataset, [f"old {n}" for n in range(8)])
    sim_endpoint.script("old 3", [Turn(fault=EndpointFault(401, "invalid api key (simulated)"))])
    sim_endpoint.script("old 5", tool_then_answer(reasoning=False))  # discarded
    flags = (f"--dataset_file={dataset}", "--batch_size=2", "--run_name=ix", "--num_workers=2")
    assert cli.run(*flags, "--max_samples=6").returncode == 1  # "old 3" failed
    run_dir = cli.run_dir("ix")
    first = indices_by_prompt(run_dir)
    assert first == {f"old {n}": n for n in (0, 1, 2, 4, 5)}

    # Reordered, 5 prompts added (two at positions earlier prompts hold), no --max_samples; a new
    # prompt fails, so the run is resumed twice.
    new = [f"new {n}" for n in range(5)]
    order = [new[0], "old 5", "old 4", new[1], "old 3", "old 2", new[2], "old 1", "old 0", new[3]]
    prompts_dataset(dataset, [*order, "old 6", "old 7", new[4]])
    sim_endpoint.clear()
    sim_endpoint.script("new 2", [Turn(fault=EndpointFault(401, "invalid api key (simulated)"))])
    assert cli.run(*flags, "--resume").returncode == 1  # "new 2" failed
    second = indices_by_prompt(run_dir)
    assert {p: second[p] for p in first} == first  # earlier entries keep their index
    assert second["old 3"] == 3  # a retried failure keeps its failure record's index

    sim_endpoint.clear()
    third = cli.run(*flags, "--resume")
    assert third.returncode == 0, third
    final = indices_by_prompt(run_dir)
    assert {p: final[p] for p in second} == second
    assert set(final) == {*order, "old 6", "old 7", new[4]}
    assert trajectory_prompts(run_dir) == Counter(set(final) - {"old 5"})
    assert all(len(numbers) == 1 for numbers in failure_indices(run_dir).values())
    assert final["new 2"] == 6  # its failure record's index, which was its row's position
    assert (final["new 0"], final["new 1"]) == (7, 8)  # positions 0 and 3 were held: the first gaps
    assert read_json(run_dir / "checkpoint.json")["completed_prompts"] == list(range(13))  # no gap


def test_entries_for_prompts_no_longer_in_the_dataset_are_kept_and_counted_apart(cli: BatchCLI) -> None:
    # A line edited between runs: its new text runs, the old entry stays (paid for). The output
    # then held 4 entries where the summary and statistics spoke of 3, and nothing said why.
    dataset = cli.workdir / "prompts.jsonl"
    prompts_dataset(dataset, ["alpha", "beta", "gamma"])
    flags = (f"--dataset_file={dataset}", "--batch_size=2", "--run_name=edited")
    assert cli.run(*flags).returncode == 0
    prompts_dataset(dataset, ["alpha", "beta, edited", "gamma"])
    done = cli.run(*flags, "--resume")
    assert done.returncode == 0, done
    run_dir = cli.run_dir("edited")
    assert trajectory_prompts(run_dir) == Counter(["alpha", "beta", "beta, edited", "gamma"])
    stats = read_json(run_dir / "statistics.json")
    completion = stats["completion"]
    assert (completion["in_output"], completion["outside_dataset"], stats["trajectories"]["entries"]) == (
        3,
        1,
        4,
    )
    assert "also holds 1 entry, written earlier, for prompts not in the dataset as read now" in done.stderr
    assert cli.run(*flags, "--resume", "--max_samples=1").returncode == 0  # past --max_samples: the same
    assert read_json(run_dir / "statistics.json")["completion"]["outside_dataset"] == 3


def test_a_resume_with_another_distribution_or_batch_size_is_refused_before_anything_runs(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    """The entries written sampled from one distribution: a resume sampling from another would
    mix the two, and its run_config.json would no longer say what the first ones ran with. A
    resume that forgot the flag hears which one to pass, not what the default would need."""
    dataset = cli.workdir / "prompts.jsonl"
    prompts_dataset(dataset, ["alpha", "beta", "gamma"])
    flags = (f"--dataset_file={dataset}", "--batch_size=2", "--run_name=dist", "--max_samples=2")
    assert cli.run(*flags, "--distribution=terminal_only").returncode == 0
    recorded = (cli.run_dir("dist") / "run_config.json").read_bytes()
    sim_endpoint.clear_requests()
    for other in ("development", "default"):
        done = cli.run(*flags[:-1], "--resume", f"--distribution={other}", "--allow_missing_toolsets")
        assert done.returncode == 2, done
        assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
            "error: --resume: run dist ran with --distribution=terminal_only (run_config.json), "
            f"not {other}: one run samples one distribution; pass --distribution=terminal_only, "
            "or choose another --run_name"
        ], done
    other_size = [f if f != "--batch_size=2" else "--batch_size=7" for f in flags[:-1]]
    done = cli.run(*other_size, "--resume", "--distribution=terminal_only")  # shards by another size
    assert done.returncode == 2, done
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        "error: --resume: run dist ran with --batch_size=2 (run_config.json), not 7: one run has one "
        "batch size (batch_N.jsonl holds its prompts from N × batch size on); pass --batch_size=2, "
        "or choose another --run_name"
    ], done
    assert not sim_endpoint.requests
    assert (cli.run_dir("dist") / "run_config.json").read_bytes() == recorded
    resumed = cli.run(*flags[:-1], "--resume", "--distribution=terminal_only")
    assert resumed.returncode == 0, resumed
    assert trajectory_prompts(cli.run_dir("dist")) == Counter({"alpha": 1, "beta": 1, "gamma": 1})


def test_a_resume_with_another_batch_size_is_refused_with_its_records_gone(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    """Without run_config.json, statistics.json says the batch size; without either, the
    batch files do (batch_1.jsonl holds attempt 1: a batch size of 1). Once a resume with any
    batch size went on, and wrote new prompts into shards by another rule."""
    dataset = cli.workdir / "prompts.jsonl"
    prompts_dataset(dataset, ["alpha", "beta", "gamma", "delta"])
    flags = (f"--dataset_file={dataset}", "--run_name=gone", "--distribution=terminal_only")
    assert cli.run(*flags, "--batch_size=1", "--max_samples=3").returncode == 0
    run_dir = cli.run_dir("gone")
    sim_endpoint.clear_requests()
    said = []
    for record in ("run_config.json", "statistics.json"):
        (run_dir / record).unlink()
        done = cli.run(*flags, "--batch_size=2", "--resume")
        assert done.returncode == 2, done
        said += [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert said == [
        "error: --resume: run gone ran with --batch_size=1 (statistics.json), not 2: one run has one "
        "batch size (batch_N.jsonl holds its prompts from N × batch size on); pass --batch_size=1, "
        "or choose another --run_name",
        "error: --resume: run gone ran with another --batch_size than 2: batch_1.jsonl holds attempt 1, "
        "which it would put in batch 0; one run has one batch size (batch_N.jsonl holds its prompts "
        "from N × batch size on); pass the run's --batch_size, or choose another --run_name",
    ]
    assert not sim_endpoint.requests
    resumed = cli.run(*flags, "--batch_size=1", "--resume")
    assert resumed.returncode == 0, resumed
    assert sorted(path.name for path in run_dir.glob("batch_*.jsonl"))[-1] == "batch_3.jsonl"


def test_a_new_run_over_results_says_pass_resume_unless_a_runner_is_writing_them(cli: BatchCLI) -> None:
    """Exit 3 means locked: once a locked directory said 'pass --resume' (exit 2), and that
    advice then got exit 3."""
    prompts_dataset(cli.workdir / "d.jsonl", ["p"])
    run_dir = cli.run_dir("held")
    run_dir.mkdir(parents=True)
    (run_dir / "batch_0.jsonl").write_text("")
    flags = ("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=held")
    unlocked = cli.run(*flags)
    assert unlocked.returncode == 2 and "already holds results: pass --resume" in unlocked.stderr
    fd = run_lock.take(run_dir)  # as a runner holds it
    try:
        locked = cli.run(*flags)
    finally:
        run_lock.release(fd)
    assert locked.returncode == 3 and "is in use by another runner" in locked.stderr, locked


def test_a_resume_keeps_the_checkpoints_count_of_earlier_discards(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    """checkpoint.json's batch_stats: a resume counted earlier discards as processed and no
    longer as discarded (0 beside the discarded.jsonl record)."""
    sim_endpoint.script("plain", [Turn(content="An answer.")])  # no reasoning: discarded
    dataset = write_dataset(cli.workdir / "d.jsonl", [{"prompt": "kept"}, {"prompt": "plain"}])
    flags = (f"--dataset_file={dataset}", "--batch_size=2", "--run_name=disc", "--distribution=terminal_only")
    first = cli.run(*flags)
    assert first.returncode == 0, first
    expected = {"0": {"total": 2, "processed": 2, "discarded": 1, "failed": 0}}
    assert read_json(cli.run_dir("disc") / "checkpoint.json")["batch_stats"] == expected
    assert cli.run(*flags, "--resume").returncode == 0
    assert read_json(cli.run_dir("disc") / "checkpoint.json")["batch_stats"] == expected
    assert len(read_jsonl(cli.run_dir("disc") / "discarded.jsonl")) == 1
