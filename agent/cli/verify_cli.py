"""The run's verification, checked before a token is spent: one line and exit 2 for a
`--verifier` that cannot be called, a `--judge_rubric` file that cannot be read, or a row whose
checks the flags cannot complete (`agent.batch.row_verify.checks_for`: a judge with no model or
rubric, the run's verifier asked for without one, an answer the run's match mode cannot read)."""

from __future__ import annotations

from agent.batch.dataset import DatasetScan, iter_rows, place
from agent.batch.row_verify import checks_for, read_rubric
from agent.config.run_config import RunConfig
from agent.errors import ConfigError
from agent.verify.python_verifier import load_verifier

MAX_ATTEMPTS = 100_000_000  # units of work one run plans: the parent holds a few bytes of each


def check_attempts(config: RunConfig, scan: DatasetScan) -> None:
    """ConfigError (exit 2) when the dataset's prompts times --samples_per_prompt are more
    attempts than one run plans (before anything is written for them)."""
    prompts = scan.valid  # the rows the run plans (scan.keys holds one key each)
    attempts = prompts * config.samples_per_prompt
    if attempts > MAX_ATTEMPTS:
        raise ConfigError(
            f"--samples_per_prompt={config.samples_per_prompt}: {prompts:,} prompts x "
            f"{config.samples_per_prompt:,} = {attempts:,} attempts, more than one run takes "
            f"({MAX_ATTEMPTS:,}): lower it, or split the dataset into several runs"
        )


class _RowError(Exception):
    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(reason)
        self.field_name, self.reason = field_name, reason


def refuse_bad_checks(scan: DatasetScan) -> None:
    """ConfigError (exit 2) for the first row whose `verify` object is bad. Other bad lines are
    skipped; this one stops the run: its prompt run unchecked, or checked otherwise than its
    author wrote, would give wrong rewards."""
    for error in scan.errors:
        if error.field is not None and (error.field == "verify" or error.field.startswith("verify.")):
            raise ConfigError(f"{error} (a row's checks must be right before the run starts)")


def check_verification(config: RunConfig, scan: DatasetScan) -> None:
    """ConfigError (exit 2) naming the flag, or the first row's file:line: field, at fault.
    Called after the dataset scan: the rows read here are the valid ones the run will run; with
    no check asked for, by the flags or by any row, none can fail, and the dataset is not read again."""
    options = config.verify
    if options.verifier is not None:
        load_verifier(options.verifier)
    read_rubric(options.judge_rubric)
    if not options.any and not scan.with_verify:
        return
    rows = iter_rows(
        config.dataset_file, config.max_samples, backend=config.sandbox.backend, options=config.dataset
    )
    for row in rows:
        try:
            checks_for(row.verify, options, _RowError)
        except _RowError as exc:
            where = place(config.dataset_file, config.dataset, row.line_no)
            raise ConfigError(f"{where}: {exc.field_name}: {exc.reason}") from None
