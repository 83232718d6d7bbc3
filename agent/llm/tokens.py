"""Token APIs: how to ask an OpenAI-compatible server for a chat call's token ids and
logprobs, and how to read them from its reply into a `TokenCapture` (`ModelReply.tokens`).

Each server spells it its own way, so each is one `TokenAPI` in `TOKEN_APIS`, tried in that
order by the start-up probe (`agent.llm.token_probe`); a run then uses the one that answered.
The shapes below were read from the servers' own source (cited beside each; no code copied):

- vLLM, `vllm/entrypoints/openai/protocol.py` at vllm-project/vllm@ec3b890c14b0 (the field
  came with PR #22587, released in v0.10.2; with a reasoning parser the choice's ids were
  missing until PR #28256, 2025-11: such a reply fails here as one without ids): request
  `ChatCompletionRequest.return_token_ids` (bool), `logprobs` (bool), `top_logprobs` (int, 0:
  only the sampled token's); response `ChatCompletionResponse.prompt_token_ids` (top level,
  list[int]), `ChatCompletionResponseChoice.token_ids` (list[int]) and `.logprobs.content[i]`
  (`ChatCompletionLogProbsContent`: token, logprob, bytes, top_logprobs), one per generated
  token.
- SGLang, `python/sglang/srt/entrypoints/openai/serving_chat.py` `_build_chat_response` and
  sgl-project/sglang PRs #30917 (merged 2026-07, `return_token_ids` on chat completions) and
  #35225 (merged 2026-08, the choice's `token_ids` renamed `response_token_ids`): request
  `return_token_ids`, `logprobs`, `top_logprobs`; response per choice: `prompt_token_ids`,
  `response_token_ids` (older builds: `token_ids`), `logprobs.content[i].logprob`. Builds before
  #30917 had only `return_prompt_token_ids` (no completion ids on chat): not usable here.
- llama.cpp's server (`tools/server/README.md`, ggml-org/llama.cpp@25d5b0c53f9a) returns the
  generated ids only on its native `/completion` (`return_tokens` → `tokens`) and never the
  prompt's on `/v1/chat/completions`: no entry here, the probe finds none.

Whatever the server sends is checked before it is kept: ids are ints within int32 and not
negative, logprobs finite and not above zero (beyond rounding), one logprob per completion id,
and no list longer than any real context (a hostile endpoint must not crash or bloat a run).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.protocols.tokens import TokenCapture

# Longer than any context window served today (2M tokens), and still only 8 MiB as int32: a
# reply claiming more is broken or hostile. Completions are far shorter than prompts.
MAX_PROMPT_IDS = 2**21
MAX_COMPLETION_IDS = 2**20
# A log-probability is at most 0; half-precision kernels round a certain token's to a hair above.
LOGPROB_SLACK = 1e-3

# The byte of each int32 that holds its sign, and the bytes that leave it clear: one C-speed
# pass tells a negative id apart without a Python loop over every id of a long prompt.
_SIGN_BYTES = slice(3, None, 4) if sys.byteorder == "little" else slice(0, None, 4)
_NON_NEGATIVE = bytes(range(128))


class TokenReplyError(ValueError):
    """A reply to a token request whose ids or logprobs are missing or unusable."""


@dataclass(frozen=True)
class TokenAPI:
    name: str
    server: str  # what serves it, in words (the probe's line)
    fields: Mapping[str, Any]  # added to the request body
    read: Callable[[Mapping[str, Any], Mapping[str, Any]], TokenCapture]  # (completion, choice)


def token_ids(value: Any, limit: int, what: str) -> array[int]:
    """`value` as int32 ids; TokenReplyError naming `what` when it is no list of ids."""
    if not isinstance(value, list):
        raise TokenReplyError(f"{what} is not a list (got {type(value).__name__})")
    if len(value) > limit:
        raise TokenReplyError(f"{what} holds {len(value)} ids (at most {limit} are kept)")
    if not set(map(type, value)) <= {int}:  # bool is a subclass of int, so checked by type
        raise TokenReplyError(f"{what} holds something other than integers")
    try:
        ids = array("i", value)
    except OverflowError:
        raise TokenReplyError(f"{what} holds an id beyond 32 bits") from None
    if ids.tobytes()[_SIGN_BYTES].translate(None, _NON_NEGATIVE):
        raise TokenReplyError(f"{what} holds a negative id")
    return ids


def content_logprobs(choice: Mapping[str, Any], count: int) -> array[float] | None:
    """The sampled tokens' logprobs of OpenAI's `choice.logprobs.content` (None when the
    server sent none), one per completion id; TokenReplyError when they cannot be."""
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, dict) else None
    if content is None:
        return None
    if not isinstance(content, list) or len(content) != count:
        shown = len(content) if isinstance(content, list) else type(content).__name__
        raise TokenReplyError(f"logprobs.content has {shown} entries for {count} completion ids")
    try:
        values = [entry["logprob"] for entry in content]
    except (TypeError, KeyError):
        raise TokenReplyError("logprobs.content holds an entry without a logprob") from None
    if not set(map(type, values)) <= {float, int}:
        raise TokenReplyError("logprobs.content holds a logprob that is not a number")
    probs = array("d", values)
    if not all(map(math.isfinite, probs)) or (probs and max(probs) > LOGPROB_SLACK):
        raise TokenReplyError("logprobs.content holds a logprob that is not finite and at most 0")
    return probs


def _capture(prompt: Any, completion: Any, choice: Mapping[str, Any], names: tuple[str, str]) -> TokenCapture:
    if prompt is None or completion is None:
        missing = [name for name, value in zip(names, (prompt, completion), strict=True) if value is None]
        raise TokenReplyError(f"gave no token ids ({' and '.join(missing)} missing)")
    prompt_ids = token_ids(prompt, MAX_PROMPT_IDS, names[0])
    if not prompt_ids:
        raise TokenReplyError(f"gave no token ids ({names[0]} is empty)")
    completion_ids = token_ids(completion, MAX_COMPLETION_IDS, names[1])
    return TokenCapture(prompt_ids, completion_ids, content_logprobs(choice, len(completion_ids)))


def read_vllm(completion: Mapping[str, Any], choice: Mapping[str, Any]) -> TokenCapture:
    """vLLM: the prompt's ids at the top level, the choice's own beside its message."""
    names = ("prompt_token_ids", "choices[0].token_ids")
    return _capture(completion.get("prompt_token_ids"), choice.get("token_ids"), choice, names)


def read_sglang(completion: Mapping[str, Any], choice: Mapping[str, Any]) -> TokenCapture:
    """SGLang: both lists on the choice; the completion's under its newer name or its older."""
    generated = choice.get("response_token_ids")
    if generated is None:
        generated = choice.get("token_ids")
    names = ("choices[0].prompt_token_ids", "choices[0].response_token_ids")
    return _capture(choice.get("prompt_token_ids"), generated, choice, names)


# The same request asks both servers (vLLM first: the reference shape); their replies differ.
_ASK = {"return_token_ids": True, "logprobs": True, "top_logprobs": 0}
TOKEN_APIS: dict[str, TokenAPI] = {
    api.name: api
    for api in (
        # vllm/entrypoints/openai/protocol.py @ec3b890c14b0: ChatCompletionRequest/-Response
        TokenAPI("vllm", "vLLM >= 0.10.2", _ASK, read_vllm),
        # python/sglang/srt/entrypoints/openai/serving_chat.py, after PRs #30917 and #35225
        TokenAPI("sglang", "SGLang with return_token_ids on chat completions", _ASK, read_sglang),
    )
}


def find_api(name: str) -> TokenAPI:
    """The API called `name`; ValueError naming the known ones when there is none."""
    try:
        return TOKEN_APIS[name]
    except KeyError:
        raise ValueError(f"unknown token API {name!r} (known: {', '.join(TOKEN_APIS)})") from None
