"""The secrets a process of ours starts with, and how they are kept from every /proc/<pid>.

A command in a local sandbox runs as our user, so it can read `/proc/<pid>/environ` and
`/proc/<pid>/cmdline` of the runner and its workers. Those files show a process's ORIGINAL
environment and argv, whatever `os.environ` says later, and a spawned worker inherits the
environment. So `conceal()`, called by a script before its heavy imports, re-executes the
script once without them: argv minus `--api_key=...`, environment minus `SECRET_VARIABLES`,
the values handed to the new image over an inherited pipe that it reads to the end and
closes at once. Nothing of ours then holds a secret in its environ or cmdline, and the key
reaches the workers only inside the pickled config (multiprocessing's spawn pipe).
PR_SET_DUMPABLE 0 also keeps a non-root command of the same user out of our /proc/<pid>/mem
and environ. Root can still read process memory: that is the limit of this protection.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from agent.common.redaction import install
from agent.common.stop_signals import raise_dropped_stop

# The web search APIs' key variables (tools/web): backend -> variable, in the reference's order.
SEARCH_API_KEYS = {"firecrawl": "FIRECRAWL_API_KEY", "tavily": "TAVILY_API_KEY", "exa": "EXA_API_KEY"}

# Variables whose values are secrets: never passed on, always redacted. One list, here.
SECRET_VARIABLES = (
    "OPENROUTER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    *SEARCH_API_KEYS.values(),
    "PARALLEL_API_KEY",  # the reference's fourth search API: not a backend here, still kept secret
)
SECRET_FLAG = "api_key"
HANDOFF_VARIABLE = "AGENT_SECRETS_FD"  # the pipe's descriptor number (not itself a secret)
_PIPE_CAPACITY = 1 << 16  # a pipe holds 64 KiB by default: written whole before the exec
PR_SET_DUMPABLE = 4
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class StartSecrets:
    """What this process was started with: the `--api_key` value and the secret variables."""

    flag_key: str | None = field(default=None, repr=False)
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    def values(self) -> tuple[str, ...]:
        found = (self.flag_key, *self.environ.values())
        return tuple(value for value in found if value)


_started: StartSecrets | None = None


def started_secrets() -> StartSecrets:
    """The secrets `conceal()` took; without it (a library caller), the variables now set."""
    if _started is not None:
        return _started
    return StartSecrets(None, {name: os.environ[name] for name in SECRET_VARIABLES if name in os.environ})


def conceal() -> StartSecrets:
    """At a script's start, before its heavy imports: make this process non-dumpable and, when
    it holds a secret in its argv or environment, re-execute it without (never returns then)."""
    global _started
    set_not_dumpable()
    handed = os.environ.pop(HANDOFF_VARIABLE, None)
    if handed is None:
        argv, key = strip_secret_flags(sys.orig_argv)
        found = {name: os.environ[name] for name in SECRET_VARIABLES if name in os.environ}
        if key is not None or found:
            _reexec([sys.executable, *argv[1:]], StartSecrets(key, found))
    _started = StartSecrets() if handed is None else _receive(handed)
    install(_started.values())  # until the command line's config adds what it resolved
    return _started


def set_not_dumpable() -> None:
    """PR_SET_DUMPABLE 0: another non-root process of our user can no longer open our
    /proc/<pid>/{environ,mem} nor ptrace us. Reset by execve, so every image sets it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def is_flag(token: str) -> bool:
    """Fire's own test of a flag token: a leading dash that does not start a negative number
    (also how agent.cli.command_line reads the command line)."""
    return token.startswith("--") or re.match("^-[a-zA-Z]", token) is not None


def is_secret_flag(token: str) -> bool:
    """`--api_key=...`, `--api-key ...` (any dashes): the flag whose value is a secret."""
    name = token.partition("=")[0]
    return token.startswith("-") and name.lstrip("-").replace("-", "_") == SECRET_FLAG


def strip_secret_flags(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """(`argv` without the secret flag and its value, the last value given). A bare flag
    without a value is left for the command line's own error."""
    kept: list[str] = []
    key = None
    skip = False
    for i, token in enumerate(argv):
        if skip:
            skip = False
            continue
        if not is_secret_flag(token):
            kept.append(token)
        elif "=" in token:
            key = token.partition("=")[2]
        elif i + 1 < len(argv) and not is_flag(argv[i + 1]):
            key, skip = argv[i + 1], True
        else:
            kept.append(token)
    return kept, key


def _reexec(argv: list[str], secrets: StartSecrets) -> NoReturn:
    """Execute the script again, the secrets handed over a pipe. Ctrl-C and SIGTERM are held
    blocked across the exec (a blocked signal stays pending through it): the new image has the
    default dispositions until its first lines set its own, and one sent then would kill it
    (or, ignored, be lost) instead of stopping it. `_receive` puts the mask back."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        raise_dropped_stop()  # a stop this image could only drop would not survive the exec
        _exec_handing_over(argv, secrets, mask)
    finally:  # stopped, or the exec failed: raised with the mask as it was
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _exec_handing_over(argv: list[str], secrets: StartSecrets, mask: set[int | signal.Signals]) -> NoReturn:
    mask_numbers = sorted(int(number) for number in mask)
    handed = {"flag_key": secrets.flag_key, "environ": dict(secrets.environ), "mask": mask_numbers}
    payload = json.dumps(handed).encode()
    if len(payload) >= _PIPE_CAPACITY:
        sys.exit("error: the secret variables are too large to hand over (64 KiB at most)")
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, fcntl.F_SETFL, os.O_NONBLOCK)  # a full pipe is an error, not a hang
    os.write(write_fd, payload)
    os.close(write_fd)
    os.set_inheritable(read_fd, True)
    env = {name: value for name, value in os.environ.items() if name not in SECRET_VARIABLES}
    env[HANDOFF_VARIABLE] = str(read_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


def _receive(handed: str) -> StartSecrets:
    """Read the pipe to its end and close it: the values now live only in this image's memory."""
    fd = int(handed)
    chunks = []
    try:
        while chunk := os.read(fd, _PIPE_CAPACITY):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = json.loads(b"".join(chunks))
    signal.pthread_sigmask(signal.SIG_SETMASK, data["mask"])  # a signal held since the exec, now
    return StartSecrets(data["flag_key"], dict(data["environ"]))
