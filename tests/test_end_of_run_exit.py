"""The runner's exit (issue 26: the last reply to the exit ≤ 1 s at 20,000 prompts): once its
files are written and its children reaped, the process exits without the interpreter's
teardown (`agent.cli.command_line.exit_now`), which only frees the run's objects and grew with
the run (0.3-0.8 s at 20,000 prompts). What has an effect outside the process still happens:
the atexit handlers (logging's, multiprocessing's, a script's own) run and the standard streams
are flushed; a thread that is not a daemon still running is waited for by a normal exit.
"""

from __future__ import annotations

import pstats
from pathlib import Path

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI, prompts_dataset, read_json

# A script of one's own that runs the runner (batch_runner.run_cli): an atexit handler of its
# own, an object freed only by the interpreter's teardown, and, when asked, a thread that is
# not a daemon, running until the interpreter's exit begins.
MAIN = """
import atexit, os, sys, threading, time

import batch_runner  # on PYTHONPATH, as the repository

MARKS = {marks!r}


FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND


def mark(name, _open=os.open, _write=os.write, _close=os.close, _flags=FLAGS):
    # what it uses is bound here: the teardown may have cleared this module's globals
    fd = _open(MARKS + "/" + name, _flags)
    _write(fd, b"x")
    _close(fd)


class FreedAtTeardown:
    def __del__(self, _mark=mark):
        _mark("teardown")


KEPT = FreedAtTeardown()
KEPT.cycle = KEPT  # freed by the collector, at the latest at the teardown

def wait_for_the_exit():
    # until the interpreter's exit begins: it marks the main thread stopped, then joins this one
    while threading.main_thread().is_alive():
        time.sleep(0.05)
    mark("thread")


if __name__ == "__main__":
    atexit.register(mark, "atexit")
    if {thread!r}:
        threading.Thread(target=wait_for_the_exit).start()
    print("unflushed stdout at the end", end="")
    batch_runner.run_cli()
"""


def _run(tmp_path: Path, endpoint: SimulatedEndpoint, *, thread: bool) -> tuple[BatchCLI, Path, str]:
    cli = BatchCLI(tmp_path, endpoint)
    marks = tmp_path / "marks"
    marks.mkdir()
    main = tmp_path / "main.py"
    main.write_text(MAIN.replace("{marks!r}", repr(str(marks))).replace("{thread!r}", repr(thread)))
    dataset = tmp_path / "prompts.jsonl"
    prompts_dataset(dataset, [f"task {i}: list the files" for i in range(3)])
    args = (f"--dataset_file={dataset}", "--batch_size=2", "--run_name=exit", "--num_workers=1")
    done = cli.run(*args, runner=str(main))
    assert done.returncode == 0, done
    assert read_json(cli.run_dir("exit") / "statistics.json")["trajectories"]["entries"] == 3
    return cli, marks, done.stdout


def test_the_runner_exits_without_the_interpreters_teardown_after_its_atexit_handlers(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    _cli, marks, stdout = _run(tmp_path, sim_endpoint, thread=False)
    assert (marks / "atexit").read_text() == "x"  # the script's handler ran, once
    assert not (marks / "teardown").exists()  # the teardown did not
    assert stdout.startswith("unflushed stdout at the end")  # the streams were flushed


def test_a_thread_still_running_is_waited_for_by_a_normal_exit(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    _cli, marks, _stdout = _run(tmp_path, sim_endpoint, thread=True)
    assert (marks / "thread").read_text() == "x"
    assert (marks / "atexit").read_text() == "x"
    assert (marks / "teardown").read_text() == "x"  # the interpreter's own exit, teardown included


def test_a_profiled_runner_exits_normally_so_its_profile_is_written(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    cli = BatchCLI(tmp_path, sim_endpoint)
    profile = tmp_path / "parent.prof"
    main = tmp_path / "main.py"  # as `python -m cProfile -o parent.prof batch_runner.py …` does
    main.write_text(
        "import cProfile\nimport batch_runner\n"
        f"if __name__ == '__main__':\n    cProfile.run('batch_runner.run_cli()', {str(profile)!r})\n"
    )
    dataset = tmp_path / "prompts.jsonl"
    prompts_dataset(dataset, ["task 0: list the files"])
    args = (f"--dataset_file={dataset}", "--batch_size=1", "--run_name=profiled", "--num_workers=1")
    done = cli.run(*args, runner=str(main))
    assert done.returncode == 0, done
    assert pstats.Stats(str(profile)).total_calls > 0  # written after the script returned
