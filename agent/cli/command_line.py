"""The command-line edge both scripts share: Fire reads the command line, this module checks it
against the flag table, prints `--help`, and turns operator errors into one line and an exit.

Fire stays the entry point and does what it is good at: splitting `--name=value`,
`--name value`, bare `--name` (and `--noname`) and `--name-with-dashes` into names and values.
It is handed a `**flags` function whose values it must not interpret (`SetParseFn(str)`), so
no flag is ever bound to a Python parameter: the names are checked against the table here
(an unknown one is exit 2 with the nearest valid one), and the text is converted by the
table's types (agent.cli.flag_values) instead of Fire's literal guessing, which turned
`--run_name=2024` into an int, `a,b` into a tuple and `--resume=false` into a true string.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import fire

from agent.cli.flag_values import parse_flags
from agent.cli.help_page import help_page
from agent.common.redaction import install
from agent.common.secrets import is_flag, started_secrets
from agent.common.stop_signals import INTERRUPTED, hand_over_ctrl_c, raise_dropped_stop, stop_on_signals
from agent.config.agent_config import resolve_api_key
from agent.errors import AgentError, ConfigError

Values = Mapping[str, Any]
_HELP = ("help", "h")


def flag_tokens(argv: Sequence[str]) -> dict[str, tuple[str, bool]]:
    """Each flag as Fire names it: (the flag as typed, whether it came without a value)."""
    found = {}
    for i, token in enumerate(argv):
        if not is_flag(token):
            continue
        typed = token.partition("=")[0]
        name = typed.lstrip("-").replace("-", "_")
        bare = "=" not in token and (i + 1 == len(argv) or is_flag(argv[i + 1]))
        if bare and name.startswith("no"):
            name = name[2:]  # Fire reads a bare --noX as X=False
        found[name] = (typed, bare)
    return found


def fire_split(argv: Sequence[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """(flags by name, positional arguments) as Fire splits `argv`, every value as typed."""
    seen: dict[str, Any] = {}

    def command(*positional: str, **flags: str) -> None:
        seen.update(positional=positional, flags=flags)

    fire.Fire(fire.decorators.SetParseFn(str)(command), command=list(argv))
    return seen["flags"], seen["positional"]


def read_command_line(cli: str, argv: Sequence[str]) -> dict[str, Any] | None:
    """Every flag of the table, typed (see `parse_flags`), or None when --help was asked for."""
    if "--" in argv:  # Fire's own flags (--interactive, --trace) follow it: not for operators
        raise ConfigError("unexpected argument '--': flags are written --name=value (see --help)")
    # Fire cannot consume "--=x" and would print its own usage page; it takes a lone "-" for its
    # command separator (a flag after it then got that page too) and "---name" for "--name".
    stray = next((token for token in argv if token.startswith(("--=", "---")) or token == "-"), None)
    if stray is not None:
        raise ConfigError(f"unexpected argument {stray!r}: flags are written --name=value (see --help)")
    given, positional = fire_split(argv)
    if any(name in given for name in _HELP):
        return None
    if positional:
        raise ConfigError(
            f"unexpected argument {positional[0]!r}: flags are written --name=value (see --help)"
        )
    tokens = flag_tokens(argv)
    bare = {name for name, (_, no_value) in tokens.items() if no_value}
    spelled = {name: typed for name, (typed, _) in tokens.items()}
    return parse_flags(cli, given, bare=bare, spelled=spelled)


def resolve_key(values: Values) -> str | None:
    """The API key: `--api_key` (as typed, or as `conceal` took it off the command line), else
    the environment's. The process's one redactor is then built from it and every secret the
    process started with, before anything of the run is written."""
    started = started_secrets()
    if started.flag_key == "":  # `--api_key=`: not "no key", and not the environment's either
        raise ConfigError(
            "--api_key needs a value (leave the flag out for OPENROUTER_API_KEY / OPENAI_API_KEY)"
        )
    key = resolve_api_key(values["api_key"] or started.flag_key, values["base_url"], started.environ)
    install((key, *started.values()))
    return key


def run_command(
    cli: str, handle: Callable[[Values], int], say: Callable[[str], None], argv: Sequence[str] | None = None
) -> NoReturn:
    """Parse the command line of `cli`, hand the values to `handle` and exit with the code it
    returns (0 after `--help`). An AgentError is one `error:` line and its exit code; Ctrl-C and
    SIGTERM are 130 (`agent.common.stop_signals`); a reader that closed our stdout (`| head`)
    ends it quietly with 141, as SIGPIPE ends the standard tools."""
    stop_on_signals()  # the scripts did already; a script of one's own calling `run_cli` too
    try:
        code = _run(cli, handle, say, argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe must be seen while it can be handled
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(PIPE_CLOSED)
    exit_now(code)


def write_out(text: str) -> None:
    """Print `text` on stdout, flushed. A reader that closed the pipe stays a BrokenPipeError
    (`run_command` ends quietly with 141); any other failure to write (`> /dev/full`) is an
    operator's error: one line and exit 2, stdout then pointed at /dev/null so that what is
    still buffered does not fail again on the way out."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        _quiet_stdout()
        raise ConfigError(f"cannot write to standard output: {exc.strerror or exc}") from None


def exit_now(code: int) -> NoReturn:
    """Exit with `code` once what the process wrote is out, without the interpreter's teardown.

    The teardown only frees memory: it collects and deallocates every object of the run (the
    tally, the fold's records, the planned rows: 0.3-0.8 s at 20,000 prompts, growing with the
    run: issue 26), with no effect outside the process. What has one is done first: the atexit
    handlers (logging's flush and close, multiprocessing's finalizers and temporary directory,
    a user module's own), then the standard streams are flushed. The run has closed (fsynced)
    its files and reaped its workers and fork server by now. A thread that is not a daemon
    still running would be waited for by a normal exit: then the normal exit, as before; so
    too under a profiler or tracer (`python -m cProfile -o …`), which writes what it gathered
    only once the script returns."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    if watched or any(not thread.daemon for thread in others):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed stream: the interpreter's own exit reports it, as it always did
        sys.exit(code)
    os._exit(code)


PIPE_CLOSED = 128 + signal.SIGPIPE  # what a shell reports for a tool ended by SIGPIPE


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered does
    not fail again (and print "Exception ignored … BrokenPipeError") on the way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _run(
    cli: str, handle: Callable[[Values], int], say: Callable[[str], None], argv: Sequence[str] | None
) -> int:
    try:
        values = read_command_line(cli, sys.argv[1:] if argv is None else argv)
        if values is None:
            write_out(help_page(cli))
            return 0
        hand_over_ctrl_c()
        raise_dropped_stop()  # a Ctrl-C during the imports, not to be lost
        return handle(values)
    except AgentError as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:  # before a run or conversation began (each says how it stopped)
        say(f"interrupted (exit {INTERRUPTED})")
        return INTERRUPTED
