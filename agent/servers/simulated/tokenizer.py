"""The simulated model's tokenizer and chat template: deterministic ids for any text, so token
capture and the drift check can be tested against exact, recomputable values.

Ids 0..255 are the UTF-8 bytes; then `SPECIALS` (atomic wherever their text appears); then
`MERGES`, multi-byte pieces chosen greedily (longest first). A merge never holds a newline and
encoding starts afresh after each one, so a chat turn's header ("assistant\\n") never merges with
its body: in the default mode turn k+1's prompt starts with turn k's prompt + completion ids.

The template is ChatML-like (Qwen's shape): `<|im_start|>{role}\\n{text}<|im_end|>\\n` per
message, tools listed in the system turn, an assistant body of
`<think>\\n{reasoning}\\n</think>\\n{content}` then one `\\n<tool_call>\\n{json}\\n</tool_call>` per call
(name and arguments, never the call's id: the server assigns those). A reply's completion is
`encode(assistant_body(message)) + [IM_END]`, exactly what the message renders to when it comes
back in the history, reasoning included only when the client sends it back.

Drift modes (`DRIFT_MODES`) re-render what came before, as real templates and tokenizers do:
- "reasoning": earlier assistant turns lose their reasoning (Qwen3's template drops it). Drift at
  the first earlier turn with reasoning, at the start of its completion (its `<think>` id).
- "whitespace": earlier assistant bodies end with one more "\\n" before `<|im_end|>`. Drift at
  the first earlier assistant turn, at its completion's last id (`IM_END` becomes "\\n").
- "merge": the model "sampled" the first merged piece of each completion byte by byte
  (a non-canonical tokenization of the same text); the history re-encodes it canonically. Drift
  at the first earlier turn whose completion has a merge, at `first_merge(canonical ids)`.
`drift_at` computes each of these positions from one call's ids. Without a drift mode a reply in
the `scratchpad` reasoning style drifts too: the model wrote <REASONING_SCRATCHPAD>, the
template writes the reasoning sent back in <think>, as with a model that ignores its template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

DRIFT_MODES = ("none", "reasoning", "whitespace", "merge")
TOKEN_APIS = ("vllm", "none")  # whose token fields the endpoint answers ("none": it ignores them)
SPECIALS = (
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|endoftext|>",
)
IM_START, IM_END, THINK, THINK_END, TOOL_CALL, TOOL_CALL_END, END_OF_TEXT = range(256, 256 + len(SPECIALS))
# Common English and JSON pieces (none holds a newline: see the module's docstring).
MERGES = (
    *("th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te", "of"),
    *("ed", "is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou", "le", "ve"),
    *(" t", " a", " s", " i", " o", " w", " c", " p", " b", " f", " m", " d", " h", "e ", "s "),
    *("the", " the", "ing", "and", "ion", "tool", '": "', '", "', '{"', '"}', "  ", "    "),
)
FIRST_MERGE = 256 + len(SPECIALS)
VOCAB_SIZE = FIRST_MERGE + len(MERGES)
_PIECES: tuple[bytes, ...] = (
    tuple(bytes([b]) for b in range(256))
    + tuple(s.encode() for s in SPECIALS)
    + tuple(m.encode() for m in MERGES)
)
_IDS = {piece: token for token, piece in enumerate(_PIECES) if not 256 <= token < FIRST_MERGE}


def _trie(pieces: Sequence[bytes]) -> bytes:
    """A regex matching the longest of `pieces` at a position (a trie: each byte tried once;
    an alternation of the pieces, tried one after another, took four times as long)."""
    heads = sorted({p[0] for p in pieces if p})
    branches = []
    for head in heads:
        tails = [p[1:] for p in pieces if p and p[0] == head]
        rest = _trie(tails)
        optional = b"?" if rest and b"" in tails else b""
        branches.append(re.escape(bytes([head])) + (b"(?:" + rest + b")" + optional if rest else b""))
    return b"|".join(branches)


# Greedy longest match, else one byte; scanned in C (a 150 kB prompt in ~60 ms, where a
# byte-by-byte Python loop took ~900).
_PIECE = re.compile(b"(?:" + _trie([m.encode() for m in MERGES]) + b")|.", re.DOTALL)
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
_SPECIAL_IDS = {s: 256 + index for index, s in enumerate(SPECIALS)}


def encode(text: str) -> list[int]:
    """The ids of `text`: specials atomic, the rest greedy longest-match (no merge holds a
    newline, so each line is encoded on its own)."""
    ids: list[int] = []
    for part in _SPECIAL_SPLIT.split(text):
        special = _SPECIAL_IDS.get(part)
        if special is not None:
            ids.append(special)
        elif part:
            ids.extend(map(_IDS.__getitem__, _PIECE.findall(part.encode())))
    return ids


def piece(token_id: int) -> bytes:
    """The bytes one id stands for."""
    return _PIECES[token_id]


def decode(ids: Sequence[int]) -> str:
    """The text of `ids` (a lone piece of a multi-byte character decodes as U+FFFD)."""
    return b"".join(_PIECES[i] for i in ids).decode("utf-8", errors="replace")


def first_merge(ids: Sequence[int]) -> int | None:
    """The index of the first merged (multi-byte, non-special) id in `ids`, if any."""
    return next((index for index, token in enumerate(ids) if token >= FIRST_MERGE), None)


def split_first_merge(ids: Sequence[int]) -> list[int]:
    """`ids` with its first merged id replaced by its bytes: the same text, tokenized otherwise."""
    at = first_merge(ids)
    if at is None:
        return list(ids)
    return [*ids[:at], *_PIECES[ids[at]], *ids[at + 1 :]]


# ---------------------------------------------------------------- the chat template


def text_of(content: Any) -> str:
    """Message content as the template writes it: a string, or its parts (images as <image>)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    return str(content)


def _part_text(part: Any) -> str:
    if not isinstance(part, Mapping):
        return ""
    return str(part.get("text", "")) if part.get("type", "text") == "text" else "<image>"


def reasoning_of(message: Mapping[str, Any]) -> str | None:
    """The reasoning a message carries back: reasoning_content, reasoning, or reasoning_details."""
    for field in ("reasoning_content", "reasoning"):
        value = message.get(field)
        if isinstance(value, str) and value:
            return value
    details = message.get("reasoning_details")
    if isinstance(details, list):
        joined = "".join(str(d.get("text") or "") for d in details if isinstance(d, Mapping))
        return joined or None
    return None


def _arguments(raw: Any) -> Any:
    """Tool-call arguments as the template writes them: parsed JSON (so any equivalent spelling
    the client sends back renders alike), the raw string when it is not JSON."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def assistant_body(message: Mapping[str, Any], *, reasoning: bool = True) -> str:
    """What the template writes between `<|im_start|>assistant\\n` and `<|im_end|>`."""
    text = ""
    thought = reasoning_of(message) if reasoning else None
    if thought is not None:
        text = f"<think>\n{thought}\n</think>\n"
    text += text_of(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, Mapping) else {}
        named = {"name": function.get("name"), "arguments": _arguments(function.get("arguments"))}
        text += f"\n<tool_call>\n{json.dumps(named, ensure_ascii=False)}\n</tool_call>"
    return text


def _tools_block(tools: Sequence[Mapping[str, Any]]) -> str:
    listed = "\n".join(json.dumps(tool.get("function", tool), ensure_ascii=False) for tool in tools)
    return f"# Tools\n<tools>\n{listed}\n</tools>"


def _turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def render(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    add_generation_prompt: bool = True,
    drift: str = "none",
) -> str:
    """The prompt text of a chat request (`drift`: how earlier assistant turns are re-rendered)."""
    return "".join(_turns(messages, tools, add_generation_prompt, drift))


def _turns(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], generation: bool, drift: str
) -> list[str]:
    """The prompt's text one message at a time (each starts with a special token)."""
    out: list[str] = []
    head = messages[0] if messages else {}
    if tools:
        system = text_of(head.get("content")) + "\n\n" if head.get("role") == "system" else ""
        out.append(_turn("system", system + _tools_block(tools)))
    for index, message in enumerate(messages):
        role = str(message.get("role") or "user")
        if index == 0 and tools and role == "system":
            continue
        if role == "assistant":
            body = assistant_body(message, reasoning=drift != "reasoning")
            out.append(_turn(role, body + "\n" if drift == "whitespace" else body))
        elif role == "tool":
            out.append(_turn(role, f"<tool_response>\n{text_of(message.get('content'))}\n</tool_response>"))
        else:
            out.append(_turn(role, text_of(message.get("content"))))
    if generation:
        out.append("<|im_start|>assistant\n")
    return out


@lru_cache(maxsize=64)
def _system_ids(text: str) -> tuple[int, ...]:
    """A system turn's ids: the same system prompt and tools open every request of a run."""
    return tuple(encode(text))


def prompt_ids(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = (), drift: str = "none"
) -> list[int]:
    """The ids of the prompt the endpoint gives the model (what `prompt_token_ids` says);
    `encode(render(...))`, one turn at a time (a special token starts each, so they never merge)."""
    ids: list[int] = []
    for turn in _turns(messages, tools, True, drift):
        ids.extend(_system_ids(turn) if turn.startswith("<|im_start|>system\n") else encode(turn))
    return ids


def completion_ids(message: Mapping[str, Any], drift: str = "none") -> list[int]:
    """The ids the model generated for `message` (what `choices[0].token_ids` says)."""
    ids = [*encode(assistant_body(message)), IM_END]
    return split_first_merge(ids) if drift == "merge" else ids


def drift_at(prompt: Sequence[int], completion: Sequence[int], drift: str) -> int | None:
    """Where the next prompt departs from `prompt + completion` (one call's ids) under `drift`,
    None where it keeps them; the first call for which this is not None is the drifting turn.
    "reasoning" assumes the client sends the reasoning back in a field, as ours does."""
    if drift == "reasoning":
        return len(prompt) if completion[:1] == [THINK] else None
    if drift == "whitespace":
        return len(prompt) + len(completion) - 1
    if drift == "merge":
        at = first_merge(encode(decode(completion)))
        return None if at is None else len(prompt) + at
    return None
