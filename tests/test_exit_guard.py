"""`exit_refused`: os._exit on the importing thread raises; another thread's still ends the
process (a worker's deliberate exit must not turn into an exception in a thread)."""

import os
import subprocess
import sys
import textwrap

import pytest

from agent.common.exit_guard import ExitCalled, exit_refused


def test_os_exit_within_the_block_raises_and_is_restored_after() -> None:
    real = os._exit
    with pytest.raises(ExitCalled) as caught, exit_refused():
        os._exit(7)
    assert caught.value.code == 7 and os._exit is real


def test_another_threads_exit_still_ends_the_process() -> None:
    program = textwrap.dedent("""
        import os, threading
        from agent.common.exit_guard import exit_refused
        with exit_refused():
            threading.Thread(target=os._exit, args=(5,)).start()
            threading.Event().wait(30)
        """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 5, done.stderr
