"""The embedded server's reasoning through the whole run, without weights: llama.cpp's output is
scripted, everything else is real (the adapter's `build_response` behind an `EndpointServer`,
the openai SDK, the agent loop, a sandbox, the runner). Its grammar makes the model write a
reasoning in every turn, a tool turn's opening with "I will use the <tool> tool to", so
"100 % reasoning" said nothing: the entries and statistics now count that reasoning as forced.
And a reply cut mid-JSON is no answer, not the raw JSON as the answer's text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.servers.embedded.adapter import build_response
from agent.servers.endpoint_server import EndpointServer
from tests.support.batch import API_KEY, BatchCLI, read_json, read_jsonl, write_dataset

TOOL_THEN_ANSWER, CUT = "Say hi with the terminal", "Cut me off"
CUT_OFF = '{"reasoning": "I will use the terminal tool to ec'


def llama_output(body: dict[str, Any]) -> dict[str, Any]:
    """What llama.cpp would have produced under the grammar, by prompt and turn."""
    messages = body.get("messages") or []
    question = next(m["content"] for m in messages if m.get("role") == "user")
    if question == CUT:
        return {"choices": [{"finish_reason": "length", "message": {"content": CUT_OFF}}]}
    if any(m.get("role") == "tool" for m in messages):
        turn: dict[str, Any] = {"reasoning": "The output says hi.", "answer": "It printed hi."}
    else:
        turn = {
            "reasoning": "I will use the terminal tool to echo hi.",
            "tool": "terminal",
            "arguments": {"command": "echo hi"},
        }
    usage = {"prompt_tokens": 10, "completion_tokens": 5}
    return {"choices": [{"finish_reason": "stop", "message": {"content": json.dumps(turn)}}], "usage": usage}


async def respond(body: dict[str, Any]) -> dict[str, Any]:
    return build_response(body, llama_output(body))


def test_forced_reasoning_is_counted_apart_and_a_cut_reply_is_no_answer(tmp_path: Path) -> None:
    with EndpointServer(respond) as server:
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": TOOL_THEN_ANSWER}, {"prompt": CUT}])
        run = BatchCLI(tmp_path).run(
            f"--dataset_file={dataset}", "--batch_size=2", "--run_name=forced", "--num_workers=1",
            f"--base_url={server.base_url}", f"--api_key={API_KEY}", "--distribution=terminal_only",
            "--keep_no_reasoning",
        )  # fmt: skip
    assert run.returncode == 0, run
    run_dir = BatchCLI(tmp_path).run_dir("forced")
    entries = {e["conversations"][1]["value"]: e for e in read_jsonl(run_dir / "trajectories.jsonl")}
    answered = entries[TOOL_THEN_ANSWER]
    assert answered["completed"] and answered["metadata"]["reasoning_forced_turns"] == 2
    cut = entries[CUT]
    assert cut["metadata"]["outcome"] == "truncated" and "reasoning_forced_turns" not in cut["metadata"]
    gpt = [turn["value"] for turn in cut["conversations"] if turn["from"] == "gpt"]
    assert gpt and all('"reasoning"' not in value for value in gpt), gpt  # no raw JSON answer
    reasoning = read_json(run_dir / "statistics.json")["reasoning_statistics"]
    assert reasoning["turns_with_reasoning"] == reasoning["turns_with_forced_reasoning"] == 2
    assert reasoning["total_assistant_turns"] == 3 and reasoning["model_written_coverage_percent"] == 0.0
    summary = " ".join(run.stderr.replace("│", " ").split())
    assert (
        "2 of those turns' reasoning was forced by the endpoint's output grammar: 0.00% written by the model"
        in (summary)
    )
