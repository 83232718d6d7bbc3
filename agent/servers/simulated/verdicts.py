"""Right and wrong answers by rule, and the judge model: what checked runs are tested against.

**Right or wrong by rule.** A conversation whose first user message carries a marker ends
with a known final answer (the whole reply; the policy's tool call still comes first):

    [answer=42]                  every sample answers "42"
    [answer=42 right=0,2]        "42" when the request's `seed` is 0 or 2, a wrong answer otherwise
    [answer=42 right=0,2 of=4]   "42" when seed % 4 is 0 or 2
    [answer=42 right=none]       always wrong (right=all: always right, as without `right`)

The endpoint sees only the request, so the sample is told by its `seed`: with
`--model_seed=S` sample s sends seed S+s (a request without one counts as seed 0). The answer
is one token (no spaces or `]`). A wrong answer is the number plus one for a number ("43"),
else "I do not know". Prompts without a marker get the default policy's reply, unchanged.

**The judge.** A request for a model named `sim-judge` or `sim-judge-…` gets a judge's structured
reply `{"score": 1.0|0.0, "passed": true|false, "rationale": "..."}`, whatever its history
(scripts do not apply). It passes when the text in the request's last
`<final_answer>…</final_answer>` contains the expected text (case-insensitive): the rubric's
`[expect=TEXT]` marker, else the task's `[answer=TEXT …]`; with neither, any non-empty final
answer passes. The model name chooses a misbehaviour, for the judge's retries:

    sim-judge-malformed       never JSON
    sim-judge-malformed-N     not JSON for the first N tries of one judgement (a try is counted by
                              the assistant messages in the request: the judge sends its bad replies back)
    sim-judge-fenced          the JSON in a ```json fence with prose around it
    sim-judge-unstructured    HTTP 400 to a request carrying `response_format`, as servers without it
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent.servers.faults import EndpointFault
from agent.servers.simulated.replies import Turn

JUDGE = "sim-judge"  # the simulated judge's model name, and the prefix of its variants
_MARKER = re.compile(r"\[answer=([^\]\s]+)((?:[ \t]+[a-z]+=[^\]\s]*)*)\]")
_EXPECT = re.compile(r"\[expect=([^\]]+)\]")
_MALFORMED_N = re.compile(r"sim-judge-malformed-(\d+)")


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _is_right(options: Mapping[str, str], seed: int) -> bool:
    right = options.get("right", "all")
    if right in ("all", "none"):
        return right == "all"
    wanted = {int(s) for s in right.split(",") if s.strip().lstrip("-").isdigit()}
    modulus = int(options["of"]) if options.get("of", "").isdigit() and int(options["of"]) > 0 else None
    return (seed % modulus if modulus else seed) in wanted


def wrong_answer(answer: str) -> str:
    """A wrong answer to `answer`: a number plus one, else a refusal."""
    try:
        number = int(answer)
    except ValueError:
        try:
            return f"{float(answer) + 1:g}"
        except ValueError:
            return "I do not know"
    return str(number + 1)


def marked_answer(first_user_text: str, seed: object) -> str | None:
    """The final answer the rule gives this conversation, or None when its prompt has no marker."""
    found = _MARKER.search(first_user_text)
    if found is None:
        return None
    options = dict(pair.split("=", 1) for pair in found.group(2).split())
    number = seed if isinstance(seed, int) and not isinstance(seed, bool) else 0
    answer = found.group(1)
    return answer if _is_right(options, number) else wrong_answer(answer)


def is_judge(model: object) -> bool:
    return isinstance(model, str) and (model == JUDGE or model.startswith(f"{JUDGE}-"))


def _verdict(request_text: str) -> dict[str, Any]:
    _, tagged, after = request_text.rpartition("<final_answer>")
    final = after.partition("</final_answer>")[0].strip() if tagged else ""
    expect = _EXPECT.search(request_text) or _MARKER.search(request_text)
    expected = expect.group(1).strip() if expect else None
    if expected is None:
        passed, why = bool(final), "a final answer was given" if final else "there is no final answer"
    else:
        passed = expected.lower() in final.lower()
        why = f"the final answer {'contains' if passed else 'lacks'} {expected!r}"
    return {"score": 1.0 if passed else 0.0, "passed": passed, "rationale": f"Judged by rule: {why}."}


def judge_turn(body: Mapping[str, Any]) -> Turn:
    """The judge's reply to a request for a `sim-judge` model."""
    model = str(body.get("model"))
    if model == f"{JUDGE}-unstructured" and "response_format" in body:
        return Turn(fault=EndpointFault(400, "response_format is not supported (simulated)"))
    return Turn(content=_judge_reply(model, body.get("messages") or []))


def _judge_reply(model: str, messages: Sequence[Mapping[str, Any]]) -> str:
    tries = sum(1 for message in messages if message.get("role") == "assistant")
    counted = _MALFORMED_N.fullmatch(model)
    if model == f"{JUDGE}-malformed" or (counted is not None and tries < int(counted.group(1))):
        return "I think the attempt mostly works, score it high."
    verdict = json.dumps(_verdict("\n".join(_text(m) for m in messages if m.get("role") == "user")))
    if model == f"{JUDGE}-fenced":
        return f"Here is my verdict:\n```json\n{verdict}\n```\nThat is all."
    return verdict
