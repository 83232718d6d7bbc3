"""Verified runs end to end: `batch_runner.py` as a subprocess against the simulated endpoint
over HTTP, with real sandboxes; each check kind passes and fails as it should, a broken
verifier does not stop the run, and bad verification input is one line and exit 2."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.servers.faults import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.fixtures.docker_run import DockerRun, run_cleanly
from tests.fixtures.ray import RayCluster, ray_args
from tests.support.batch import BatchCLI, enterable_workdir, human_prompt, read_jsonl, write_dataset

THINK = "Let me do what was asked."


def _script(endpoint: SimulatedEndpoint, prompt: str, command: str, final: str) -> None:
    """A terminal call running `command` in the sandbox, then `final` as the answer."""
    call = (("terminal", json.dumps({"command": command})),)
    endpoint.script(prompt, [Turn(reasoning=THINK, tool_calls=call), Turn(content=final, reasoning=THINK)])


def _entries(cli: BatchCLI, run_name: str) -> dict[str, dict[str, Any]]:
    entries = read_jsonl(cli.run_dir(run_name) / "trajectories.jsonl")
    return {next(t["value"] for t in e["conversations"] if t["from"] == "human"): e for e in entries}


def _checks(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["method"]: check for check in entry["metadata"]["verification"]["checks"]}


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    with enterable_workdir("verify-test-") as root:
        yield root


FILE_TASK = {"python": {"file": "hello.txt", "content": "hello\n"}}


@pytest.mark.parametrize("sandbox", ["local", pytest.param("bwrap", marks=pytest.mark.bwrap)])
def test_answer_command_and_python_checks_pass_and_fail_in_the_entry(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint, sandbox: str, request: pytest.FixtureRequest
) -> None:
    if sandbox == "bwrap":
        request.getfixturevalue("bwrap_available")
    _script(sim_endpoint, "Right", "printf 'hello\\n' > hello.txt", "So the total is 1,042.")
    _script(sim_endpoint, "Wrong", "echo hi", "The total is 41.")
    _script(sim_endpoint, "Plain", "echo hi", "Done.")
    verify = {"answer": {"expected": "1042", "match": "number"}, **FILE_TASK}
    rows = [{"prompt": p, "verify": verify} for p in ("Right", "Wrong")]
    write_dataset(tmp_path / "d.jsonl", [*rows, {"prompt": "Plain", "verify": {"python": False}}])
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl",
        "--batch_size=5",
        "--run_name=v",
        f"--sandbox={sandbox}",
        "--verify_command=grep -qx hello hello.txt",
        "--verifier=examples.verifier:wrote_file",
    )
    assert run.returncode == 0, run
    entries = _entries(cli, "v")
    right, wrong, plain = entries["Right"], entries["Wrong"], entries["Plain"]
    assert right["metadata"]["reward"] == 1.0 and right["metadata"]["verification"]["passed"] is True
    checks = _checks(right)
    assert list(checks) == ["answer", "command", "python"]
    assert checks["answer"]["details"]["number"] == 1042.0
    assert checks["command"]["details"]["exit_code"] == 0  # it saw the file the agent wrote
    assert checks["python"]["details"] == {
        "verifier": "examples.verifier:wrote_file",
        "file": "hello.txt",
        "size": 6,
    }
    assert wrong["metadata"]["reward"] == 0.0 and wrong["metadata"]["verification"]["passed"] is False
    assert [c["passed"] for c in _checks(wrong).values()] == [False, False, False]
    # The run's --verify_command applies to every row; this row turned off only the verifier.
    assert list(_checks(plain)) == ["command"] and plain["metadata"]["reward"] == 0.0
    assert all(
        c["duration_s"] >= 0 and c["cost_usd"] == 0 for e in entries.values() for c in _checks(e).values()
    )


def test_a_run_without_checks_writes_no_verification(tmp_path: Path, sim_endpoint: SimulatedEndpoint) -> None:
    _script(sim_endpoint, "Plain", "echo hi", "Done.")
    write_dataset(tmp_path / "d.jsonl", [{"prompt": "Plain"}])
    cli = BatchCLI(tmp_path, sim_endpoint)
    assert (
        cli.run("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=n", "--sandbox=local").returncode == 0
    )
    metadata = _entries(cli, "n")["Plain"]["metadata"]
    assert "reward" not in metadata and "verification" not in metadata


@pytest.mark.parametrize("verifier", ["exits", "cancels_itself"])
def test_a_verifier_raising_what_ends_processes_neither_kills_nor_hangs_its_worker(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint, verifier: str
) -> None:
    # SystemExit ended the worker (replaced, then the prompt lost); its own CancelledError hung the run.
    _script(sim_endpoint, "One", "echo hi", "The answer is 7.")
    write_dataset(tmp_path / "d.jsonl", [{"prompt": "One", "verify": {"answer": "7"}}])
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=d.jsonl", "--batch_size=5", "--run_name=r", "--sandbox=local")
    run = cli.run(*flags, f"--verifier=tests.support.verifiers:{verifier}", timeout=120)
    assert run.returncode == 0, run
    (entry,) = _entries(cli, "r").values()
    assert _checks(entry)["python"]["error"].startswith(f"verifier_error: tests.support.verifiers:{verifier}")
    assert "lost" not in run.stderr, run.stderr


def test_a_verifier_that_raises_is_recorded_and_the_run_goes_on(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    for prompt in ("One", "Two"):
        _script(sim_endpoint, prompt, "echo hi", "The answer is 7.")
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p, "verify": {"answer": "7"}} for p in ("One", "Two")])
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl",
        "--batch_size=5",
        "--run_name=r",
        "--sandbox=local",
        "--answer_match=number",
        "--verifier=tests.support.verifiers:raises",
    )
    assert run.returncode == 0, run
    for entry in _entries(cli, "r").values():
        checks = _checks(entry)
        assert checks["answer"]["passed"] is True
        assert checks["python"]["error"].startswith(
            "verifier_error: tests.support.verifiers:raises raised RuntimeError"
        )
        assert (checks["python"]["passed"], checks["python"]["score"]) == (None, None)
        assert entry["metadata"]["verification"]["passed"] is None  # undecided, not failed
        assert entry["metadata"]["reward"] == 1.0  # the mean of the checks that scored


def test_checking_time_is_not_counted_within_the_prompt_timeout(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    _script(sim_endpoint, "Slow check", "echo hi", "Done.")
    write_dataset(
        tmp_path / "d.jsonl", [{"prompt": "Slow check", "verify": {"command": "sleep 4; echo 0.5"}}]
    )
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=1", "--run_name=t", "--sandbox=local", "--prompt_timeout=3"
    )
    assert run.returncode == 0, run
    entry = _entries(cli, "t")["Slow check"]
    assert entry["metadata"]["reward"] == 0.5 and _checks(entry)["command"]["duration_s"] >= 4


def _refused(tmp_path: Path, endpoint: SimulatedEndpoint, rows: list[Any], *flags: str) -> str:
    """Runs with `flags` over `rows`; asserts exit 2 before any model call, returns the stderr."""
    write_dataset(tmp_path / "d.jsonl", rows)
    cli = BatchCLI(tmp_path, endpoint)
    run = cli.run("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=bad", "--sandbox=local", *flags)
    assert run.returncode == 2, run
    assert endpoint.requests == []
    assert not any(cli.run_dir("bad").glob("*.jsonl"))
    return run.stderr


@pytest.mark.parametrize(
    ("rows", "flags", "line"),
    [
        (
            [{"prompt": "p", "verify": {"anwser": "4"}}],
            (),
            "error: d.jsonl:1: verify.anwser: unknown check kind; one of answer, command, judge, python "
            "(a row's checks must be right before the run starts)",
        ),
        (
            [{"prompt": "p", "verify": {"answer": {"expected": "(", "match": "regex"}}}],
            (),
            "error: d.jsonl:1: verify.answer: not a valid regex: missing ) at position 1 "
            "(a row's checks must be right before the run starts)",
        ),
        (
            [{"prompt": "p", "verify": {"command": "true\u0000false"}}],
            (),
            "error: d.jsonl:1: verify.command: holds a NUL character, which no command line can "
            "(a row's checks must be right before the run starts)",
        ),
        (  # among good rows too: skipping it would run its prompt unchecked
            [{"prompt": "p"}, {"prompt": "q", "verify": {"anwser": "4"}}],
            (),
            "error: d.jsonl:2: verify.anwser: unknown check kind; one of answer, command, judge, python "
            "(a row's checks must be right before the run starts)",
        ),
        (
            [{"prompt": "p"}],
            ("--verifier=tests.support.broken_verifier:check",),
            "error: --verifier=tests.support.broken_verifier:check: cannot import "
            "tests.support.broken_verifier: ImportError: this verifier module is broken on purpose",
        ),
        (  # the module's own exit code (0) must not become the run's
            [{"prompt": "p"}],
            ("--verifier=tests.support.exiting_verifier:check",),
            "error: --verifier=tests.support.exiting_verifier:check: cannot import "
            "tests.support.exiting_verifier: SystemExit: 0",
        ),
        (  # os._exit skips every handler: it once ended the run with exit 0 and nothing written
            [{"prompt": "p"}],
            ("--verifier=tests.support.hard_exiting_verifier:check",),
            "error: --verifier=tests.support.hard_exiting_verifier:check: cannot import "
            "tests.support.hard_exiting_verifier: ExitCalled: os._exit(0) called",
        ),
        (  # not JSON, but a check's error as in a Parquet row: once a skipped line, exit 0
            ['{"prompt": "p", "verify": {"answer": {"expected": "1", "match": "number", "tolerance": NaN}}}'],
            (),
            "error: d.jsonl:1: verify: holds nan, which is not valid JSON "
            "(a row's checks must be right before the run starts)",
        ),
        (  # 1e999 is beyond a float: the entry would hold an infinity no JSON line can carry
            [{"prompt": "p", "verify": {"answer": {"expected": "1e999", "match": "number"}}}],
            (),
            "error: d.jsonl:1: verify.answer: '1e999' is beyond the largest number a check can compare "
            "(about 1.8e308) (a row's checks must be right before the run starts)",
        ),
        (
            [{"prompt": "p"}],
            ("--verifier=tests.support.verifiers:not_async",),
            "error: --verifier=tests.support.verifiers:not_async: not_async is not an async function "
            "(`async def not_async(attempt, sandbox)`)",
        ),
        (
            [{"prompt": "p"}],
            ("--judge_model=judge", "--judge_rubric=no_such_rubric.md"),
            "error: --judge_rubric=no_such_rubric.md: cannot read the rubric file "
            "(No such file or directory)",
        ),
        (
            [{"prompt": "p"}, {"prompt": "q"}],
            ("--judge_model=judge",),
            "error: d.jsonl:1: verify.judge: no rubric: give verify.judge.rubric, or --judge_rubric=FILE",
        ),
        (
            [{"prompt": "p"}, {"prompt": "q", "verify": {"python": True}}],
            (),
            "error: d.jsonl:2: verify.python: asks for the run's verifier; give --verifier=module:function",
        ),
    ],
)
def test_bad_verification_input_is_one_line_and_exit_2_before_any_call(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint, rows: list[Any], flags: tuple[str, ...], line: str
) -> None:
    stderr = _refused(tmp_path, sim_endpoint, rows, *flags)
    assert line in stderr.splitlines(), stderr
    assert "Traceback" not in stderr


@pytest.mark.docker
@pytest.mark.xdist_group(
    "docker-engine"
)  # as tests/test_batch_docker.py: its runs reap the engine's leftovers
def test_a_command_check_runs_in_the_prompts_container(docker_run: DockerRun) -> None:
    docker_run.script({"Write": "printf 'hello\\n' > hello.txt", "Skip": "echo hi"})
    docker_run.write(
        [{"prompt": p, "verify": {"command": "grep -qx hello hello.txt"}} for p in ("Write", "Skip")]
    )
    run = run_cleanly(docker_run)  # no container outlives the run: each was removed after its check
    assert run.returncode == 0, run
    entries = read_jsonl(docker_run.run_dir / "trajectories.jsonl")
    rewards = {human_prompt(e): e["metadata"]["reward"] for e in entries}
    assert rewards == {"Write": 1.0, "Skip": 0.0}


def test_failed_attempts_are_not_verified_and_partial_ones_are(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    call = (("terminal", json.dumps({"command": "touch made.txt"})),)
    sim_endpoint.script(
        "Doomed", [Turn(reasoning=THINK, tool_calls=call), Turn(fault=EndpointFault(400, "bad"))]
    )
    sim_endpoint.script("Endless", [Turn(reasoning=THINK, tool_calls=call)] * 3)
    verify = {"answer": "done", "command": "test -f made.txt"}
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p, "verify": verify} for p in ("Doomed", "Endless")])
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=5", "--run_name=f", "--sandbox=local", "--max_turns=2"
    )
    assert run.returncode == 1, run  # the failed prompt is not done
    failures = read_jsonl(cli.run_dir("f") / "failures.jsonl")
    assert [f["error_class"] for f in failures] == ["bad_request"] and "verification" not in failures[0]
    endless = _entries(cli, "f")["Endless"]
    assert endless["metadata"]["outcome"] == "max_iterations"
    checks = _checks(endless)
    assert (
        checks["answer"]["passed"] is False and checks["answer"]["details"]["got"] is None
    )  # no final answer
    assert checks["command"]["passed"] is True  # what it did in the sandbox still counts
    assert endless["metadata"]["reward"] == 0.5


def test_checks_run_on_ray_actors_as_in_local_workers(ray_cluster: RayCluster) -> None:
    with SimulatedEndpoint() as endpoint, tempfile.TemporaryDirectory(prefix="verify-ray-") as root:
        workdir = Path(root)
        _script(endpoint, "Right", "printf 'hello\\n' > hello.txt", "It is 42.")
        _script(endpoint, "Wrong", "echo hi", "It is 41.")
        rows = [{"prompt": p, "verify": {"answer": "42", **FILE_TASK}} for p in ("Right", "Wrong")]
        write_dataset(workdir / "d.jsonl", rows)
        cli = BatchCLI(workdir, endpoint)
        flags = ("--dataset_file=d.jsonl", "--batch_size=5", "--run_name=ray", "--sandbox=local")
        verifier = "--verifier=examples.verifier:wrote_file"
        run = cli.run(*flags, verifier, "--answer_match=number", *ray_args(ray_cluster))
        assert run.returncode == 0, run
        entries = _entries(cli, "ray")
        assert {p: e["metadata"]["reward"] for p, e in entries.items()} == {"Right": 1.0, "Wrong": 0.0}
        assert [c["method"] for c in entries["Right"]["metadata"]["verification"]["checks"]] == [
            "answer",
            "python",
        ]
