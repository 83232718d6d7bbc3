"""A local sandbox's environment: an allowlist of the host's variables, and the slot's own."""

from __future__ import annotations

import os
from collections.abc import Mapping

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "USER")  # plus LC_*; everything else is dropped


def passed_env() -> dict[str, str]:
    """The host's environment variables a sandbox's commands get (`PASSED_ENV`, LC_*)."""
    # Names first, then only the passed values: os.environ decodes each value it yields.
    environ = os.environ
    return {k: environ[k] for k in [k for k in environ if k in PASSED_ENV or k.startswith("LC_")]}


def scrubbed_env(root: str, bash: str, passed: Mapping[str, str]) -> dict[str, str]:
    """An allowlisted environment: no API keys or other host secrets reach commands."""
    env = dict(passed)
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(TERM="dumb", HOME=os.path.join(root, "home"), TMPDIR=os.path.join(root, "tmp"), SHELL=bash)
    return env
