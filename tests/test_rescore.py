"""--rescore end to end: `batch_runner.py` as a subprocess against the simulated endpoint over
HTTP; an existing run's entries are checked again from their transcripts with a new answer
key, with no agent call (counted at the endpoint), --keep applied again, statistics and
output true to the data; a command check is kept as it was; bad input is one line, exit 2; a
rescore killed between two files leaves each before or after, and a second one finishes."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, human_prompt, read_json, read_jsonl, tool_then_answer, write_dataset

THINK = "Let me answer."
ANSWERS = {"Right 0": "42", "Right 1": "The answer is 42", "Wrong 0": "41", "Wrong 1": "I do not know"}
RUN = ("--run_name=r", "--answer_match=contains")


def _dataset(tmp_path: Path, expected: str, name: str = "d.jsonl") -> None:
    write_dataset(tmp_path / name, [{"prompt": p, "verify": {"answer": expected}} for p in ANSWERS])


def _run(tmp_path: Path, endpoint: SimulatedEndpoint, *flags: str) -> BatchCLI:
    for prompt, answer in ANSWERS.items():
        endpoint.script(prompt, [Turn(content=answer, reasoning=THINK)])
    _dataset(tmp_path, "42")
    cli = BatchCLI(tmp_path, endpoint)
    first = cli.run("--dataset_file=d.jsonl", "--batch_size=2", "--num_workers=1", *RUN, *flags)
    assert first.returncode == 0, first
    return cli


def _rewards(path: Path) -> dict[str, Any]:
    return {human_prompt(e): e["metadata"]["reward"] for e in read_jsonl(path)}


def _current_discards(run_dir: Path, output: set[str]) -> dict[str, dict[str, Any]]:
    last = {human_prompt(r["entry"]): r for r in read_jsonl(run_dir / "discarded.jsonl")}
    return {prompt: record for prompt, record in last.items() if prompt not in output}


def test_rescore_with_a_new_answer_key_makes_no_agent_call_and_keeps_again(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = _run(tmp_path, endpoint, "--keep=passing")
        run_dir = cli.run_dir("r")
        assert _rewards(run_dir / "trajectories.jsonl") == {"Right 0": 1.0, "Right 1": 1.0}
        _dataset(tmp_path, "41")  # the same prompts, a new answer key
        endpoint.clear_requests()
        again = cli.run(*RUN, "--rescore", "--keep=passing")
        assert again.returncode == 0, again
        assert endpoint.requests == []  # no agent call, no judge asked for
        for path in run_dir.glob("*.jsonl"):
            read_jsonl(path)  # every line rewritten whole (tombstones included)
        trajectories = read_jsonl(run_dir / "trajectories.jsonl")
        assert _rewards(run_dir / "trajectories.jsonl") == {"Wrong 0": 1.0}
        discards = _current_discards(run_dir, {human_prompt(e) for e in trajectories})
        assert {p: (r["reason"], r["entry"]["metadata"]["reward"]) for p, r in discards.items()} == {
            "Right 0": ("not_passing", 0.0),
            "Right 1": ("not_passing", 0.0),
            "Wrong 1": ("not_passing", 0.0),
        }
        (check,) = trajectories[0]["metadata"]["verification"]["checks"]
        assert check["method"] == "answer" and check["passed"] is True
        stats = read_json(run_dir / "statistics.json")  # true against the data
        assert stats["trajectories"]["entries"] == len(trajectories) == 1
        assert stats["keep"] == {"mode": "passing", "not_kept": {"not_passing": 3}, "decided_short": 0}
        assert stats["completion"]["exit_code"] == 0 and stats["merged"] is True

        everything = cli.run(*RUN, "--rescore")  # --keep=all: everything back, rescored again
        assert everything.returncode == 0, everything
        assert endpoint.requests == []
        # 4 attempts, though 3 are stored twice (withdrawn batch-file lines, discarded.jsonl records)
        assert "Re-scored 4 attempts" in " ".join((everything.stdout + everything.stderr).split())
        assert _rewards(run_dir / "trajectories.jsonl") == NEW_REWARDS
        assert read_json(run_dir / "statistics.json")["trajectories"]["entries"] == 4


def test_rescore_keeps_a_command_check_as_it_was_and_says_so(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = _run(tmp_path, endpoint, "--verify_command=true")
        run_dir = cli.run_dir("r")
        before = {human_prompt(e): e for e in read_jsonl(run_dir / "trajectories.jsonl")}
        endpoint.clear_requests()
        again = cli.run(*RUN, "--rescore")
        assert again.returncode == 0, again
        assert endpoint.requests == []
        said = " ".join(again.stderr.split())
        assert "4 attempts have a command check: it needs the attempt's sandbox and was not re-scored" in said
        for entry in read_jsonl(run_dir / "trajectories.jsonl"):
            old = before[human_prompt(entry)]["metadata"]["verification"]
            new = entry["metadata"]["verification"]
            assert [c["method"] for c in new["checks"]] == ["answer", "command"]
            command = new["checks"][1]
            assert command["details"].pop("rescored") is False
            assert command == old["checks"][1]  # the check of the sandbox, kept as it was
            assert new["passed"] == old["passed"]


def test_rescore_follows_each_rows_command_check_as_the_dataset_now_gives_it(tmp_path: Path) -> None:
    """A row's command check removed is dropped; changed, or new, it cannot run without the
    attempt's sandbox: undecided, never the old result (once kept as it was) nor a pass."""
    with SimulatedEndpoint() as endpoint:
        for prompt, answer in ANSWERS.items():
            endpoint.script(prompt, [Turn(content=answer, reasoning=THINK)])
        commands = {"Right 0": "exit 3", "Right 1": "true", "Wrong 0": "true"}
        with_command = {p: {"command": c} for p, c in commands.items()}
        rows = [{"prompt": p, "verify": {"answer": "42", **with_command.get(p, {})}} for p in ANSWERS]
        write_dataset(tmp_path / "d.jsonl", rows)
        cli = BatchCLI(tmp_path, endpoint)
        assert cli.run("--dataset_file=d.jsonl", "--batch_size=2", "--num_workers=1", *RUN).returncode == 0
        edited = {"Right 0": "true", "Wrong 0": None, "Wrong 1": "exit 1"}  # changed, removed, added
        for row in rows:
            command = edited.get(row["prompt"], commands.get(row["prompt"]))
            row["verify"] = {"answer": "42", **({"command": command} if command else {})}
        write_dataset(tmp_path / "d.jsonl", rows)
        again = cli.run(*RUN, "--rescore")
        assert again.returncode == 0, again
        said = " ".join(again.stderr.split())
        assert (
            "1 attempts have a command check" in said and "2 attempts are asked for a command check" in said
        )
        checked = {
            human_prompt(e): {c["method"]: c for c in e["metadata"]["verification"]["checks"]}
            for e in read_jsonl(cli.run_dir("r") / "trajectories.jsonl")
        }
        assert checked["Right 1"]["command"]["passed"] is True  # the same command: kept
        assert "command" not in checked["Wrong 0"]
        for prompt, ran in (("Right 0", "exit 3"), ("Wrong 1", None)):
            command = checked[prompt]["command"]
            assert (command["passed"], command["error"].split(":")[0]) == (None, "sandbox_error")
            assert command["details"] == {
                "command": edited[prompt],
                "rescored": False,
                **({"ran": ran} if ran else {}),
            }


def test_bad_rescore_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = _run(tmp_path, endpoint)
        endpoint.clear_requests()
        missing = cli.run("--run_name=nope", "--rescore")
        assert missing.returncode == 2, missing
        assert "--rescore: no run in" in missing.stderr and "nope" in missing.stderr
        write_dataset(tmp_path / "other.jsonl", [{"prompt": "Another", "verify": {"answer": "1"}}])
        other = cli.run(*RUN, "--rescore", "--dataset_file=other.jsonl")
        assert other.returncode == 2, other
        assert "the dataset no longer matches the run" in other.stderr
        assert len(other.stderr.strip().splitlines()) == 1
        assert endpoint.requests == []


NEW_REWARDS = {"Right 0": 0.0, "Right 1": 0.0, "Wrong 0": 1.0, "Wrong 1": 0.0}  # the key "41"


def _file_rewards(path: Path) -> dict[str, float]:
    """The reward of each entry in a shard or discarded.jsonl (tombstones have none)."""
    entries = [line.get("entry", line) for line in read_jsonl(path)]
    return {human_prompt(e): e["metadata"]["reward"] for e in entries if "conversations" in e}


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.glob("*.jsonl")) if p.name != "trajectories.jsonl"}


@pytest.mark.parametrize("files", [1, 2])
def test_a_rescore_killed_between_files_leaves_each_before_or_after_and_a_second_finishes(
    tmp_path: Path, files: int
) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = _run(tmp_path, endpoint, "--keep=passing")
        run_dir = cli.run_dir("r")
        _dataset(tmp_path, "41")
        before = _snapshot(run_dir)
        endpoint.clear_requests()
        os.environ["AGENT_TEST_RESCORE_KILL_AFTER"] = str(files)
        try:
            killed = cli.run(*RUN, "--rescore", "--keep=passing")
        finally:
            del os.environ["AGENT_TEST_RESCORE_KILL_AFTER"]
        assert killed.returncode == -signal.SIGKILL, killed
        changed = [name for name, data in _snapshot(run_dir).items() if data != before[name]]
        assert len(changed) == files  # the files written whole, the others untouched
        for name in changed:
            rewards = _file_rewards(run_dir / name)
            assert rewards and rewards == {prompt: NEW_REWARDS[prompt] for prompt in rewards}, name
        finished = cli.run(*RUN, "--rescore", "--keep=passing")
        assert finished.returncode == 0, finished
        assert endpoint.requests == []
        output = read_jsonl(run_dir / "trajectories.jsonl")
        assert Counter(human_prompt(e) for e in output) == Counter(["Wrong 0"])
        assert set(_current_discards(run_dir, {"Wrong 0"})) == {"Right 0", "Right 1", "Wrong 1"}


TRANSCRIPT_VERIFIER = '''
from agent.protocols.turns import AssistantTurn, ToolTurn


async def transcript(attempt, sandbox):
    """Passes when the agent ran a tool before answering; says what it read of the transcript."""
    from agent.protocols.verification import Score

    kinds = [type(turn).__name__ for turn in attempt.turns]
    calls = [c.name for t in attempt.turns if isinstance(t, AssistantTurn) for c in t.calls]
    ran = any(isinstance(turn, ToolTurn) for turn in attempt.turns)
    details = {"kinds": kinds, "calls": calls, "final": attempt.final_response, "sandbox": sandbox is None}
    return Score(ran, details=details)
'''


def test_rescore_gives_a_verifier_the_transcript_as_typed_turns_without_a_sandbox(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        endpoint.script("Tool", [tool_then_answer()[0], Turn(content="It is 42.", reasoning=THINK)])
        endpoint.script("Plain", [Turn(content="42", reasoning=THINK)])
        write_dataset(
            tmp_path / "d.jsonl", [{"prompt": p, "verify": {"python": True}} for p in ("Tool", "Plain")]
        )
        (tmp_path / "transcript_check.py").write_text(TRANSCRIPT_VERIFIER, encoding="utf-8")
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--run_name=t", "--verifier=transcript_check:transcript")
        first = cli.run("--dataset_file=d.jsonl", "--batch_size=2", "--num_workers=1", *flags)
        assert first.returncode == 0, first
        run_dir = cli.run_dir("t")
        ran = {
            human_prompt(e): e["metadata"]["verification"] for e in read_jsonl(run_dir / "trajectories.jsonl")
        }
        endpoint.clear_requests()
        again = cli.run(*flags, "--rescore")
        assert again.returncode == 0, again
        assert endpoint.requests == []
        rescored = {human_prompt(e): e["metadata"] for e in read_jsonl(run_dir / "trajectories.jsonl")}
        assert rescored["Tool"]["reward"] == 1.0 and rescored["Plain"]["reward"] == 0.0
        for prompt, metadata in rescored.items():
            (check,) = metadata["verification"]["checks"]
            (before,) = ran[prompt]["checks"]
            assert check["details"]["sandbox"] is True  # none when re-checking a transcript
            for name in ("kinds", "calls", "final"):  # the transcript read back as the run had it
                assert check["details"][name] == before["details"][name], (prompt, name)
        assert rescored["Tool"]["verification"]["checks"][0]["details"]["calls"] == ["terminal"]
        assert rescored["Tool"]["verification"]["checks"][0]["details"]["final"] == "It is 42."


def test_rescore_with_a_judge_asks_only_the_judge(tmp_path: Path) -> None:
    """A run without checks, re-scored with --judge_model: one judge request per entry and no
    agent request at the endpoint; the verdicts follow the simulated judge's rule."""
    right, wrong = "Right [answer=42]", "Wrong [answer=42 right=1]"
    (tmp_path / "rubric.md").write_text("Pass when the final answer is the task's answer.\n")
    write_dataset(tmp_path / "d.jsonl", [{"prompt": right}, {"prompt": wrong}])
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--run_name=j", "--model_seed=0")
        first = cli.run("--dataset_file=d.jsonl", "--batch_size=2", *flags)
        assert first.returncode == 0, first
        run_dir = cli.run_dir("j")
        assert all("reward" not in e["metadata"] for e in read_jsonl(run_dir / "trajectories.jsonl"))
        endpoint.clear_requests()
        again = cli.run(*flags, "--rescore", "--judge_model=sim-judge", "--judge_rubric=rubric.md")
        assert again.returncode == 0, again
        assert [r.body["model"] for r in endpoint.requests] == ["sim-judge", "sim-judge"]
        rewards = _rewards(run_dir / "trajectories.jsonl")
        assert rewards == {right: 1.0, wrong: 0.0}


def test_a_rescore_leaves_the_runs_record_and_counts_as_the_run_did(tmp_path: Path) -> None:
    """A rescore runs no agent: run_config.json once took this command line's defaults (another
    model, endpoint, sandbox), statistics.json named the default model, and checkpoint.json
    listed no prompt done."""
    with SimulatedEndpoint() as endpoint:
        cli = _run(tmp_path, endpoint, "--model=sim-model")
        run_dir = cli.run_dir("r")
        recorded = (run_dir / "run_config.json").read_bytes()
        checkpoint = read_json(run_dir / "checkpoint.json")
        again = cli.run(*RUN, "--rescore")
    assert again.returncode == 0, again
    assert (run_dir / "run_config.json").read_bytes() == recorded
    assert read_json(run_dir / "statistics.json")["model"] == "sim-model"
    rescored = read_json(run_dir / "checkpoint.json")
    assert sorted(rescored["completed_prompts"]) == sorted(checkpoint["completed_prompts"]) == [0, 1, 2, 3]
    assert rescored["batch_stats"] == checkpoint["batch_stats"]
    assert "Model: sim-model" in " ".join(again.stderr.replace("│", " ").split()), again
