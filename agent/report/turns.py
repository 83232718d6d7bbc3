"""A ShareGPT conversation made ready to read: each `gpt` turn split into its think block, its
text and its tool calls, each call paired with the result that answers it, long texts cut.

Display only, and lenient: text that does not parse as our converter writes it is shown as
text. Calls carry no id in ShareGPT (results do), and the converter writes a turn's results
in the order of its calls, so the n-th `<tool_response>` of the following `tool` turn answers
the n-th call; a result whose tool name differs from its call's is shown on its own instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from agent.export.analysis import is_failure

TEXT_CAP = 4000  # characters kept of one text: the head and the tail, the middle cut
NAME_CAP = 200  # of a name or id (a tool's, a call's, an outcome): the model chooses some
CALLS_CAP = 50  # calls (and results) shown of one turn: the model chooses how many it makes
_THINK = re.compile(r"\A\s*<think>\n?(.*?)\n?</think>\n?", re.DOTALL)
_CALL = re.compile(r"<tool_call>\n?(.*?)\n?</tool_call>\n?", re.DOTALL)
_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.DOTALL)

Turn = dict[str, Any]


def cut(text: str, cap: int = TEXT_CAP) -> str:
    """`text` whole when short; else its head and tail with the count of characters cut."""
    if len(text) <= cap:
        return text
    head, tail = cap * 3 // 4, cap // 4
    return f"{text[:head]}\n… [{len(text) - head - tail:,} characters cut] …\n{text[-tail:]}"


def name(value: Any) -> str:
    """A name or id from an entry, as the page shows it: a string cut at NAME_CAP."""
    return cut(str(value), NAME_CAP)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _pretty(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False)


def split_gpt(value: str) -> Turn:
    """`{"role": "gpt", "think", "text", "calls": [{"name", "args"}]}` of one gpt turn."""
    think = _THINK.match(value)
    rest = value[think.end() :] if think else value
    calls: list[dict[str, Any]] = []

    def take(match: re.Match[str]) -> str:
        call = _json(match.group(1))
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return match.group(0)  # not a call our converter wrote: it stays text
        calls.append({"name": name(call["name"]), "args": cut(_pretty(call.get("arguments")))})
        return ""

    text = _CALL.sub(take, rest).strip()
    if len(calls) > CALLS_CAP:
        text += f"\n[{len(calls) - CALLS_CAP:,} more tool calls of this turn not shown]"
        del calls[CALLS_CAP:]
    return {"role": "gpt", "think": cut(think.group(1)) if think else None, "text": cut(text), "calls": calls}


def split_results(value: str) -> list[dict[str, Any]]:
    """The results of one tool turn: `{"name", "id", "content", "error"}` each."""
    results = []
    for block in _RESPONSE.findall(value)[:CALLS_CAP]:  # those of the calls shown (`split_gpt`)
        parsed = _json(block)
        if not isinstance(parsed, dict):
            results.append({"name": "?", "id": "", "content": cut(block), "error": False})
            continue
        content = parsed.get("content")
        raw = content if isinstance(content, str) else json.dumps(content)
        results.append(
            {
                "name": name(parsed.get("name")),
                "id": name(parsed.get("tool_call_id") or ""),
                "content": cut(_pretty(content)),
                "error": is_failure(raw),
            }
        )
    return results


def _pair(turn: Turn, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attach results to the turn's calls by position; returns those that answer no call."""
    calls, left = turn["calls"], []
    for position, result in enumerate(results):
        if position < len(calls) and calls[position]["name"] == result["name"]:
            calls[position]["result"] = result
        else:
            left.append(result)
    return left


def readable(conversations: Iterable[Any], system_id: Callable[[str], int]) -> list[Turn]:
    """The turns of an entry for the trajectory browser; `system_id` numbers system prompts
    (shared by most entries, so the page holds each text once)."""
    turns: list[Turn] = []
    for raw in conversations:
        if not isinstance(raw, dict):
            continue
        role, value = str(raw.get("from")), str(raw.get("value") or "")
        if role == "system":
            turns.append({"role": "system", "system": system_id(cut(value))})
        elif role == "gpt":
            turns.append(split_gpt(value))
        elif role == "tool":
            results = split_results(value)
            last = turns[-1] if turns and turns[-1]["role"] == "gpt" else None
            left = _pair(last, results) if last is not None else results
            more = max(value.count("<tool_response>") - CALLS_CAP, 0)
            note = f"[{more:,} more tool results of this turn not shown]" if more else ""
            if left or more or not results:
                turns.append({"role": "tool", "results": left, "text": note if results else cut(value)})
        else:
            turns.append({"role": name(role), "text": cut(value)})
    return turns
