"""--keep=all|passing|best end to end: `batch_runner.py` as a subprocess against the simulated
endpoint over HTTP; what is not kept goes whole to discarded.jsonl with its reason, comes
back on --resume with another --keep without a model call, and a pass killed between its
discard record and its tombstone ends exactly once."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

from agent.batch.keeping import apply_keep, keep_at_end
from agent.config.agent_config import AgentConfig
from agent.config.run_config import RunConfig, kept_by
from agent.config.verify_config import KEEP_MODES, VerifyOptions
from agent.report import RunReport
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.store.directory import RunDirectory
from tests.support.batch import BatchCLI, human_prompt, read_json, read_jsonl, write_dataset

THINK = "Let me answer."
ANSWERS = {"Right 0": "42", "Right 1": "The answer is 42", "Wrong 0": "41", "Wrong 1": "I do not know"}
FLAGS = (
    "--dataset_file=d.jsonl",
    "--batch_size=2",
    "--run_name=k",
    "--num_workers=1",
    "--answer_match=contains",
)


def _setup(tmp_path: Path, endpoint: SimulatedEndpoint) -> BatchCLI:
    for prompt, answer in ANSWERS.items():
        endpoint.script(prompt, [Turn(content=answer, reasoning=THINK)])
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p, "verify": {"answer": "42"}} for p in ANSWERS])
    return BatchCLI(tmp_path, endpoint)


def _output(run_dir: Path) -> Counter[str]:
    return Counter(human_prompt(e) for e in read_jsonl(run_dir / "trajectories.jsonl"))


def _current_discards(run_dir: Path, output: Counter[str]) -> dict[str, dict[str, Any]]:
    """Each prompt's last discard record, for the prompts not in the output."""
    last = {human_prompt(r["entry"]): r for r in read_jsonl(run_dir / "discarded.jsonl")}
    return {prompt: record for prompt, record in last.items() if prompt not in output}


def test_keep_passing_discards_the_rest_whole_and_resume_with_all_brings_them_back(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = _setup(tmp_path, endpoint)
        first = cli.run(*FLAGS, "--keep=passing")
        assert first.returncode == 0, first
        run_dir = cli.run_dir("k")
        assert _output(run_dir) == Counter(["Right 0", "Right 1"])
        discards = _current_discards(run_dir, _output(run_dir))
        assert set(discards) == {"Wrong 0", "Wrong 1"}
        for record in discards.values():
            assert record["reason"] == "not_passing"
            assert record["entry"]["metadata"]["verification"]["passed"] is False  # the whole entry
        stats = read_json(run_dir / "statistics.json")
        assert stats["keep"] == {"mode": "passing", "not_kept": {"not_passing": 2}, "decided_short": 0}
        assert stats["completion"]["exit_code"] == 0
        assert stats["withdrawn_entries"] == {"not_passing": 2}
        said = " ".join((first.stdout + first.stderr).split())  # the summary says so, not "none"
        assert "Moved from the output to discarded.jsonl: not_passing 2" in said, said

        endpoint.clear_requests()
        back = cli.run(*FLAGS, "--resume", "--keep=all")
        assert back.returncode == 0, back
        assert endpoint.requests == []  # moved from discarded.jsonl: no model call
        assert _output(run_dir) == Counter(list(ANSWERS))
        stats = read_json(run_dir / "statistics.json")
        assert stats["recovered_discards"] == {"not_passing": 2}
        assert stats["keep"]["not_kept"] == {}

        again = cli.run(*FLAGS, "--resume", "--keep=passing")
        assert again.returncode == 0, again
        assert endpoint.requests == []
        assert _output(run_dir) == Counter(["Right 0", "Right 1"])
        assert read_json(run_dir / "statistics.json")["withdrawn_entries"] == {"not_passing": 2}
        still = cli.run(*FLAGS, "--resume", "--keep=passing")  # nothing moves: the discards stay counted
        assert still.returncode == 0, still
        stats = read_json(run_dir / "statistics.json")
        assert (stats["withdrawn_entries"], stats["discarded"]) == ({}, {})
        assert stats["current_discards"] == {"not_passing": 2}
        said = " ".join((still.stdout + still.stderr).split())
        assert "In discarded.jsonl now (the whole run): not_passing 2" in said, said
        report = RunReport(run_dir)
        report.write()
        assert report.digest.discards == Counter({"not_passing": 2})  # each prompt's current record, once
        lines = [e for path in run_dir.glob("batch_*.jsonl") for e in read_jsonl(path)]
        wrong = [e for e in lines if "Wrong 0" in json.dumps(e.get("conversations"))]
        assert len(wrong) == 2  # its result line, and again when kept back: each followed by a tombstone
        assert sum(1 for e in lines if e.get("discarded")) == 4


def _add_sample(run_dir: Path, entry: dict[str, Any], sample: int, reward: float | None, turns: int) -> None:
    """A copy of `entry` as another sample of its prompt, with its own reward and turn count."""
    copy = json.loads(json.dumps(entry))
    metadata = copy["metadata"]
    prompt_id = metadata["prompt_key"]
    metadata.update(prompt_key=f"{prompt_id}#{sample}", prompt_id=prompt_id, sample_index=sample)
    if reward is None:
        metadata.pop("reward"), metadata.pop("verification")
    else:
        metadata["reward"] = reward
        metadata["verification"] = {"passed": reward == 1.0, "checks": []}
    gpt = next(t for t in copy["conversations"] if t["from"] == "gpt")
    rest = [t for t in copy["conversations"] if t["from"] != "gpt"]
    copy["conversations"] = rest + [gpt] * turns
    with (run_dir / f"batch_{metadata['batch_num']}.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(copy) + "\n")


def _kept_samples(run_dir: Path) -> dict[str, int]:
    return {
        human_prompt(e): e["metadata"].get("sample_index", 0)
        for e in read_jsonl(run_dir / "trajectories.jsonl")
    }


def test_keep_best_keeps_one_per_prompt_by_reward_then_turns_then_sample(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = _setup(tmp_path, endpoint)
        assert cli.run(*FLAGS).returncode == 0
        run_dir = cli.run_dir("k")
        entries = {human_prompt(e): e for e in read_jsonl(run_dir / "trajectories.jsonl")}
        _add_sample(run_dir, entries["Right 0"], 1, 1.0, 1)  # a tie in all but the sample index
        _add_sample(run_dir, entries["Right 1"], 1, 1.0, 3)  # more turns: loses to sample 0
        _add_sample(run_dir, entries["Wrong 0"], 1, 0.5, 2)  # a higher reward wins
        _add_sample(run_dir, entries["Wrong 1"], 1, None, 1)  # no reward ranks below 0.0
        endpoint.clear_requests()
        best = cli.run(*FLAGS, "--resume", "--keep=best", "--samples_per_prompt=2")
        assert best.returncode == 0, best
        assert endpoint.requests == []
        assert _kept_samples(run_dir) == {"Right 0": 0, "Right 1": 0, "Wrong 0": 1, "Wrong 1": 0}
        output = _output(run_dir)
        assert output == Counter(list(ANSWERS))  # exactly one per prompt
        records = [r for r in read_jsonl(run_dir / "discarded.jsonl")]
        assert {(human_prompt(r["entry"]), r["prompt_key"].endswith("#1"), r["reason"]) for r in records} == {
            ("Right 0", True, "not_best"),
            ("Right 1", True, "not_best"),
            ("Wrong 0", False, "not_best"),
            ("Wrong 1", True, "not_best"),
        }
        stats = read_json(run_dir / "statistics.json")
        assert stats["keep"]["not_kept"] == {"not_best": 4}

        back = cli.run(*FLAGS, "--resume", "--keep=all", "--samples_per_prompt=2")
        assert back.returncode == 0, back
        assert endpoint.requests == []
        assert _output(run_dir) == Counter({p: 2 for p in ANSWERS})
        assert read_json(run_dir / "statistics.json")["recovered_discards"] == {"not_best": 4}


def test_a_pass_killed_between_its_discard_record_and_tombstone_ends_exactly_once(tmp_path: Path) -> None:
    """The half-done state of a withdrawal, made by hand: the discard record of `Wrong 0` is
    appended, its tombstone is not. A resume finishes the move; one with --keep=all keeps it."""
    with SimulatedEndpoint() as endpoint:
        cli = _setup(tmp_path, endpoint)
        assert cli.run(*FLAGS).returncode == 0
        run_dir = cli.run_dir("k")
        wrong = next(e for e in read_jsonl(run_dir / "trajectories.jsonl") if human_prompt(e) == "Wrong 0")
        key = wrong["metadata"]["prompt_key"]
        record = {"prompt_key": key, "prompt_index": wrong["prompt_index"], "reason": "not_passing"}
        with (run_dir / "discarded.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({**record, "moved_from_output": True, "entry": wrong}) + "\n")
        endpoint.clear_requests()

        kept = cli.run(*FLAGS, "--resume", "--keep=all")
        assert kept.returncode == 0, kept
        assert _output(run_dir) == Counter(list(ANSWERS))  # in the output once, not among the discards
        assert "Wrong 0" not in _current_discards(run_dir, _output(run_dir))

        passing = cli.run(*FLAGS, "--resume", "--keep=passing")
        assert passing.returncode == 0, passing
        assert endpoint.requests == []
        output = _output(run_dir)
        assert output == Counter(["Right 0", "Right 1"])
        assert set(_current_discards(run_dir, output)) == {"Wrong 0", "Wrong 1"}


def _entry(prompt_id: str, sample: int, reward: float) -> dict[str, Any]:
    key = prompt_id if sample == 0 else f"{prompt_id}#{sample}"
    metadata = {"prompt_key": key, "prompt_id": prompt_id, "sample_index": sample, "batch_num": 0}
    verification = {"passed": reward == 1.0, "checks": []}
    conversations = [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]
    return {
        "prompt_index": 0,
        "conversations": conversations,
        "metadata": {**metadata, "reward": reward, "verification": verification},
    }


def test_best_waits_for_a_prompts_samples_until_the_run_ends(tmp_path: Path) -> None:
    """At a run's start a prompt with samples still to run is left as it is; at its end (the
    missing ones failed) it is decided among those present, and counted as such."""
    config = RunConfig(
        dataset_file="d.jsonl",
        batch_size=10,
        run_name="b",
        agent=AgentConfig(),
        output_dir=str(tmp_path),
        samples_per_prompt=3,
        verify=VerifyOptions(keep="best"),
    )
    store = RunDirectory(config.run_dir)
    store.lock()
    try:
        store.repair()
        for sample, reward in ((0, 0.0), (1, 1.0)):
            store.append_result(0, _entry("p:0", sample, reward))
        start = apply_keep(config, store, store.scan(), final=False)
        assert (start.withdrawn, start.short) == (Counter(), 0)
        # Another prompt whose third sample another filter discarded: all in, decided at once.
        for sample, reward in ((0, 1.0), (1, 0.5)):
            store.append_result(0, _entry("q:0", sample, reward))
        third = _entry("q:0", 2, 1.0)
        store.append_discard({"prompt_key": "q:0#2", "reason": "no_reasoning", "entry": third})
        decided = apply_keep(config, store, store.scan(), final=False)
        assert (decided.withdrawn, decided.short) == (Counter({"not_best": 1}), 0)
        end, tombstoned = keep_at_end(config, store)
        assert (end.withdrawn, end.short, tombstoned) == (Counter({"not_best": 1}), 1, {"p:0", "q:0#1"})
        assert store.scan().done == {"p:0#1", "q:0"}
    finally:
        store.close()


def test_keep_all_with_no_discard_record_takes_only_the_tombstones(tmp_path: Path) -> None:
    """The common end of a run: nothing for --keep=all to judge, so the end's scan holds no key
    a prompt, and a tombstone (a later reference's, with no discard record) still withdraws."""
    config = RunConfig(
        dataset_file="d.jsonl", batch_size=10, run_name="t", agent=AgentConfig(), output_dir=str(tmp_path)
    )
    store = RunDirectory(config.run_dir)
    store.lock()
    try:
        store.repair()
        for key in ("a:0", "b:0"):
            store.append_result(0, _entry(key, 0, 1.0))
        store.append_result(0, {"prompt_index": 1, "discarded": True, "metadata": {"prompt_key": "b:0"}})
        end, tombstoned = keep_at_end(config, store)
        assert (end.withdrawn, end.recovered, tombstoned) == (Counter(), Counter(), {"b:0"})
        store.append_discard({"prompt_key": "c:0", "reason": "not_passing", "entry": _entry("c:0", 0, 0.0)})
        back, tombstoned = keep_at_end(config, store)  # a record to judge: the whole pass, as before
        assert (back.recovered, tombstoned) == (Counter({"not_passing": 1}), {"b:0"})
        assert store.scan().done == {"a:0", "c:0"}
    finally:
        store.close()


def test_keep_modes_keep_the_other_modes_reasons() -> None:
    def keeps(mode: str, reason: str) -> bool:
        config = RunConfig(dataset_file="d", batch_size=1, run_name="r", agent=AgentConfig())
        return dataclasses.replace(config, verify=VerifyOptions(keep=mode)).keeps(reason)

    assert [keeps(mode, "not_passing") for mode in KEEP_MODES] == [True, False, True]
    assert [keeps(mode, "not_best") for mode in KEEP_MODES] == [True, True, False]
    assert kept_by("not_best") == "--keep=all" and kept_by("no_reasoning") == "--keep_no_reasoning"


def test_keep_best_with_samples_keeps_exactly_one_per_prompt(tmp_path: Path) -> None:
    """Two real samples of each prompt, the same answers: one per prompt stays (the tie goes
    to sample 0), the other is a not_best discard; --keep=all on --resume brings it back."""
    with SimulatedEndpoint() as endpoint:
        cli = _setup(tmp_path, endpoint)
        best = cli.run(*FLAGS, "--samples_per_prompt=2", "--keep=best")
        assert best.returncode == 0, best
        run_dir = cli.run_dir("k")
        assert _kept_samples(run_dir) == dict.fromkeys(ANSWERS, 0)
        assert _output(run_dir) == Counter(list(ANSWERS))
        records = read_jsonl(run_dir / "discarded.jsonl")
        assert sorted((r["reason"], r["prompt_id"], r["sample_index"]) for r in records) == sorted(
            ("not_best", r["entry"]["metadata"]["prompt_id"], 1) for r in records
        )
        assert len(records) == 4
        endpoint.clear_requests()
        back = cli.run(*FLAGS, "--samples_per_prompt=2", "--resume")
        assert back.returncode == 0, back
        assert endpoint.requests == []
        assert _output(run_dir) == Counter({prompt: 2 for prompt in ANSWERS})


def test_entries_moved_out_whose_discard_records_are_gone_come_back_not_lost(tmp_path: Path) -> None:
    """discarded.jsonl deleted after a --keep run: its tombstones alone once counted as discards,
    so a resume said "Done", exit 0, with the moved attempts in neither file. A withdrawal
    writes its record first, so a tombstone without one is an edit: the entry (still in its
    shard) comes back into the output without a model call and --keep judges it again."""
    with SimulatedEndpoint() as endpoint:
        cli = _setup(tmp_path, endpoint)
        assert cli.run(*FLAGS, "--keep=passing").returncode == 0
        run_dir = cli.run_dir("k")
        (run_dir / "discarded.jsonl").unlink()
        endpoint.clear_requests()
        again = cli.run(*FLAGS, "--resume", "--keep=passing")
        assert again.returncode == 0, again
        assert endpoint.requests == []
        said = " ".join((again.stdout + again.stderr).split())
        assert "2 entries moved out of the output have no record in discarded.jsonl" in said, said
        output = _output(run_dir)
        assert output == Counter(["Right 0", "Right 1"])
        assert set(_current_discards(run_dir, output)) == {"Wrong 0", "Wrong 1"}
        assert read_json(run_dir / "statistics.json")["completion"]["discarded"] == 2

        (run_dir / "discarded.jsonl").unlink()
        assert cli.run(*FLAGS, "--resume", "--keep=all").returncode == 0
        assert _output(run_dir) == Counter(list(ANSWERS))
