"""A stop signal while a command starts: whatever exception it comes out as, the command ends
with 130 and one line (agent.common.stop_signals).

Each case is a small script run as its own process: the handlers are process-wide. The signal
is sent by the script to itself, so the moment it lands is the one under test, not a race.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.batch import REPO

SIGNAL_THEN = """
import os, signal, time
from agent.common.stop_signals import hand_over_ctrl_c, stop_on_signals, stops_held
stop_on_signals()

def stop_myself() -> None:
    os.kill(os.getpid(), signal.{signal})
    time.sleep(5)  # the handler runs here, before the sleep ends
    print("signal not delivered")

{then}
"""

COMES_OUT_AS_ANOTHER = """
try:
    stop_myself()
except KeyboardInterrupt:  # as `from _ssl import RAND_egd` inside `import ssl` once made of it
    raise TypeError("expected a message argument")
"""

SWALLOWED = """
try:
    stop_myself()
except KeyboardInterrupt:  # caught on its way, as the import machinery may
    pass
hand_over_ctrl_c()  # where a command has read its flags
print("went on")
"""

NO_SIGNAL = """
raise TypeError("a bug of ours")
"""

HANDED_OVER = """
import asyncio
hand_over_ctrl_c()

async def main() -> str:
    try:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        return "cancelled"  # asyncio.run's own Ctrl-C: the main task is cancelled, not interrupted
    return "not cancelled"

print(asyncio.run(main()))
"""


HELD_ONCE = """
hand_over_ctrl_c()
with stops_held():  # as a run's end
    os.kill(os.getpid(), signal.{signal})
    time.sleep(0.2)
    print("the end written")
print("exited as the run ended")
"""

HELD_TWICE = """
hand_over_ctrl_c()
with stops_held():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    print("not stopped")
"""


def _run(tmp_path: Path, then: str, sig: str = "SIGINT") -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "probe.py"
    probe.write_text(SIGNAL_THEN.format(signal=sig, then=then), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=60)


def test_a_stop_that_comes_out_as_another_exception_is_still_the_stop(tmp_path: Path) -> None:
    for sig in ("SIGINT", "SIGTERM"):
        done = _run(tmp_path, COMES_OUT_AS_ANOTHER, sig)
        assert (done.returncode, done.stdout, done.stderr) == (130, "", "interrupted (exit 130)\n"), sig


def test_a_stop_swallowed_while_the_command_started_stops_it_at_the_hand_over(tmp_path: Path) -> None:
    done = _run(tmp_path, SWALLOWED)
    assert (done.returncode, done.stdout) == (130, ""), done.stderr
    assert done.stderr == "interrupted (exit 130)\n"


def test_an_exception_with_no_stop_before_it_is_a_traceback_as_ever(tmp_path: Path) -> None:
    done = _run(tmp_path, NO_SIGNAL)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and done.stderr.rstrip().endswith("TypeError: a bug of ours")


def test_once_handed_over_ctrl_c_cancels_asyncio_runs_main_task(tmp_path: Path) -> None:
    done = _run(tmp_path, HANDED_OVER)
    assert done.stdout == "cancelled\n", done.stderr


def test_a_stop_during_the_end_of_a_run_waits_for_it_and_a_second_stops_at_once(tmp_path: Path) -> None:
    """A SIGTERM during the end's merge once left no statistics.json and no report."""
    for sig in ("SIGINT", "SIGTERM"):
        done = _run(tmp_path, HELD_ONCE.format(signal=sig), sig)
        assert (done.returncode, done.stdout) == (0, "the end written\nexited as the run ended\n"), (
            done.stderr
        )
        assert done.stderr.startswith("stopping: the run's last files are being written"), done.stderr
    done = _run(tmp_path, HELD_TWICE)
    assert (done.returncode, done.stdout) == (130, ""), done.stderr
    assert done.stderr.endswith("interrupted (exit 130)\n") and "Traceback" not in done.stderr


CUT_SHORT_STOP = """
import os
from multiprocessing import forkserver
from agent.batch import fork_server

fork_server.start_server()
pid = fork_server.server_pid()
server = forkserver._forkserver
os.close(server._forkserver_alive_fd)  # where multiprocessing's own stop was when a signal cut it
server._forkserver_alive_fd = None
fork_server.stop_server()  # the exit handler's: once "TypeError: 'NoneType' object cannot be …"
try:
    os.kill(pid, 0)
    print("left running")
except ProcessLookupError:
    print("reaped", fork_server.server_pid())
"""


def test_stopping_the_fork_server_again_after_a_stop_cut_short_reaps_it(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(CUT_SHORT_STOP, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "reaped None\n"), done.stderr
