"""Token capture end to end: multi-turn tool-calling conversations against the simulated
endpoint over HTTP (the real `openai` SDK, the real CLI and workers), every captured id and
logprob checked against what the endpoint's tokenizer says it produced for each turn, drift
found exactly where the endpoint's drift mode puts it and nowhere else, `--keep_token_drift`.

The expected values are recomputed from each request the endpoint received, with
`agent.servers.simulated.tokenizer` (the prompt it rendered, the reply it generated) and its
logprob function, independently of `TokenTrace`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from agent.batch.events import Discarded, Failed, Finished
from agent.batch.records import TOKEN_DRIFT, answer
from agent.config.agent_config import AgentConfig
from agent.llm.factory import open_chat_model
from agent.loop.agent_loop import converse
from agent.loop.conversation import ConversationResult, Outcome, Prompt
from agent.protocols.tokens import TokenRecord
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.servers.simulated import tokenizer
from agent.servers.simulated.replies import build_completion, first_user_text
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.servers.simulated.token_fields import logprob
from agent.store.layout import TOKENS_FILE, TOKENS_GLOB
from agent.toolbox.registry import resolve_tools
from tests.support.batch import BatchCLI, human_prompt, prompts_dataset, read_json, read_jsonl
from tests.support.batch import job as make_job

MakeEndpoint = Callable[..., SimulatedEndpoint]


def terminal(command: str) -> tuple[str, str]:
    return ("terminal", json.dumps({"command": command}))


# Three conversations of 2 to 4 calls: several calls a turn, non-ASCII text, reasoning on each.
SCRIPTS: dict[str, list[Turn]] = {
    "List the files twice": [
        Turn(reasoning="I will list them first.", tool_calls=(terminal("ls -a"),)),
        Turn(reasoning="And once more, with sizes.", tool_calls=(terminal("echo one"), terminal("echo two"))),
        Turn(reasoning="Enough: I saw them all.", tool_calls=(terminal("printf 'café ✓'"),)),
        Turn(content="The files are listed — twice.", reasoning="The listing is done."),
    ],
    "Say hello": [
        Turn(reasoning="A greeting needs an echo.", tool_calls=(terminal("echo hello"),)),
        Turn(content="hello", reasoning="The echo said it."),
    ],
    "Count to three": [
        Turn(reasoning="Counting in the shell.", tool_calls=(terminal("seq 3"),)),
        Turn(reasoning="Check the last number.", tool_calls=(terminal("seq 3 | tail -1"),)),
        Turn(content="1, 2, 3.", reasoning="It ends at 3."),
    ],
}
DRIFTING = ("reasoning", "whitespace", "merge")
Expected = list[tuple[list[int], list[int], list[float]]]  # per turn: prompt, completion, logprobs


def scripted_endpoint(make_sim_endpoint: MakeEndpoint, drift: str) -> SimulatedEndpoint:
    endpoint: SimulatedEndpoint = make_sim_endpoint(token_drift=drift)
    for prompt, turns in SCRIPTS.items():
        endpoint.script(prompt, turns)
    return endpoint


def expected_turns(endpoint: SimulatedEndpoint, prompt: str, drift: str) -> Expected:
    """What the endpoint gave each call of `prompt`'s conversation, recomputed from the requests
    it received: the prompt it rendered, the ids of the scripted reply, their logprobs."""
    bodies = [
        r.body
        for r in endpoint.requests
        if r.body.get("return_token_ids") and first_user_text(r.body.get("messages") or []) == prompt
    ]
    turns: Expected = []
    for body, turn in zip(bodies, SCRIPTS[prompt], strict=True):
        prompt_ids = tokenizer.prompt_ids(body["messages"], body.get("tools") or [], drift)
        message = build_completion(body, turn, "sim-model")["choices"][0]["message"]
        completion = tokenizer.completion_ids(message, drift)
        turns.append((prompt_ids, completion, [logprob(at, token) for at, token in enumerate(completion)]))
    return turns


def first_drift(turns: Expected) -> tuple[int, int] | None:
    """(turn, position) where a prompt first fails to start with the last prompt + completion."""
    sequence: list[int] = []
    for index, (prompt, completion, _) in enumerate(turns):
        if prompt[: len(sequence)] != sequence:
            same = [a == b for a, b in zip(sequence, prompt, strict=False)]
            return index, same.index(False) if False in same else len(prompt)
        sequence = prompt + completion
    return None


def assert_record_matches(record: TokenRecord, expected: Expected) -> None:
    """Every turn's whole prompt (rebuilt from the sequence kept so far), completion and
    logprobs equal what the endpoint produced; the loss mask covers the generated ids exactly."""
    assert len(record.turns) == len(expected)
    sequence: list[int] = []
    for turn, (prompt, completion, logprobs) in zip(record.turns, expected, strict=True):
        assert sequence[: turn.prompt_offset] + turn.prompt_ids.tolist() == prompt
        assert turn.completion_ids.tolist() == completion
        assert turn.logprobs is not None and turn.logprobs.tolist() == logprobs
        sequence = prompt + completion
    input_ids, mask, probs, spans = record.sequence()
    assert input_ids.tolist() == sequence  # what the model was last given, and generated
    assert [p is not None for p in probs] == [m == 1 for m in mask]
    if record.drift is None:
        assert [input_ids[a:b].tolist() for a, b in spans] == [c for _, c, _ in expected]
        assert sum(mask) == sum(len(c) for _, c, _ in expected)


def injected(expected: Expected, drift: str) -> tuple[int, int] | None:
    """(turn, position) of the drift the endpoint's mode puts in, as its tokenizer says."""
    for index, (prompt, completion, _) in enumerate(expected[:-1]):
        if (at := tokenizer.drift_at(prompt, completion, drift)) is not None:
            return index + 1, at
    return None


def assert_drift_where_injected(record: TokenRecord, expected: Expected, drift: str) -> None:
    where = first_drift(expected)
    assert where == injected(expected, drift)
    if drift == "none":
        assert where is None and record.drift is None
        return
    assert where is not None and record.drift is not None
    assert (record.drift.turn, record.drift.position) == where
    first_prompt, first_completion, _ = expected[0]
    if drift == "reasoning":  # turn 0's reasoning dropped: its <think> id is where it breaks
        assert where == (1, len(first_prompt)) and record.drift.expected[0] == tokenizer.THINK
    if drift == "whitespace":  # turn 0's <|im_end|> became "\n<|im_end|>"
        assert where == (1, len(first_prompt) + len(first_completion) - 1)
        assert record.drift.expected[0] == tokenizer.IM_END and record.drift.got[0] == ord("\n")
    assert record.drift.context.startswith("completion of turn 0, token ")


# ---------------------------------------------------------------- one conversation, in process


async def _conversation(endpoint: SimulatedEndpoint, prompt: str, tmp_path: Path) -> ConversationResult:
    config = AgentConfig(
        model="sim-model",
        base_url=endpoint.base_url,
        max_retries=0,
        capture_tokens="required",
        token_api="vllm",
    )
    options = SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))
    model = open_chat_model(config)
    try:
        spec = make_job(key=f"k-{len(prompt)}").sandbox_spec("tokens")
        return await converse(
            config, model, resolve_tools(["terminal"]), Prompt(prompt, spec), sandbox_factory(options)
        )
    finally:
        await model.aclose()


@pytest.mark.parametrize("drift", ["none", *DRIFTING])
def test_a_conversation_captures_what_the_endpoint_produced_and_its_drift(
    make_sim_endpoint: MakeEndpoint, tmp_path: Path, drift: str
) -> None:
    endpoint = scripted_endpoint(make_sim_endpoint, drift)
    prompt = "List the files twice"
    done = asyncio.run(_conversation(endpoint, prompt, tmp_path))
    assert done.outcome is Outcome.COMPLETED and done.api_calls == 4
    event = answer(make_job(), done, keep_no_reasoning=False, keep_token_drift=drift == "none")
    assert not isinstance(event, Failed) and event.tokens_line is not None
    record = TokenRecord.of(json.loads(event.tokens_line))
    expected = expected_turns(endpoint, prompt, drift)
    assert_record_matches(record, expected)
    assert_drift_where_injected(record, expected, drift)
    assert record.drift == done.token_drift
    if drift == "none":
        assert isinstance(event, Finished) and not event.token_drift
        assert json.loads(event.line)["metadata"]["tokens"] == {
            "id": record.tokens_id,
            "turns": 4,
            "drift": None,
        }
    else:  # not kept here: discarded, its line still made (a later run keeping drift recovers it)
        assert isinstance(event, Discarded) and event.reason == TOKEN_DRIFT
        assert event.entry["metadata"]["tokens"]["id"] == record.tokens_id


# ---------------------------------------------------------------- batch runs through the CLI


def run_batch(tmp_path: Path, endpoint: SimulatedEndpoint, *flags: str) -> Path:
    dataset = prompts_dataset(tmp_path / "d.jsonl", list(SCRIPTS))
    cli = BatchCLI(tmp_path, endpoint)
    # 2 batches (two sidecars), the probe before the first call
    run = cli.run(
        f"--dataset_file={dataset}", "--run_name=tok", "--batch_size=2", "--capture_tokens=required", *flags
    )
    assert run.returncode == 0, run
    assert "token capture:" in run.stdout + run.stderr, run  # the probe's one line
    return cli.run_dir("tok")


def records_by_id(paths: Sequence[Path]) -> dict[str, TokenRecord]:
    records = [TokenRecord.of(line) for path in paths for line in read_jsonl(path)]
    return {r.tokens_id: r for r in records}


@pytest.mark.parametrize("drift", ["none", "merge"])
def test_a_capture_run_writes_each_entrys_tokens_line_for_line(
    make_sim_endpoint: MakeEndpoint, tmp_path: Path, drift: str
) -> None:
    endpoint = scripted_endpoint(make_sim_endpoint, drift)
    run_dir = run_batch(tmp_path, endpoint)
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    merged = [TokenRecord.of(line) for line in read_jsonl(run_dir / TOKENS_FILE)]
    assert sorted(human_prompt(e) for e in entries) == sorted(SCRIPTS)
    assert [e["metadata"]["tokens"]["id"] for e in entries] == [r.tokens_id for r in merged]
    for entry, record in zip(entries, merged, strict=True):
        prompt = human_prompt(entry)
        expected = expected_turns(endpoint, prompt, drift)
        assert record.prompt_key == entry["metadata"]["prompt_key"]
        assert entry["metadata"]["tokens"]["turns"] == len(record.turns) == entry["api_calls"]
        assert_record_matches(record, expected)
        assert_drift_where_injected(record, expected, drift)
        where = (
            None if record.drift is None else {"turn": record.drift.turn, "position": record.drift.position}
        )
        assert entry["metadata"]["tokens"]["drift"] == where
        assert entry["metadata"].get("discard_reasons") == (None if drift == "none" else [TOKEN_DRIFT])
    assert not read_jsonl(run_dir / "discarded.jsonl")
    counts = read_json(run_dir / "statistics.json")["tokens"]
    drifted = 0 if drift == "none" else len(SCRIPTS)
    assert (counts["api"], counts["trajectories"], counts["with_drift"], counts["missing"]) == (
        "vllm",
        len(SCRIPTS),
        drifted,
        0,
    )
    assert counts["turns"] == sum(len(turns) for turns in SCRIPTS.values())


def test_keep_token_drift_false_discards_drifted_entries_with_their_tokens(
    make_sim_endpoint: MakeEndpoint, tmp_path: Path
) -> None:
    endpoint = scripted_endpoint(make_sim_endpoint, "whitespace")
    run_dir = run_batch(tmp_path, endpoint, "--keep_token_drift=false")
    assert not read_jsonl(run_dir / "trajectories.jsonl")
    discarded = read_jsonl(run_dir / "discarded.jsonl")
    assert sorted(d["reason"] for d in discarded) == [TOKEN_DRIFT] * len(SCRIPTS)
    sidecars = records_by_id(sorted(run_dir.glob(TOKENS_GLOB)))
    for record in discarded:
        entry = record["entry"]
        tokens = sidecars[entry["metadata"]["tokens"]["id"]]
        expected = expected_turns(endpoint, human_prompt(entry), "whitespace")
        assert_record_matches(tokens, expected)
        assert_drift_where_injected(tokens, expected, "whitespace")
