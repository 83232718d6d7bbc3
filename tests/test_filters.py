"""The well-formedness filter end to end: a real batch run (worker processes, the real loop
through the real openai SDK against the simulated endpoint) discards malformed conversations
whole into discarded.jsonl, one reason each, counted in statistics.json; `--keep_malformed`
keeps them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.test_batch_support import BatchCLI, human_prompt, prompts_dataset, read_json, read_jsonl

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
}
REASONS = {
    "leaked call": ["leaked_tool_call"],
    "bad arguments": ["invalid_arguments"],
    "array arguments": ["invalid_arguments"],
    "not offered": ["tool_not_offered"],
    "not offered, no reasoning": ["tool_not_offered", "no_reasoning"],
}


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
    assert stats["discarded"] == {"leaked_tool_call": 1, "invalid_arguments": 2, "tool_not_offered": 2}


def test_keep_malformed_keeps_them_but_other_filters_still_apply(tmp_path: Path) -> None:
    run_dir, discarded = run(tmp_path, "--keep_malformed")

    assert {prompt: d["reason"] for prompt, d in discarded.items()} == {
        "not offered, no reasoning": "no_reasoning"
    }
    kept = {human_prompt(e): e for e in read_jsonl(run_dir / "trajectories.jsonl")}
    assert sorted(kept) == sorted(set(SCRIPTS) - {"not offered, no reasoning"})
    assert read_json(run_dir / "run_config.json")["keep_malformed"] is True
    gpt = kept["not offered"]["conversations"][2]["value"]
    assert '"name": "web_search"' in gpt  # kept as the model made it


def test_resume_keeps_what_every_applying_filter_now_keeps_without_model_calls(tmp_path: Path) -> None:
    """--resume --keep_malformed moves the malformed discards into the output, except the one
    that also had no reasoning (its other filter is still on); no request reaches the endpoint."""
    run_dir, _ = run(tmp_path)
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        resumed = cli.run(
            f"--dataset_file={tmp_path / 'p.jsonl'}", "--batch_size=10", "--run_name=r", "--num_workers=1",
            "--distribution=terminal_only", "--resume", "--keep_malformed",
        )  # fmt: skip
        assert resumed.returncode == 0, resumed
        assert endpoint.requests == []
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    recovered = sorted(human_prompt(e) for e in entries)
    assert recovered == sorted(p for p in SCRIPTS if p != "not offered, no reasoning")
    assert all("discard_reasons" not in e["metadata"] for e in entries)
    again = BatchCLI(tmp_path).run(
        f"--dataset_file={tmp_path / 'p.jsonl'}", "--batch_size=10", "--run_name=r", "--num_workers=1",
        "--distribution=terminal_only", "--resume", "--keep_malformed", "--keep_no_reasoning",
        "--base_url=http://127.0.0.1:9/v1", "--api_key=unused-key",
    )  # fmt: skip
    assert again.returncode == 0, again
    final = [human_prompt(e) for e in read_jsonl(run_dir / "trajectories.jsonl")]
    assert sorted(final) == sorted(SCRIPTS)  # each once
