"""What a user reads about rewards, from a real run: `batch_runner.py` as a subprocess against
the simulated endpoint over HTTP, `--samples_per_prompt=2` then `--resume` with 3 (only the new
samples run), each attempt checked by a verifier whose outcome is known per sample. The
statistics.json `verification` section equals the hand computation and the run directory's
data after each invocation; the report has the reward histogram, the pass@k curve and the
pass/fail filter; the exports' reward columns load with `datasets`; the Hub card and the run
summary state the pass rates. A run without checks has none of it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.publish.card import card_text
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, Finished, read_json, read_jsonl, write_dataset
from tests.support.report import CHROMIUM, CHROMIUM_ARGS, missing, page_data

datasets = pytest.importorskip("datasets")

VERIFIER = "--verifier=tests.support.sample_verifier:by_sample"
# prompt -> (samples that pass, samples whose check errors); "Quiet" has no reasoning, so the
# no_reasoning filter discards its attempts: they count as attempts, not in the output.
ROWS = {
    "Solve all": ([0, 1, 2], []),
    "Solve none": ([], []),
    "Solve one": ([1], []),
    "Solve with an error": ([0], [2]),
    "Quiet": ([2], []),
}
# By hand, pass@k = 1 - C(n-c, k) / C(n, k) per prompt (undecided attempts are no samples),
# averaged over the prompts with n >= k.
# N=2: (n, c) = (2,2) (2,0) (2,1) (2,1) (2,0): pass@1 = (1+0+.5+.5+0)/5, pass@2 = (1+0+1+1+0)/5
# N=3: (3,3) (3,0) (3,1) (2,1) (3,1): pass@1 = (1+0+1/3+1/2+1/3)/5, pass@2 = (1+0+2/3+1+2/3)/5,
#      pass@3 = (1+0+1+1)/4 (the prompt with 2 decided samples left out)
HAND = {
    2: {"1": 0.4, "2": 0.6},
    3: {"1": (1 + 1 / 3 + 1 / 2 + 1 / 3) / 5, "2": (1 + 2 / 3 + 1 + 2 / 3) / 5, "3": 0.75},
}
ATTEMPTS = {
    2: {"verified": 10, "passed": 4, "failed": 6, "undecided": 0},
    3: {"verified": 15, "passed": 6, "failed": 8, "undecided": 1},
}
EXPORTS = {"parquet": "trajectories.parquet", "openai": "openai.jsonl", "sharegpt": "sharegpt.jsonl"}


@dataclass
class Rewarded:
    cli: BatchCLI
    run_dir: Path
    first: dict[str, Any]  # statistics.json after the first invocation
    first_attempts: list[dict[str, Any]]
    resumed: Finished


def attempts(run_dir: Path) -> list[dict[str, Any]]:
    """Every attempt on disk: the output, and the discarded entries whose key is not in it."""
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    keys = {e["metadata"]["prompt_key"] for e in entries}
    discarded = run_dir / "discarded.jsonl"
    records = read_jsonl(discarded) if discarded.exists() else []
    return entries + [r["entry"] for r in records if r["prompt_key"] not in keys]


def verdicts(made: list[dict[str, Any]]) -> dict[str, int]:
    """Counted from the data, independently of the statistics code."""
    counts = dict.fromkeys(("verified", "passed", "failed", "undecided"), 0)
    for entry in made:
        passed = entry["metadata"]["verification"]["passed"]
        counts["verified"] += 1
        counts[{True: "passed", False: "failed", None: "undecided"}[passed]] += 1
    return counts


@pytest.fixture(scope="module")
def rewarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rewarded]:
    with SimulatedEndpoint() as endpoint:
        for prompt in ROWS:
            reasoning = None if prompt == "Quiet" else "I will answer."
            endpoint.script(prompt, [Turn(content="Done.", reasoning=reasoning)])
        cli = BatchCLI(tmp_path_factory.mktemp("rewards"), endpoint)
        rows = [
            {"prompt": p, "metadata": {"pass_samples": ok, "error_samples": bad}}
            for p, (ok, bad) in ROWS.items()
        ]
        write_dataset(cli.workdir / "d.jsonl", rows)
        flags = ("--dataset_file=d.jsonl", "--run_name=rw", "--batch_size=4", "--sandbox=local", VERIFIER)
        first = cli.run(*flags, "--samples_per_prompt=2")
        assert first.returncode == 0, first
        run_dir = cli.run_dir("rw")
        stats, made = read_json(run_dir / "statistics.json"), attempts(run_dir)
        resumed = cli.run(*flags, "--samples_per_prompt=3", "--resume", f"--export={','.join(EXPORTS)}")
        assert resumed.returncode == 0, resumed
        yield Rewarded(cli, run_dir, stats, made, resumed)


@pytest.mark.parametrize("samples", [2, 3])
def test_the_verification_section_is_true_against_the_data(rewarded: Rewarded, samples: int) -> None:
    """After the first invocation and after the resume that raised the samples."""
    if samples == 2:
        stats, made = rewarded.first, rewarded.first_attempts
    else:
        stats, made = read_json(rewarded.run_dir / "statistics.json"), attempts(rewarded.run_dir)
    section = stats["verification"]
    assert len(made) == samples * len(ROWS)  # every (prompt, sample) once
    assert section["attempts"] == ATTEMPTS[samples] == verdicts(made)
    assert section["pass_at_k"] == pytest.approx(HAND[samples], abs=1e-6)
    assert section["samples_per_prompt"] == samples and section["prompts"] == len(ROWS)
    in_output = [e for e in made if "no_reasoning" not in (e["metadata"].get("discard_reasons") or [])]
    output = read_jsonl(rewarded.run_dir / "trajectories.jsonl") if samples == 3 else None
    if output is not None:
        assert section["in_output"] == verdicts(output)
        assert len(output) == len(in_output) == 4 * samples  # "Quiet"'s attempts were discarded
    rewards = [e["metadata"]["reward"] for e in made if e["metadata"]["reward"] is not None]
    assert section["rewarded"] == len(rewards)
    assert section["mean_reward"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
    assert sum(section["reward_histogram"]["counts"]) == len(rewards)
    python = section["by_method"]["python"]
    assert (python["passed"], python["failed"], python["error"]) == tuple(
        ATTEMPTS[samples][k] for k in ("passed", "failed", "undecided")
    )
    assert section["by_toolsets"]["file+terminal"]["passed"] == ATTEMPTS[samples]["passed"]


def test_the_run_summary_has_the_pass_rates(rewarded: Rewarded) -> None:
    printed = rewarded.resumed.stdout + rewarded.resumed.stderr
    # the panel wraps its lines at the terminal's width: read it as one text
    text = " ".join(line.strip("│ ") for line in printed.splitlines())
    line = text[text.index("Verification:") :]
    assert "15 attempts checked (6 passed · 8 failed · 1 undecided)" in line
    assert "pass@1 43.3%" in line and "pass@3 75.0%" in line and "mean reward 0.429" in line


def test_the_report_has_the_histogram_the_curve_and_the_filter(rewarded: Rewarded) -> None:
    html = (rewarded.run_dir / "report.html").read_text()
    assert 'data-plot="rewards"' in html and 'data-plot="pass_at_k"' in html
    assert 'id="filter-verdict"' in html
    assert "pass@3 75.0%" in html  # the summary's pass rates
    curve = html.split('data-plot="pass_at_k"')[1].split("</svg>")[0]
    assert "pass@k: 75 at 3" in curve  # the curve's last point, in percent
    bars = html.split('data-plot="rewards"')[1].split("</svg>")[0]
    assert "0.0–0.1: 8</title>" in bars and "0.9–1.0: 6</title>" in bars
    shown = Counter(e["verdict"] for e in page_data(html)["entries"])
    assert shown == {"passed": 6, "failed": 8, "undecided": 1}  # discarded attempts too
    rewards = {e["reward"] for e in page_data(html)["entries"]}
    assert rewards == {0.0, 1.0, None}


def test_the_exports_carry_the_reward_columns(rewarded: Rewarded, tmp_path: Path) -> None:
    entries = {e["metadata"]["prompt_key"]: e for e in read_jsonl(rewarded.run_dir / "trajectories.jsonl")}
    for name, file in EXPORTS.items():
        path = rewarded.run_dir / "export" / file
        kind = "parquet" if name == "parquet" else "json"
        loaded = datasets.load_dataset(
            kind, data_files=str(path), cache_dir=str(tmp_path / name), split="train"
        )
        assert loaded.num_rows == len(entries), name
        for row in loaded:
            metadata = entries[row["prompt_key"]]["metadata"]
            assert (row["prompt_id"], row["sample_index"]) == (
                metadata["prompt_id"],
                metadata["sample_index"],
            )
            assert row["reward"] == metadata["reward"] and row["passed"] is metadata["verification"]["passed"]
            assert json.loads(row["verification"]) == metadata["verification"]
            own = json.loads(row["metadata"])
            assert {"pass_samples", "error_samples"} <= set(own), name  # the row's own metadata
            assert not set(own) & {"reward", "verification", "prompt_id", "sample_index"}, name


def test_the_hub_card_states_the_pass_rates(rewarded: Rewarded) -> None:
    stats = read_json(rewarded.run_dir / "statistics.json")
    card = card_text("me/rw", stats, {"openai": "openai.parquet"}, 12, "mit")
    assert "## Pass rates" in card
    assert "| pass@1 | 43.3% |" in card and "| pass@3 | 75.0% |" in card
    assert "| mean reward | 0.429 |" in card and "| attempts checked | 15 |" in card


def test_a_run_without_checks_shows_no_rewards(tmp_path: Path, sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.script("Plain", [Turn(content="Done.", reasoning="Easy.")])
    write_dataset(tmp_path / "d.jsonl", [{"prompt": "Plain", "metadata": {"reward": 0.9}}])
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl", "--run_name=n", "--batch_size=1", "--sandbox=local", "--export=parquet"
    )
    assert run.returncode == 0, run
    run_dir = cli.run_dir("n")
    stats = read_json(run_dir / "statistics.json")
    assert "verification" not in stats and "Verification:" not in run.stdout + run.stderr
    html = (run_dir / "report.html").read_text()
    assert 'data-plot="rewards"' not in html and 'id="filter-verdict"' not in html
    assert "## Pass rates" not in card_text("me/n", stats, {}, 1, "mit")
    loaded = datasets.load_dataset(
        "parquet", data_files=str(run_dir / "export" / "trajectories.parquet"), cache_dir=str(tmp_path / "c")
    )["train"]
    row = loaded[0]
    assert (row["reward"], row["passed"], row["verification"]) == (None, None, None)
    assert json.loads(row["metadata"])["reward"] == 0.9  # the row's own reward stays in its metadata


def test_the_browser_filters_by_pass_and_fail_in_chromium(rewarded: Rewarded) -> None:
    """The filter in real headless Chromium: each verdict shows exactly its attempts; an
    opened attempt shows its verdict and reward; the plots have data marks; no script error."""
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install -e '.[dev]')")
    errors: list[str] = []
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = chromium.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto((rewarded.run_dir / "report.html").as_uri())
        marks = "(name) => document.querySelectorAll(`svg[data-plot=${name}] .mark`).length"
        assert (
            page.evaluate(marks, "rewards") == 10 and page.evaluate(marks, "pass_at_k") == 4
        )  # line + 3 dots
        options = page.eval_on_selector_all("#filter-verdict option", "(os) => os.map((o) => o.value)")
        assert options == ["", "failed", "passed", "undecided"]
        for verdict, count in (("passed", 6), ("failed", 8), ("undecided", 1)):
            page.select_option("#filter-verdict", verdict)
            assert page.inner_text("#entry-count") == f"{count} of 15 sampled entries"
        page.select_option("#filter-verdict", "passed")
        page.click("#entry-list tbody tr")
        assert "passed · reward 1" in page.locator("#viewer .entry-head").inner_text()
        chromium.close()
    assert errors == []
