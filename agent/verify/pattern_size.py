"""How large a regex becomes once compiled, counted before the compiler is asked.

The `regex` engine writes out every required repeat: `(?:x{10000}){10000}`, 19 characters,
compiles to 10^8 nodes (24 GiB here, minutes, then the kernel's OOM killer), and a compiled
`x{100000}` holds 15 MB. `expanded_size` counts the atoms a pattern stands for with each
`{m}`, `{m,}` and `{m,n}` multiplying what it repeats by m (an optional repeat is not written
out), nested repeats multiplying each other. It reads the pattern only lexically: escapes, sets
and group openers are skipped over, the branches of an alternation add up, and a comment or
a verbose-mode space counts as an atom, so it can overcount and never undercounts by more
than that.
"""

from __future__ import annotations

import re

_REPEAT = re.compile(r"\{(\d*)(?:,(\d*))?\}")
_BRACED_ESCAPES = "pPNxuUgk"  # \p{L}, \N{name}, \x{41}, \g<1>, \k<name>: their braces are no repeat


def expanded_size(pattern: str, limit: int) -> int:
    """The atoms `pattern` compiles to (over-counted, see the module); past `limit`, the first
    count over it (the counting stops there, so a huge pattern costs no more than that)."""
    frames: list[list[int]] = [[0, 0]]  # per open group: [atoms so far, atoms of its last atom]
    i = 0
    while i < len(pattern):
        frame = frames[-1]
        repeat = _REPEAT.match(pattern, i) if pattern[i] == "{" else None
        if repeat is not None:
            times = max(int(repeat.group(1) or 0), 1)
            frame[0] += frame[1] * (times - 1)
            frame[1] *= times
            i = repeat.end()
        elif pattern[i] == "(":
            frames.append([0, 0])
            i += 1
        elif pattern[i] == ")" and len(frames) > 1:
            inner = frames.pop()[0]
            frames[-1][0] += inner
            frames[-1][1] = inner
            i += 1
        else:
            frame[0] += 1
            frame[1] = 1
            i = _atom_end(pattern, i)
        if frames[-1][0] > limit:  # a group's atoms count at least once in the whole pattern
            return frames[-1][0]
    return sum(frame[0] for frame in frames)  # groups left open count too (the compiler refuses them)


def _atom_end(pattern: str, i: int) -> int:
    """Where the atom starting at `i` ends: an escape with its braced name, a whole set, or one
    character (a quantifier sign such as `*` counts as one atom: an overcount by one)."""
    ch = pattern[i]
    if ch == "\\":
        if i + 2 < len(pattern) and pattern[i + 1] in _BRACED_ESCAPES and pattern[i + 2] in "{<":
            close = pattern.find("}" if pattern[i + 2] == "{" else ">", i + 3)
            return len(pattern) if close < 0 else close + 1
        return min(i + 2, len(pattern))
    if ch == "[":
        return _set_end(pattern, i)
    return i + 1


def _set_end(pattern: str, i: int) -> int:
    """The end of the set opening at `i`: `]` first (or after `^`) is a member; nested sets of
    the engine's set operations count in."""
    depth, j = 0, i
    while j < len(pattern):
        ch = pattern[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "[":
            depth += 1
            j += 1
            if pattern.startswith("^", j):
                j += 1
            if pattern.startswith("]", j):
                j += 1
            continue
        if ch == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(pattern)
