"""Handing the free pages of the process's heap back to the system.

glibc's malloc gives memory back to the system only from the top of its heap. A run's parent
frees most of what it allocates (each result line parsed: ~9 KB of objects) between the few
objects it keeps, so the pages in between stay resident: at 50,000 prompts the parent's RSS
had grown 406 bytes a prompt, of which `malloc_trim(0)` gave back 179 (issue 26: memory at a
million prompts). `trim` asks for that; where the C library has no `malloc_trim` (musl,
macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        release = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None
    release.argtypes, release.restype = [ctypes.c_size_t], ctypes.c_int
    return release


def trim() -> bool:
    """Give the heap's free pages back to the system; whether the C library could."""
    release = _malloc_trim()
    if release is None:
        return False
    release(0)
    return True
