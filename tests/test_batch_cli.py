"""The batch runner's command line, end to end: the spec's Quick Start, every routing and
reasoning flag reaching the endpoint, `--list_distributions`, up-front validation (one clear
line, non-zero exit, nothing spent) and dataset line errors."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import toolsets
from agent.cli.flags import BATCH
from agent.protocols import ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint
from model_tools import toolset_availability
from tests.support.batch import (
    API_KEY,
    BatchCLI,
    Finished,
    human_prompt,
    prompts_dataset,
    read_json,
    read_jsonl,
    requested_prompts,
    write_dataset,
)
from tests.support.cli import assert_lists_every_flag


@pytest.fixture
def cli(tmp_path: Path, sim_endpoint: SimulatedEndpoint) -> BatchCLI:
    return BatchCLI(tmp_path, sim_endpoint)


def run_at_once(cli: BatchCLI, argvs: dict[str, list[str]]) -> dict[str, Finished]:
    """Each command line in its own runner process, all started before any is awaited."""
    procs = {
        key: subprocess.Popen(
            argv, cwd=cli.workdir, env=cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for key, argv in argvs.items()
    }
    runs = {}
    for key, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        runs[key] = Finished(proc.returncode, out.decode(), err.decode())
    return runs


def error_lines(run: Finished) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.strip()]


# ---------------------------------------------------------------- Quick Start


def test_quick_start_run_then_resume_as_written(cli: BatchCLI, sim_endpoint: SimulatedEndpoint) -> None:
    prompts = [f"Quick start prompt {i}: write a haiku about {i}" for i in range(12)]
    prompts_dataset(cli.workdir / "data" / "prompts.jsonl", prompts)
    # Without --output_dir: the spec's layout, data/<run_name>/ under the working directory.
    first = cli.run(
        "--dataset_file=data/prompts.jsonl",
        "--batch_size=10",
        "--run_name=my_first_run",
        "--model=anthropic/claude-sonnet-4.6",
        "--num_workers=4",
        output=False,
    )
    assert first.returncode == 0, first
    run_dir = cli.workdir / "data" / "my_first_run"
    assert sorted(p.name for p in run_dir.glob("batch_*.jsonl")) == ["batch_0.jsonl", "batch_1.jsonl"]
    assert len(read_jsonl(run_dir / "batch_0.jsonl")) == 10
    assert len(read_jsonl(run_dir / "batch_1.jsonl")) == 2
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == sorted(prompts)
    assert {e["metadata"]["model"] for e in entries} == {"anthropic/claude-sonnet-4.6"}
    assert {r.body["model"] for r in sim_endpoint.requests} == {"anthropic/claude-sonnet-4.6"}
    checkpoint = read_json(run_dir / "checkpoint.json")
    assert set(checkpoint) == {"run_name", "completed_prompts", "batch_stats", "last_updated"}
    assert checkpoint["run_name"] == "my_first_run"
    assert checkpoint["completed_prompts"] == list(range(12))
    assert read_json(run_dir / "statistics.json")["total_prompts"] == 12

    # The resume command as written (no --model), on a finished run: nothing is re-run,
    # yet the merge and the statistics are redone.
    (run_dir / "trajectories.jsonl").unlink()
    (run_dir / "statistics.json").unlink()
    sim_endpoint.clear_requests()
    again = cli.run(
        "--dataset_file=data/prompts.jsonl",
        "--batch_size=10",
        "--run_name=my_first_run",
        "--resume",
        output=False,
    )
    assert again.returncode == 0, again
    assert sim_endpoint.requests == []
    assert sorted(human_prompt(e) for e in read_jsonl(run_dir / "trajectories.jsonl")) == sorted(prompts)
    stats = read_json(run_dir / "statistics.json")
    assert stats["trajectories"]["entries"] == 12
    assert stats["this_invocation"]["processed"] == 0


def test_list_distributions_prints_every_distribution_with_availability(cli: BatchCLI) -> None:
    run = cli.run("--list_distributions", output=False)
    assert run.returncode == 0, run
    lines = run.stdout.splitlines()
    available = toolset_availability(ToolConfig(artifacts_dir="run"))  # a run saves images there
    assert len(toolsets.DISTRIBUTIONS) == 17
    for name, dist in toolsets.DISTRIBUTIONS.items():
        start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}: "))
        block = lines[start + 1 : start + 1 + len(dist.toolsets)]
        for toolset, percent in dist.toolsets.items():
            row = next(line for line in block if line.split()[0] == toolset)
            assert f"{percent}%" in row.split(), row
            assert ("(unavailable)" in row) == (available[toolset] is not None), row
    assert "Sandbox backends on this machine:" in lines
    assert any(line.split()[:2] == ["local", "available"] for line in lines)


def test_routing_reasoning_and_prompt_flags_reach_the_endpoint(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts_dataset(cli.workdir / "prompts.jsonl", ["Route me", "Route me too"])
    prefill = [{"role": "user", "content": "PREFILL-Q"}, {"role": "assistant", "content": "PREFILL-A"}]
    (cli.workdir / "prefill.json").write_text(json.dumps(prefill))
    run = cli.run(
        "--dataset_file=prompts.jsonl",
        "--batch_size=1",
        "--run_name=2024",  # Fire hands this over as an int
        "--api_dialect=openrouter",
        "--providers_allowed=anthropic,openai",  # Fire hands this over as a tuple
        "--providers_ignored=together,deepinfra",
        "--providers_order=openai,anthropic",
        "--provider_sort=price",
        "--reasoning_effort=high",
        "--max_tokens=777",
        "--ephemeral_system_prompt=EPHEMERAL-SYSTEM-NOTE",
        "--prefill_messages_file=prefill.json",
        "--num_workers=2",
    )
    assert run.returncode == 0, run
    requests = sim_endpoint.requests
    # The prefilled assistant turn makes the simulated model answer at once: one call a prompt.
    assert len(requests) >= 2
    for request in requests:
        body = request.body
        assert body["provider"] == {
            "only": ["anthropic", "openai"],
            "ignore": ["together", "deepinfra"],
            "order": ["openai", "anthropic"],
            "sort": "price",
        }
        assert body["reasoning"] == {"enabled": True, "effort": "high"}
        assert body["max_tokens"] == 777
        assert "EPHEMERAL-SYSTEM-NOTE" in body["messages"][0]["content"]
        assert [m["content"] for m in body["messages"][1:3]] == ["PREFILL-Q", "PREFILL-A"]
        assert request.headers.get("authorization") == f"Bearer {API_KEY}"
    run_dir = cli.run_dir("2024")
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == ["Route me", "Route me too"]
    written = b"".join(p.read_bytes() for p in run_dir.iterdir() if p.is_file())
    assert API_KEY.encode() not in written
    assert API_KEY not in run.stderr + run.stdout
    assert b"EPHEMERAL-SYSTEM-NOTE" not in written
    saved_config = (run_dir / "run_config.json").read_text()  # (the simulated answer quotes the prefill)
    assert "PREFILL-Q" not in saved_config and "PREFILL-A" not in saved_config
    recorded = json.loads((run_dir / "run_config.json").read_text())["agent"]
    assert (recorded["ephemeral_system_prompt_set"], recorded["prefill_messages_count"]) == (True, 2)
    for entry in entries:  # prefill primes each call but is no turn of the saved conversation
        assert [t["value"] for t in entry["conversations"] if t["from"] == "human"] == [human_prompt(entry)]
        assert not {"PREFILL-Q", "PREFILL-A"} & {t["value"] for t in entry["conversations"]}


# ---------------------------------------------------------------- validation


VALID = ("--dataset_file=prompts.jsonl", "--batch_size=2", "--run_name=checked")
CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # case: (flags, what the one error line must say)
    "no_dataset_file": (("--batch_size=2", "--run_name=checked"), ("--dataset_file",)),
    "no_batch_size": (("--dataset_file=prompts.jsonl", "--run_name=checked"), ("--batch_size",)),
    "no_run_name": (("--dataset_file=prompts.jsonl", "--batch_size=2"), ("--run_name",)),
    "unknown_distribution": ((*VALID, "--distribution=nope"), ("nope", *sorted(toolsets.DISTRIBUTIONS))),
    "bad_reasoning_effort": (
        (*VALID, "--reasoning_effort=extreme"),
        ("extreme", "none", "minimal", "low", "medium", "high", "xhigh"),
    ),
    "escaping_run_name": (
        ("--dataset_file=prompts.jsonl", "--batch_size=2", "--run_name=../x"),
        ("--run_name", "../x"),
    ),
    "long_run_name": (  # once "use letters, digits, ...", of a name of letters only
        ("--dataset_file=prompts.jsonl", "--batch_size=2", "--run_name=" + "a" * 300),
        ("--run_name: at most 128 characters (got 300)",),
    ),
    "unreadable_prefill": (
        (*VALID, "--prefill_messages_file=missing-prefill.json"),
        ("missing-prefill.json",),
    ),
    "results_without_resume": (
        ("--dataset_file=prompts.jsonl", "--batch_size=2", "--run_name=taken"),
        ("--resume",),
    ),
    "missing_dataset": (
        ("--dataset_file=nowhere.jsonl", "--batch_size=2", "--run_name=checked"),
        ("nowhere.jsonl",),
    ),
    # Each of these once ran the whole job, exit 0: Fire dropped the unknown flag.
    "misspelled_max_turns": (
        (*VALID, "--max_turn=1"),
        ("unknown flag --max_turn: did you mean --max_turns?",),
    ),
    "misspelled_max_samples": (
        (*VALID, "--max_sample=1"),
        ("unknown flag --max_sample: did you mean --max_samples?",),
    ),
    "unknown_flag": ((*VALID, "--bogus_flag=1"), ("unknown flag --bogus_flag", "(--help lists every flag)")),
    "run_agent_flag": ((*VALID, "--query=hi"), ("--query is a flag of run_agent.py",)),
    "positional_argument": ((*VALID, "prompts.jsonl"), ("unexpected argument 'prompts.jsonl'",)),
    "not_a_boolean": ((*VALID, "--resume=maybe"), ("--resume=maybe: must be true or false",)),
    "integer_as_word": ((*VALID, "--num_workers=four"), ("--num_workers must be an integer, got 'four'",)),
    "bare_valued_flag": ((*VALID, "--model", "--resume"), ("--model needs a value",)),
    "list_distributions_false": (("--list_distributions=0",), ("--dataset_file is required",)),
}


@pytest.fixture(scope="module")
def validation_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every invalid command line, run at once (each only imports, validates and exits)."""
    workdir = tmp_path_factory.mktemp("validation")
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(workdir, endpoint)
        prompts_dataset(workdir / "prompts.jsonl", ["a prompt"])
        taken = cli.run_dir("taken")
        taken.mkdir(parents=True)
        (taken / "batch_0.jsonl").write_text('{"prompt_index": 0}\n')
        runs = run_at_once(cli, {case: cli.argv(*flags) for case, (flags, _) in CASES.items()})
        yield {"runs": runs, "cli": cli, "requests": len(endpoint.requests)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_command_line_gives_one_clear_line(validation_runs: dict[str, Any], case: str) -> None:
    run: Finished = validation_runs["runs"][case]
    assert run.returncode == 2, run
    lines = error_lines(run)
    assert len(lines) == 1, run
    assert "Traceback" not in run.stderr
    for needle in CASES[case][1]:
        assert needle in lines[0], run
    cli: BatchCLI = validation_runs["cli"]
    assert not (cli.output_dir / "checked").exists()  # refused before anything was created
    assert not (cli.workdir / "x").exists() and not (cli.output_dir.parent / "x").exists()
    assert validation_runs["requests"] == 0  # and before a token was spent


# ---------------------------------------------------------------- booleans and --help


BOOLEANS = ("resume", "verbose", "reasoning_disabled", "sandbox_network", "keep_no_reasoning")
SPELLINGS = {"false": False, "False": False, "0": False, "no": False, "true": True, "1": True, "YES": True}
BARE = "(bare)"


def spelled(name: str, spelling: str) -> str:
    return f"--{name}" if spelling == BARE else f"--{name}={spelling}"


@pytest.fixture(scope="module")
def boolean_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One small run per spelling, every boolean flag spelled that way, all at once."""
    workdir = tmp_path_factory.mktemp("booleans")
    spellings = [*SPELLINGS, BARE]
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(workdir, endpoint)
        argvs = {}
        for i, spelling in enumerate(spellings):
            prompts_dataset(workdir / f"p{i}.jsonl", [f"boolean prompt {i}"])
            flags = [spelled(name, spelling) for name in BOOLEANS]
            if not SPELLINGS.get(spelling, True):
                flags.append(spelled("list_distributions", spelling))  # false: the run goes ahead
            argvs[spelling] = cli.argv(
                f"--dataset_file=p{i}.jsonl", "--batch_size=1", f"--run_name=b{i}", "--num_workers=1",
                "--api_dialect=openrouter", *flags,
            )  # fmt: skip
        runs = run_at_once(cli, argvs)
        bodies = {
            spelling: [r.body for r in endpoint.requests if f"boolean prompt {i}" in json.dumps(r.body)]
            for i, spelling in enumerate(spellings)
        }
        configs = {spelling: cli.run_dir(f"b{i}") / "run_config.json" for i, spelling in enumerate(spellings)}
        yield {"runs": runs, "configs": configs, "bodies": bodies}


@pytest.mark.parametrize("spelling", [*SPELLINGS, BARE])
def test_every_boolean_flag_is_recorded_as_spelled(boolean_runs: dict[str, Any], spelling: str) -> None:
    run: Finished = boolean_runs["runs"][spelling]
    assert run.returncode == 0, run
    expected = SPELLINGS.get(spelling, True)
    config = read_json(boolean_runs["configs"][spelling])
    recorded = {
        "resume": config["resume"],
        "verbose": config["verbose"],
        "reasoning_disabled": config["agent"]["reasoning_config"] == {"effort": "none"},
        "sandbox_network": config["sandbox"]["network"],
        "keep_no_reasoning": config["keep_no_reasoning"],
    }
    assert recorded == dict.fromkeys(BOOLEANS, expected)
    bodies = boolean_runs["bodies"][spelling]
    assert bodies, run
    for body in bodies:  # --reasoning_disabled=false once sent {"effort": "none"}
        assert body.get("reasoning") == ({"effort": "none"} if expected else None)


def test_list_distributions_takes_a_spelled_true(cli: BatchCLI, sim_endpoint: SimulatedEndpoint) -> None:
    run = cli.run("--list_distributions=yes", output=False)
    assert run.returncode == 0, run
    assert "Sandbox backends on this machine:" in run.stdout.splitlines()


def test_help_lists_every_flag_with_its_default(cli: BatchCLI, sim_endpoint: SimulatedEndpoint) -> None:
    run = cli.run("--help", "--max_turn=1")  # --help wins, even over a misspelled flag
    assert (run.returncode, run.stderr) == (0, ""), run
    defaults = {"max_turns": "10", "max_retries": "6", "request_timeout": "600", "num_workers": "4"}
    assert_lists_every_flag(run.stdout, BATCH, defaults)
    assert sim_endpoint.requests == [] and not cli.output_dir.exists()


# ---------------------------------------------------------------- dataset lines


def test_bad_dataset_lines_are_reported_skipped_and_counted(cli: BatchCLI) -> None:
    write_dataset(
        cli.workdir / "mixed.jsonl",
        [
            {"prompt": "good one", "metadata": {"prompt_source": "unit"}},
            "this is not json",
            "[1, 2]",
            {"no_prompt": "here"},
            {"prompt": 42},
            {"prompt": "bad metadata", "metadata": "not an object"},
            "",
            {"prompt": "good two"},
        ],
    )
    run = cli.run("--dataset_file=mixed.jsonl", "--batch_size=4", "--run_name=mixed", "--num_workers=1")
    assert run.returncode == 0, run
    lines = run.stderr.splitlines()
    for line_no in (2, 3, 4, 5, 6):
        reported = [line for line in lines if f"mixed.jsonl:{line_no}: " in line]
        assert len(reported) == 1, run
    assert not any("mixed.jsonl:7:" in line or "mixed.jsonl:1:" in line for line in lines)
    run_dir = cli.run_dir("mixed")
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == ["good one", "good two"]
    assert sorted(e["prompt_index"] for e in entries) == [0, 1]  # indices count valid rows
    dataset = read_json(run_dir / "statistics.json")["dataset"]
    assert (dataset["lines"], dataset["valid"], dataset["invalid"]) == (8, 2, 5)


@pytest.fixture
def no_valid_line(cli: BatchCLI) -> Finished:
    write_dataset(cli.workdir / "bad.jsonl", ["nope", {"prompt": ""}, {"text": "no prompt key"}])
    return cli.run("--dataset_file=bad.jsonl", "--batch_size=2", "--run_name=bad")


def test_dataset_without_a_valid_line_exits_non_zero(
    no_valid_line: Finished, cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    run = no_valid_line
    assert run.returncode not in (0, None), run
    assert "Traceback" not in run.stderr
    assert [line for line in error_lines(run) if "no valid row" in line] == [error_lines(run)[-1]], run
    assert not cli.run_dir("bad").exists()
    assert requested_prompts(sim_endpoint) == {}


def test_dataset_without_a_valid_line_still_reports_every_bad_line(no_valid_line: Finished) -> None:
    for line_no in (1, 2, 3):
        assert [line for line in error_lines(no_valid_line) if f"bad.jsonl:{line_no}: " in line], (
            no_valid_line
        )


def test_rows_naming_an_image_are_bad_lines_under_the_local_backend(cli: BatchCLI) -> None:
    write_dataset(
        cli.workdir / "images.jsonl",
        [{"prompt": "plain"}, {"prompt": "in a container", "image": "python:3.11-slim"}, {"prompt": "up"}],
    )
    run = cli.run(
        "--dataset_file=images.jsonl",
        "--batch_size=4",
        "--run_name=img",
        "--num_workers=1",
        "--sandbox=local",
    )
    assert run.returncode == 0, run
    reported = [line for line in error_lines(run) if "images.jsonl:2: image:" in line]
    assert len(reported) == 1 and "--sandbox=docker" in reported[0], run
    entries = read_jsonl(cli.run_dir("img") / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == ["plain", "up"]
    dataset = read_json(cli.run_dir("img") / "statistics.json")["dataset"]
    assert (dataset["valid"], dataset["invalid"]) == (2, 1)


def test_max_reply_bytes_reaches_the_workers_client(cli: BatchCLI) -> None:
    write_dataset(cli.workdir / "one.jsonl", [{"prompt": "a reply larger than the cap"}])
    run = cli.run(
        "--dataset_file=one.jsonl",
        "--batch_size=1",
        "--run_name=cap",
        "--num_workers=1",
        "--max_reply_bytes=64",
    )
    assert run.returncode == 1, run
    failures = read_jsonl(cli.run_dir("cap") / "failures.jsonl")
    assert [f["error_class"] for f in failures] == ["invalid_response"]
    assert "--max_reply_bytes" in failures[0]["message"]
    assert read_json(cli.run_dir("cap") / "run_config.json")["agent"]["max_reply_bytes"] == 64


def test_an_unusable_output_dir_is_one_line_and_exit_2(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts_dataset(cli.workdir / "prompts.jsonl", ["a prompt"])
    (cli.workdir / "a_file").write_text("not a directory\n")
    places = {"file": "a_file", "under_a_file": "a_file/deeper", "proc": "/proc/no_such_dir"}
    argvs = {
        name: cli.argv(
            "--dataset_file=prompts.jsonl",
            "--batch_size=1",
            "--run_name=r",
            f"--output_dir={place}",
            output=False,
        )
        for name, place in places.items()
    }
    for name, run in run_at_once(cli, argvs).items():
        assert run.returncode == 2, (name, run)
        lines = error_lines(run)
        assert len(lines) == 1 and "--output_dir" in lines[0] and "Traceback" not in run.stderr, (name, run)
        if name == "proc":  # once "(/proc: No such file or directory)", of a /proc that exists
            assert "making a directory in /proc failed" in lines[0], lines
    assert (cli.workdir / "a_file").read_text() == "not a directory\n"
    assert requested_prompts(sim_endpoint) == {}
