"""vLLM's token fields on a simulated reply, when the request asks for them.

The shapes follow vLLM's OpenAI-compatible server (vllm/entrypoints/openai/chat_completion/
protocol.py on main, vllm/entrypoints/openai/protocol.py from v0.10.2 until it moved):
`ChatCompletionRequest.return_token_ids` → `ChatCompletionResponse.prompt_token_ids` (top level)
and `ChatCompletionResponseChoice.token_ids`; `logprobs`/`top_logprobs` →
`choices[0].logprobs = {"content": [ChatCompletionLogProbsContent]}`, each entry
`{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}`, one per
generated id (`return_tokens_as_token_ids`: each "token" is "token_id:N"). A request that asks
for neither gets the reply it always got, byte for byte.

Ids come from `agent.servers.simulated.tokenizer` (the prompt rendered with the endpoint's drift
mode); a logprob is a function of the id and its position in the completion, in (-10, 0].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.servers.simulated import tokenizer

_MAX_TOP = 20  # OpenAI's and vLLM's limit on top_logprobs


def wants_tokens(body: Mapping[str, Any]) -> bool:
    """Whether the request asks for any token field (ids or logprobs)."""
    return bool(body.get("return_token_ids")) or bool(body.get("logprobs"))


def logprob(position: int, token_id: int) -> float:
    """The simulated log-probability of `token_id` generated at `position` (deterministic)."""
    mixed = (position * 2654435761 + token_id * 40503 + 12345) % 4294967291
    return -(mixed % 9_999_991) / 1_000_000  # (-10, 0]: a cheap, well-spread integer hash


def add_token_fields(completion: dict[str, Any], body: Mapping[str, Any], drift: str) -> None:
    """Add what `body` asks for (ids, logprobs, true usage counts) to `completion` in place."""
    choice = completion["choices"][0]
    tools = body.get("tools") or []
    prompt = tokenizer.prompt_ids(body.get("messages") or [], tools, drift)
    generated = tokenizer.completion_ids(choice["message"], drift)
    if body.get("return_token_ids"):
        completion["prompt_token_ids"] = prompt
        choice["token_ids"] = generated
    if body.get("logprobs"):
        top = min(max(int(body.get("top_logprobs") or 0), 0), _MAX_TOP)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choice["logprobs"] = {
            "content": [_entry(at, token, top, as_ids) for at, token in enumerate(generated)]
        }
    usage = completion["usage"]
    usage["prompt_tokens"], usage["completion_tokens"] = len(prompt), len(generated)
    usage["total_tokens"] = len(prompt) + len(generated)
    thought = tokenizer.reasoning_of(choice["message"])
    reasoning_ids = len(tokenizer.encode(f"<think>\n{thought}\n</think>\n")) if thought is not None else 0
    usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_ids}


def _entry(position: int, token_id: int, top: int, as_ids: bool) -> dict[str, Any]:
    chosen = _logprob_item(token_id, logprob(position, token_id), as_ids)
    # The chosen id first, then its neighbours in the vocabulary, each less likely than the last.
    others = [(token_id + k) % tokenizer.VOCAB_SIZE for k in range(1, top)]
    alternatives = [_logprob_item(other, chosen["logprob"] - k, as_ids) for k, other in enumerate(others, 1)]
    return {**chosen, "top_logprobs": [dict(chosen), *alternatives][:top]}


def _logprob_item(token_id: int, value: float, as_ids: bool) -> dict[str, Any]:
    """One token's entry; `as_ids` (vLLM's return_tokens_as_token_ids): "token_id:N" as its text."""
    data = tokenizer.piece(token_id)
    text = f"token_id:{token_id}" if as_ids else data.decode("utf-8", errors="replace")
    return {"token": text, "logprob": value, "bytes": list(data)}
