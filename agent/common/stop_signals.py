"""How Ctrl-C and SIGTERM stop either command, from the script's first line on.

Once a command reads its flags, a KeyboardInterrupt is a clean stop and exit 130
(`agent.cli.command_line.run_command`; a run destroys its sandboxes and writes its checkpoint).
Before that, the script is importing (the SDK: a second or more) and, for a run, its fork
server is already starting (`agent.backends.warm_up_early`). A signal then must stop the command
just the same: not be lost (SIGINT comes in ignored under `nohup … &`), not print a traceback,
not leave the fork server behind. So the scripts call `stop_on_signals` first, before
`conceal()`, which holds both signals blocked across its re-exec (`agent.common.secrets`).

A KeyboardInterrupt raised where Python cannot pass it on (a weakref callback of the import
system, a `__del__`) is printed as "Exception ignored" and dropped: the stop would be lost.
Such a one is kept here instead, and raised again at the next `raise_dropped_stop`. One raised
inside the import machinery can come out as another exception (`from _ssl import RAND_egd`,
which `ssl` expects to fail, once gave "TypeError: expected a message argument"): so while the
command starts, SIGINT is a handler of ours that notes the stop, and whatever exception ends the
command after a stop signal arrived is that stop. Once the flags are read, Ctrl-C is handed back
to Python's own handler (`hand_over_ctrl_c`), which `asyncio.run` turns into a cancellation.

This module imports nothing of ours, nor anything Python's start has not imported already (not
`typing`): the scripts import it first, and until it runs a signal is handled by Python's
defaults.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from collections.abc import Iterator  # these three: imported by Python's start (site) already
from contextlib import contextmanager, suppress
from types import FrameType, TracebackType

INTERRUPTED = 130  # what a shell reports for a command ended by Ctrl-C

_dropped = False  # a KeyboardInterrupt was raised where it could only be dropped
_signalled = False  # a stop signal arrived while a handler of ours was set
_held = 0  # stop signals that arrived while `stops_held` held them


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt from now on, whatever disposition was
    inherited; one that no code of the command catches ends the process quietly with 130."""
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    sys.excepthook = _exit_interrupted
    sys.unraisablehook = _keep_dropped_stop


def hand_over_ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt through Python's own handler from now on: the one that
    `asyncio.run` replaces with its own, which cancels the main task (a handler of ours it
    would leave in place). A stop that arrived before and went nowhere (swallowed on its way
    out of the import machinery) is raised now."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if _signalled:
        raise KeyboardInterrupt


@contextmanager
def stops_held() -> Iterator[None]:
    """The first SIGINT or SIGTERM only waits while the block runs: the end of a run (its
    merge, statistics.json and report: seconds), which a stop in the middle left unwritten
    (no statistics, no report, a stale checkpoint: the whole run's sums lost). It says so on
    stderr; a second one stops at once, as before. The run then exits as it ended."""
    global _held
    _held = 0
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in before:
        signal.signal(signum, _hold)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _hold(signum: int, frame: FrameType | None) -> None:
    global _held
    _held += 1
    if _held > 1:
        raise KeyboardInterrupt
    with suppress(OSError):  # stderr closed: the wait is only not said
        os.write(2, b"stopping: the run's last files are being written (seconds); again to stop at once\n")


def raise_dropped_stop() -> None:
    """Raise the KeyboardInterrupt of a stop that was dropped (see above), once."""
    global _dropped
    if _dropped:
        _dropped = False
        raise KeyboardInterrupt


def stop_signalled() -> bool:
    """Whether SIGINT or SIGTERM reached `_stop`: a KeyboardInterrupt that is the command's stop,
    not one some code raised."""
    return _signalled


def _stop(signum: int, frame: FrameType | None) -> None:
    global _signalled
    _signalled = True
    raise KeyboardInterrupt  # SIGTERM stops a command like Ctrl-C


def _keep_dropped_stop(unraisable: sys.UnraisableHookArgs) -> None:
    global _dropped
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _dropped = True
    else:
        sys.__unraisablehook__(unraisable)


def _exit_interrupted(kind: type[BaseException], value: BaseException, trace: TracebackType | None) -> None:
    """An interrupt nothing caught (the script was still importing), or any exception after a
    stop signal (see above): one line and 130, after the exit handlers, which stop the fork
    server (a normal exit would end by SIGINT, not 130)."""
    if not (issubclass(kind, KeyboardInterrupt) or _signalled):
        sys.__excepthook__(kind, value, trace)
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the handlers short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"interrupted (exit {INTERRUPTED})", file=sys.stderr)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # closed: nothing more can be said on it
            stream.flush()
    os._exit(INTERRUPTED)
