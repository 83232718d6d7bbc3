"""Names: a server's name is its toolset's, and each tool it lists gets a name the OpenAI
function API accepts (`^[a-zA-Z0-9_-]{1,64}$`). A listed name that does not fit is mapped
deterministically (other characters become `_`, cut to fit, a hash of the original appended),
so every process and every run of the same config names it the same."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_NAME = 64


def toolset_name_problem(name: str) -> str | None:
    """Why `name` cannot name a toolset (it is used in distributions and `toolsets_used`)."""
    if not FUNCTION_NAME.fullmatch(name):
        return "a server's name is its toolset's: letters, digits, _ and - only (at most 64)"
    from tools import FAMILIES  # the package's own __init__: loaded before this module anyway

    if name == "all" or name in {family.name for family in FAMILIES}:
        return f"{name!r} is a built-in toolset's name; give the server another"
    return None


def function_names(prefix: str, listed: Iterable[str]) -> list[str]:
    """The names offered to the model for a server's tools listed as `listed` (same order)."""
    out: list[str] = []
    for remote in listed:
        name = prefix + remote
        if not FUNCTION_NAME.fullmatch(name) or name in out:
            name = _mapped(name)
        out.append(name)
    return out


def _mapped(name: str) -> str:
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    plain = re.sub(r"[^a-zA-Z0-9_-]", "_", name)[: MAX_NAME - len(digest) - 1] or "tool"
    return f"{plain}_{digest}"
