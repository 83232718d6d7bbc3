"""`python batch_runner.py`: the batch runner's command, from the flag values to its exit code.

Only the flag table and the command line are imported with this module: `--help` and a flag
error are answered before the rest is imported (seconds of it, with the SDK). What a command
needs is imported by the function that runs it. For a run on local worker processes, those
start importing theirs before this module is imported when the arguments plainly ask for a run
(`agent.backends.warm_up_early`, from batch_runner.py), else as soon as the flags say a run is
asked for (`agent.backends.warm_up`), beside the checks and the dataset scan here.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console

from agent.cli.command_line import run_command, write_out
from agent.cli.flags import BATCH
from agent.cli.logs import configure_logging
from agent.common.redaction import redact_streams
from agent.common.stop_signals import raise_dropped_stop
from agent.errors import RunDirectoryError

if TYPE_CHECKING:
    from agent.config.run_config import RunConfig

console = Console(stderr=True, emoji=False)  # ":x" in a path or flag value stays as typed
# Said once per run at INFO: which sandbox backend runs the prompts (and how it tracks processes),
# loading the embedded model (and how long it took), what token ids the endpoint gives.
INFORMATIVE = ("agent.sandboxes", "agent.embedded", "agent.tokens")


def _say(line: str) -> None:
    """One operator line, never wrapped at the console width (logs and tests read it whole)."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def main(values: Mapping[str, Any]) -> int:
    """The command, from the typed flag values: the distributions, or a whole run."""
    from agent.backends import warm_up
    from agent.cli.export_cli import is_post_process, post_process

    if values["list_distributions"]:
        from agent.cli.batch_cli import list_distributions_text

        write_out(list_distributions_text(values))
        return 0
    if values["rescore"]:  # check an existing run's entries again; nothing runs
        from agent.cli.rescore_cli import rescore

        return rescore(values, console)
    if is_post_process(values):  # export (and push) an existing run; nothing runs
        return post_process(values, _say)
    with warm_up(values["backend"]):  # the workers' imports start now, beside our checks and scan
        from agent.cli.batch_cli import build_run_config

        return run(build_run_config(values))


def run(config: RunConfig) -> int:
    """Check, scan the dataset, then run every prompt; the exit code says how it went."""
    import dataclasses

    from agent.backends import backend_factory
    from agent.batch.dataset import require_valid_rows
    from agent.batch.dataset_memo import scan_for_run
    from agent.batch.run import BatchRun
    from agent.cli.batch_cli import check_ready, ready_sandbox
    from agent.cli.dataset_cli import pin_dataset
    from agent.cli.export_cli import merged
    from agent.cli.token_cli import ready_tokens
    from agent.cli.verify_cli import check_attempts, check_verification, refuse_bad_checks
    from agent.config.agent_config import serving

    check_ready(config)
    config = pin_dataset(config)  # a Hub dataset's commit, read by every pass and every --resume
    backend = config.sandbox.backend  # rows naming an image it cannot run are bad lines
    scan = scan_for_run(  # on --resume of an unchanged dataset, the scan remembered
        config.dataset_file, config.max_samples, backend=backend, options=config.dataset,
        run_dir=config.run_dir, resume=config.resume,
    )  # fmt: skip
    refuse_bad_checks(scan)  # a bad `verify` object stops the run; other bad lines are skipped
    for error in scan.errors:
        _say(f"skipped {error}")
    if scan.error_count > len(scan.errors):
        _say(f"… and {scan.error_count - len(scan.errors)} more invalid lines")
    require_valid_rows(scan)  # after every bad line was named
    raise_dropped_stop()  # a Ctrl-C during the imports or the scan (agent.common.stop_signals)
    check_attempts(config, scan)  # prompts x --samples_per_prompt
    check_verification(config, scan)  # --verifier, --judge_rubric, and the rows' checks with the flags
    config = ready_sandbox(config, scan)  # which sandbox images the rows need is known now
    backend = backend_factory(config.backend)  # imported only now: Ray takes seconds to import
    with serving(config.agent, config.embedded_threads) as agent:  # one embedded server for all workers
        served = ready_tokens(dataclasses.replace(config, agent=agent))  # --capture_tokens' probe
        code = _written(lambda: BatchRun(served, console, backend=backend).run(scan), config)
    if merged(config.run_dir):  # what this invocation merged; an interrupted run exports nothing
        return _exported(config, code)
    return code


def _exported(config: RunConfig, code: int) -> int:
    """The run's exports; `code` unless they fail. A run whose prompts failed (exit 1: rerun
    with --resume, which exports again) keeps its code when none of them left an entry."""
    if not config.export.export:  # nothing to import: pyarrow alone takes ~0.5 s
        return code
    from agent.cli.export_cli import export_and_push
    from agent.export.run_export import NothingToExport

    try:
        export_and_push(config.run_dir, config.export, _say)
    except NothingToExport as exc:
        if code == 0:
            raise
        _say(f"error: {exc}")
    return code


# What a full or broken disk says when the run writes its directory (or its TMPDIR).
_UNWRITABLE = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG}


def _written(run: Callable[[], int], config: RunConfig) -> int:
    """`run()`; a disk that stopped taking the run's writes is one line and exit 1, not a
    traceback (the appends are whole lines, fsynced: `--resume` repairs a torn last one)."""
    try:
        return run()
    except OSError as exc:
        if exc.errno not in _UNWRITABLE:
            raise
        where = exc.filename or config.run_dir
        raise RunDirectoryError(
            f"cannot write {where}: {exc.strerror}; what the run wrote is kept: free space (or mend "
            "the directory) and rerun with --resume"
        ) from None


def run_cli() -> None:
    """The script's entry: flags read by Fire, checked against agent.cli.flags, then `main`.
    Everything printed passes the secret redactor (`agent.common.redaction`)."""
    redact_streams()
    configure_logging(console, informative=INFORMATIVE)
    run_command(BATCH, main, _say)
