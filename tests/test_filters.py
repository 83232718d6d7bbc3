"""The well-formedness filter end to end: a real batch run (worker processes, the real loop
through the real openai SDK against the simulated endpoint) discards malformed conversations
whole into discarded.jsonl, one reason each, counted in statistics.json; `--keep_malformed`
keeps them, labelled with what is wrong with them; a resume re-applies the filters both ways."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, human_prompt, prompts_dataset, read_json, read_jsonl

THINK = "Let me think about this first."
SCRIPTS: dict[str, list[Turn]] = {
    "well formed": [
        Turn(reasoning=THINK, tool_calls=(("terminal", json.dumps({"command": "echo hi"})),)),
        Turn(content="All done.", reasoning=THINK),
    ],
    # the call is written in the text instead of being made
    "leaked call": [
        Turn(
            content='<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>',
            reasoning=THINK,
        )
    ],
    "bad arguments": [
        Turn(reasoning=THINK, tool_calls=(("terminal", '{"command": "echo hi"'),)),
        Turn(content="Tried.", reasoning=THINK),
    ],
    "array arguments": [
        Turn(reasoning=THINK, tool_calls=(("terminal", '["echo hi"]'),)),
        Turn(content="Tried.", reasoning=THINK),
    ],
    # terminal_only offers the terminal and file tools; web_search exists, but not for this prompt
    "not offered": [
        Turn(reasoning=THINK, tool_calls=(("web_search", json.dumps({"query": "weather"})),)),
        Turn(content="Searched.", reasoning=THINK),
    ],
    "not offered, no reasoning": [
        Turn(tool_calls=(("web_search", json.dumps({"query": "weather"})),)),
        Turn(content="Searched."),
    ],
    # a tool no toolset has: the merge used to drop such an entry, kept or not
    "no such tool": [
        Turn(reasoning=THINK, tool_calls=(("teleport", json.dumps({"to": "mars"})),)),
        Turn(content="Could not.", reasoning=THINK),
    ],
}
REASONS = {
    "leaked call": ["leaked_tool_call"],
    "bad arguments": ["invalid_arguments"],
    "array arguments": ["invalid_arguments"],
    "not offered": ["tool_not_offered"],
    "not offered, no reasoning": ["tool_not_offered", "no_reasoning"],
    "no such tool": ["tool_not_offered"],
}
MALFORMED = sorted(p for p in REASONS if p != "not offered, no reasoning")  # what --keep_malformed keeps


def run(tmp_path: Path, *flags: str) -> tuple[Path, dict[str, Any]]:
    """A terminal_only run of every script; its directory and {prompt: discard record}."""
    with SimulatedEndpoint() as endpoint:
        for prompt, turns in SCRIPTS.items():
            endpoint.script(prompt, turns)
        cli = BatchCLI(tmp_path, endpoint)
        dataset = prompts_dataset(tmp_path / "p.jsonl", list(SCRIPTS))
        done = cli.run(
            f"--dataset_file={dataset}", "--batch_size=10", "--run_name=r", "--num_workers=1",
            "--distribution=terminal_only", *flags,
        )  # fmt: skip
    assert done.returncode == 0, done
    run_dir = cli.run_dir("r")
    return run_dir, {human_prompt(d["entry"]): d for d in read_jsonl(run_dir / "discarded.jsonl")}


def resume(tmp_path: Path, *flags: str) -> str:
    """--resume against an endpoint that is never reached (filters re-apply without a model
    call); the runner's stderr."""
    done = BatchCLI(tmp_path).run(
        f"--dataset_file={tmp_path / 'p.jsonl'}", "--batch_size=10", "--run_name=r", "--num_workers=1",
        "--distribution=terminal_only", "--resume", "--base_url=http://127.0.0.1:9/v1",
        "--api_key=unused-key", *flags,
    )  # fmt: skip
    assert done.returncode == 0, done
    return done.stderr


def output_labels(run_dir: Path) -> dict[str, list[str] | None]:
    """{prompt: metadata.discard_reasons} of trajectories.jsonl (None: no label)."""
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    return {human_prompt(e): e["metadata"].get("discard_reasons") for e in entries}


def current_discards(run_dir: Path) -> set[str]:
    """The prompts of discarded.jsonl not in the output (a recovered record stays in the log)."""
    kept = set(output_labels(run_dir))
    return {human_prompt(d["entry"]) for d in read_jsonl(run_dir / "discarded.jsonl")} - kept


def test_malformed_conversations_are_discarded_whole_with_one_reason_each(tmp_path: Path) -> None:
    run_dir, discarded = run(tmp_path)

    assert {prompt: d["reason"] for prompt, d in discarded.items()} == {p: r[0] for p, r in REASONS.items()}
    for prompt, record in discarded.items():
        entry = record["entry"]
        assert entry["metadata"]["discard_reasons"] == REASONS[prompt]
        assert entry["conversations"][1] == {"from": "human", "value": prompt}  # kept whole
    kept = read_jsonl(run_dir / "trajectories.jsonl")
    assert [human_prompt(e) for e in kept] == ["well formed"]
    assert "discard_reasons" not in kept[0]["metadata"]
    stats = read_json(run_dir / "statistics.json")
    assert stats["discarded"] == {"leaked_tool_call": 1, "invalid_arguments": 2, "tool_not_offered": 3}


def test_keep_malformed_keeps_them_labelled_and_other_filters_still_apply(tmp_path: Path) -> None:
    """Kept flawed entries say what is wrong with them (metadata.discard_reasons and the
    export's column); an entry calling a tool that does not exist is in the output (the merge
    dropped it: "corrupted 1", exit 0, no record anywhere)."""
    run_dir, discarded = run(tmp_path, "--keep_malformed", "--export=parquet")

    assert {prompt: d["reason"] for prompt, d in discarded.items()} == {
        "not offered, no reasoning": "no_reasoning"
    }
    kept = {human_prompt(e): e for e in read_jsonl(run_dir / "trajectories.jsonl")}
    assert sorted(kept) == sorted(set(SCRIPTS) - {"not offered, no reasoning"})
    assert output_labels(run_dir) == {"well formed": None, **{p: REASONS[p] for p in MALFORMED}}
    assert read_json(run_dir / "run_config.json")["keep_malformed"] is True
    gpt = kept["not offered"]["conversations"][2]["value"]
    assert '"name": "web_search"' in gpt  # kept as the model made it
    rows = pq.read_table(run_dir / "export" / "trajectories.parquet").to_pylist()
    column = {
        next(t["value"] for t in r["conversations"] if t["from"] == "human"): r["discard_reasons"]
        for r in rows
    }
    assert column == {"well formed": [], **{p: REASONS[p] for p in MALFORMED}}
    stats = read_json(run_dir / "statistics.json")
    assert stats["completion"]["in_output"] == len(kept) and stats["completion"]["exit_code"] == 0
    assert stats["merge"]["written"] == len(kept)


def test_resume_re_applies_filters_both_ways_without_model_calls(tmp_path: Path) -> None:
    """--resume --keep_malformed moves the malformed discards into the output (labelled), except
    the one that also had no reasoning; --resume without it moves them back to discarded.jsonl;
    with it again, into the output. The endpoint is never reached."""
    run_dir, _ = run(tmp_path)
    resume(tmp_path, "--keep_malformed")
    assert output_labels(run_dir) == {"well formed": None, **{p: REASONS[p] for p in MALFORMED}}
    assert current_discards(run_dir) == {"not offered, no reasoning"}

    err = resume(tmp_path)  # without --keep_malformed: they leave the output
    assert output_labels(run_dir) == {"well formed": None}
    assert current_discards(run_dir) == set(REASONS)
    moved = [d for d in read_jsonl(run_dir / "discarded.jsonl") if d.get("moved_from_output")]
    assert sorted(human_prompt(d["entry"]) for d in moved) == MALFORMED
    assert all(d["entry"]["metadata"]["discard_reasons"] == REASONS[human_prompt(d["entry"])] for d in moved)
    stats = read_json(run_dir / "statistics.json")
    assert stats["withdrawn_entries"] == {
        "invalid_arguments": 2,
        "leaked_tool_call": 1,
        "tool_not_offered": 2,
    }
    assert (stats["completion"]["in_output"], stats["completion"]["discarded"]) == (1, len(REASONS))
    assert "moved 2 kept tool_not_offered entries to discarded.jsonl" in err
    # their records deleted: put back from their shards, and moved out again by the same filters
    records = [
        d for d in read_jsonl(run_dir / "discarded.jsonl") if human_prompt(d["entry"]) not in MALFORMED
    ]
    (run_dir / "discarded.jsonl").write_text("".join(json.dumps(d) + "\n" for d in records))
    err = resume(tmp_path)
    assert "5 entries moved out of the output have no record in discarded.jsonl" in " ".join(err.split()), err
    assert output_labels(run_dir) == {"well formed": None}
    assert current_discards(run_dir) == set(REASONS)

    resume(tmp_path, "--keep_malformed")  # and back
    assert output_labels(run_dir) == {"well formed": None, **{p: REASONS[p] for p in MALFORMED}}
    resume(tmp_path, "--keep_malformed", "--keep_no_reasoning")
    final = [human_prompt(e) for e in read_jsonl(run_dir / "trajectories.jsonl")]
    assert sorted(final) == sorted(SCRIPTS)  # each once
