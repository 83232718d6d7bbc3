"""The text of a configuration file the operator names (an MCP config, a distributions file, a
rubric, prefill messages): read whole, but never more than `MAX_CONFIG_BYTES`.

`--mcp_config=/dev/zero` once read until the kernel killed the runner at 24 GB. Past the limit
the read fails as an OSError (EFBIG), which each reader already turns into its one line.
"""

from __future__ import annotations

import errno
from pathlib import Path

MAX_CONFIG_BYTES = 16 << 20  # far above any configuration; a prefill of long examples fits


def read_config_text(path: str | Path, limit: int = MAX_CONFIG_BYTES) -> str:
    """The file's UTF-8 text (UnicodeDecodeError when it is not UTF-8); OSError when it cannot
    be read or is over `limit` bytes."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"over {limit >> 20} MiB, too large for a configuration file", str(path))
    return data.decode("utf-8")


def unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Why `read_config_text` failed, in a few words: the system's ("No such file or directory",
    the size limit above), else the decoder's."""
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
