"""A conversation's running token sequence (--capture_tokens): each model call's ids become its
assistant turn's `TurnTokens`, and the first turn whose prompt does not extend the sequence so
far is the conversation's `TokenDrift`.

The sequence after a turn is the sequence up to where its prompt kept it, then the rest of the
prompt, then the completion: exactly what `TokenRecord.sequence()` rebuilds from the turns. It
is one `array('i')` of the conversation's own length (4 bytes a token), and each turn keeps only
the part of its prompt that is new (the template around the tool results, without drift), so a
conversation holds about 12 bytes per token (sequence, turns, logprobs) whatever its number of
turns; the full prompt of each call is dropped with its reply.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

from agent.protocols.tokens import DRIFT_SHOWN, TokenCapture, TokenDrift, TurnTokens

PROMPT, COMPLETION = "prompt", "completion"


def common_prefix(a: array[int], b: array[int]) -> int:
    """How many ids `a` and `b` share from their start. One C-level comparison when one extends
    the other (every turn without drift), a bisection of them otherwise: O(n) either way (a
    Python loop over 10^5 ids a turn would cost more than the call's JSON). Array slices, not
    memoryviews: copying and comparing them is ~3x faster (0.45 ms for 200,000 ids), and the
    copy is gone when this returns."""
    n = min(len(a), len(b))
    if _head(a, n) == _head(b, n):
        return n
    same, differs = 0, n  # a[:same] == b[:same]; the first difference is before `differs`
    while differs - same > 1:
        middle = (same + differs) // 2
        if a[same:middle] == b[same:middle]:
            same = middle
        else:
            differs = middle
    return same


def _head(values: array[int], n: int) -> array[int]:
    return values if len(values) == n else values[:n]


class TokenTrace:
    """Fed each model call's `TokenCapture` in order (`add`); keeps the running sequence, what
    each stretch of it was (for a drift's words) and the first drift."""

    def __init__(self) -> None:
        self.sequence = array("i")
        self.turns = 0  # assistant turns added so far
        self.drift: TokenDrift | None = None
        # Where each non-empty stretch of the sequence starts, and (turn, PROMPT|COMPLETION):
        # two a turn, cut with the sequence.
        self._starts: list[int] = []
        self._parts: list[tuple[int, str]] = []

    def add(self, capture: TokenCapture) -> TurnTokens:
        """The call's turn: its prompt from where it leaves the sequence so far, its completion."""
        prompt, turn = capture.prompt_ids, self.turns
        offset = common_prefix(self.sequence, prompt)
        if offset < len(self.sequence):  # the prompt does not extend the sequence: drift
            if self.drift is None:
                self.drift = self._drift(turn, offset, prompt)
            self._cut(offset)
        tokens = TurnTokens(offset, prompt[offset:], capture.completion_ids, capture.logprobs)
        self._extend(turn, PROMPT, tokens.prompt_ids)
        self._extend(turn, COMPLETION, tokens.completion_ids)
        self.turns += 1
        return tokens

    def _drift(self, turn: int, position: int, prompt: array[int]) -> TokenDrift:
        expected = tuple(self.sequence[position : position + DRIFT_SHOWN])
        got = tuple(prompt[position : position + DRIFT_SHOWN])
        return TokenDrift(turn, position, expected, got, self.context(position))

    def context(self, position: int) -> str:
        """What the sequence holds at `position`, in words: "completion of turn 1, token 5" (its
        5th generated id) or "prompt of turn 2, token 40" (that turn's prompt, from its start).
        Ids only: a capture carries no token strings."""
        at = bisect_right(self._starts, position) - 1
        turn, part = self._parts[at]
        index = position - self._starts[at] if part == COMPLETION else position
        return f"{part} of turn {turn}, token {index}"

    def _cut(self, offset: int) -> None:
        del self.sequence[offset:]
        kept = bisect_left(self._starts, offset)  # the stretches starting before the cut
        del self._starts[kept:], self._parts[kept:]

    def _extend(self, turn: int, part: str, values: array[int]) -> None:
        if values:
            self._starts.append(len(self.sequence))
            self._parts.append((turn, part))
            self.sequence.extend(values)
