"""Token capture for reinforcement learning: what one model call returned, what each assistant
turn keeps, the drift between turns, and the sidecar record of a trajectory.

The ids of a whole conversation are kept once, as one running sequence: each assistant turn
holds the part of its prompt that is new (`TurnTokens.prompt_ids`, from `prompt_offset` on)
and what the model generated. Without drift, turn k's prompt is the sequence so far, so
`prompt_offset` is its length and the turn adds only the template's tokens around the tool
results; with drift (`TokenDrift`: the endpoint rendered an earlier turn differently, or its
tokenizer merged across a boundary) `prompt_offset` is the first differing position and the
sequence is cut there. Either way every turn's exact prompt can be rebuilt, and the sequence
after the last turn is exactly what the model was last given plus what it last generated.

Ids are `array('i')` and log-probabilities `array('d')`: 4 and 8 bytes a token, where a tuple of
ints costs 36 (a 4,096-in-flight run holds every open conversation's ids).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# --capture_tokens: off (text only), auto (capture when the endpoint can, else one warning and
# text-only data), required (an endpoint that cannot give ids stops the run at start).
TOKEN_CAPTURE_MODES = ("off", "auto", "required")
DRIFT_SHOWN = 8  # ids shown on each side of a drift


def ids(values: Sequence[int]) -> array[int]:
    return array("i", values)


def floats(values: Sequence[float]) -> array[float]:
    return array("d", values)


def _stored_ids(values: Sequence[int]) -> array[int]:
    """Ids read back from a file: ValueError for what no tokenizer gives (as the client refuses
    it from an endpoint), never an OverflowError from deep inside a reader."""
    try:
        read = ids(values)
    except OverflowError:
        raise ValueError("an id beyond 32 bits") from None
    if read and min(read) < 0:
        raise ValueError("a negative id")
    return read


@dataclass(frozen=True)
class TokenCapture:
    """What one chat-completions call returned besides its text (`ModelReply.tokens`)."""

    prompt_ids: array[int]  # every id the model was given (the rendered prompt)
    completion_ids: array[int]  # every id it generated, in order
    logprobs: array[float] | None  # one per completion id, when the endpoint gave them


@dataclass(frozen=True)
class TurnTokens:
    """An assistant turn's tokens (`AssistantTurn.tokens`): its prompt from `prompt_offset` on,
    and what the model generated."""

    prompt_offset: int  # ids of the conversation's sequence this turn's prompt kept
    prompt_ids: array[int]  # the prompt from prompt_offset on (the whole prompt on turn 0)
    completion_ids: array[int]
    logprobs: array[float] | None

    def record(self, turn: int) -> dict[str, Any]:
        """The turn's object in a sidecar line (`turn`: its index among the assistant turns)."""
        return {
            "turn": turn,
            "prompt_offset": self.prompt_offset,
            "prompt_ids": self.prompt_ids.tolist(),
            "completion_ids": self.completion_ids.tolist(),
            "logprobs": None if self.logprobs is None else self.logprobs.tolist(),
        }


@dataclass(frozen=True)
class TokenDrift:
    """The first turn whose prompt does not start with the sequence so far."""

    turn: int  # index of the assistant turn (among the assistant turns, 0-based)
    position: int  # first differing position in the sequence
    expected: tuple[int, ...]  # up to DRIFT_SHOWN ids of the sequence from `position`
    got: tuple[int, ...]  # up to DRIFT_SHOWN ids of the turn's prompt from `position`
    context: str  # what the sequence held there, in words: "completion of turn 1, token 5 ('foo')"

    def record(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "position": self.position,
            "expected": list(self.expected),
            "got": list(self.got),
            "context": self.context,
        }

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> TokenDrift:
        return cls(
            int(data["turn"]),
            int(data["position"]),
            tuple(int(i) for i in data["expected"]),
            tuple(int(i) for i in data["got"]),
            str(data["context"]),
        )


@dataclass(frozen=True)
class TokenSupport:
    """What the endpoint gives, found by one probe call at the CLI edge."""

    api: str | None  # the request style that gave ids ("vllm", "sglang", ...); None: none did
    prompt_ids: bool
    completion_ids: bool
    logprobs: bool
    detail: str = ""  # why not, when it cannot

    @property
    def usable(self) -> bool:
        return self.api is not None and self.prompt_ids and self.completion_ids


@dataclass(frozen=True)
class TokenRecord:
    """One line of a token sidecar (`tokens_N.jsonl`, merged: `tokens.jsonl`): a trajectory's
    tokens, bound to its entry by `tokens_id` (also in the entry's `metadata.tokens.id`)."""

    tokens_id: str  # 32 hex digits, made per attempt by the worker
    prompt_key: str
    prompt_index: int
    turns: tuple[TurnTokens, ...]  # one per assistant turn the model produced, in order
    drift: TokenDrift | None

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens_id": self.tokens_id,
            "prompt_key": self.prompt_key,
            "prompt_index": self.prompt_index,
            "turns": [t.record(i) for i, t in enumerate(self.turns)],
            "drift": None if self.drift is None else self.drift.record(),
        }

    def line(self) -> bytes:
        """The JSONL line (ids and floats only: no secret can be in it, nor a lone surrogate)."""
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False).encode() + b"\n"

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> TokenRecord:
        """A record from its parsed line; KeyError, TypeError or ValueError when it is none."""
        turns = tuple(
            TurnTokens(
                int(t["prompt_offset"]),
                _stored_ids(t["prompt_ids"]),
                _stored_ids(t["completion_ids"]),
                None if t["logprobs"] is None else floats(t["logprobs"]),
            )
            for t in data["turns"]
        )
        drift = data["drift"]
        return cls(
            str(data["tokens_id"]),
            str(data["prompt_key"]),
            int(data["prompt_index"]),
            turns,
            None if drift is None else TokenDrift.of(drift),
        )

    def sequence(self) -> tuple[array[int], array[int], list[float | None], list[tuple[int, int]]]:
        """(input_ids, loss_mask, logprobs, completion spans) of the whole trajectory: what the
        model was last given plus what it last generated; the mask is 1 on every id the model
        generated that is still where it generated it (a drift cuts the sequence: completions
        after the cut are given, not generated, from then on); one span per non-empty completion
        still in place, so the mask is 1 exactly inside the spans. ValueError when a turn's
        offset or logprobs do not fit (`_check_turn`)."""
        seq, mask, probs = array("i"), array("i"), list[float | None]()
        spans: list[tuple[int, int]] = []
        for index, turn in enumerate(self.turns):
            _check_turn(index, turn, len(seq))
            del seq[turn.prompt_offset :], mask[turn.prompt_offset :], probs[turn.prompt_offset :]
            spans = [(a, min(b, turn.prompt_offset)) for a, b in spans if a < turn.prompt_offset]
            seq.extend(turn.prompt_ids)
            mask.extend([0] * len(turn.prompt_ids))
            probs.extend([None] * len(turn.prompt_ids))
            start = len(seq)
            seq.extend(turn.completion_ids)
            mask.extend([1] * len(turn.completion_ids))
            given = turn.logprobs if turn.logprobs is not None else [None] * len(turn.completion_ids)
            probs.extend(given)
            if len(seq) > start:  # an empty completion has no span (one at the end was kept, others cut)
                spans.append((start, len(seq)))
        return seq, mask, probs, spans


def _check_turn(index: int, turn: TurnTokens, length: int) -> None:
    """ValueError when `turn` cannot follow a sequence of `length` ids: an offset out of it (a
    negative one would cut from the end) or logprobs not one per completion id (every later
    logprob would sit on the wrong id)."""
    if not 0 <= turn.prompt_offset <= length:
        raise ValueError(
            f"turn {index}: prompt_offset {turn.prompt_offset} is outside the {length} ids before it"
        )
    if turn.logprobs is not None and len(turn.logprobs) != len(turn.completion_ids):
        raise ValueError(
            f"turn {index}: {len(turn.logprobs)} logprobs for {len(turn.completion_ids)} completion ids"
        )
