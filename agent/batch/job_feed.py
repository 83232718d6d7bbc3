"""The jobs a run hands its workers: each unit of work left, in dataset order, as a `Job`
(its prompt number, batch, toolsets and sampling, drawn reproducibly from its key).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from agent.batch.completion import DATASET_CHANGED
from agent.batch.dataset import DatasetRow, DatasetScan, iter_rows, iter_units, iter_wanted_rows
from agent.batch.dataset_memo import forget
from agent.batch.dataset_source import CHANGED
from agent.batch.jobs import Job, sample_sampling
from agent.batch.planned import PlannedUnits
from agent.batch.row_verify import job_checks
from agent.config.run_config import RunConfig
from agent.errors import DatasetError
from agent.store.numbering import Numbering
from agent.toolbox.distributions import sample_toolsets_from_distribution

log = logging.getLogger("agent.batch.job_feed")


def planned_rows(
    config: RunConfig, scan: DatasetScan, units: PlannedUnits | None, wanted: bytearray
) -> Iterator[DatasetRow]:
    """The units of the plan, read from the dataset: a row with a unit left to run (`wanted`,
    per row) is parsed, the others passed by their bytes where the dataset allows
    (`iter_wanted_rows`: a resume reaches its first row left without parsing those before
    it), else every row is read and checked against the scan's keys (`as_scanned`)."""
    samples = config.samples_per_prompt
    if units is None:
        return every_unit(config)
    rows = iter_wanted_rows(
        config.dataset_file,
        scan,
        backend=config.sandbox.backend,
        options=config.dataset,
        row_key=lambda row: units.key(row * samples),  # sample 0's key is the row's
        wanted=lambda row: wanted[row] == 1,
    )
    if rows is None:
        every = iter_rows(config.dataset_file, config.max_samples, backend=config.sandbox.backend,
                          options=config.dataset)  # fmt: skip
        rows = as_scanned(every, units, str(config.dataset_file))
    return forgetting(config.run_dir, iter_units(rows, samples))


def as_scanned(rows: Iterator[DatasetRow], units: PlannedUnits, name: str) -> Iterator[DatasetRow]:
    """`rows` (a dataset read whole: Parquet, a Hub dataset, a JSONL file with more bad lines
    than its scan kept) as the run planned them: a row whose prompt no longer has the key the
    scan gave its position, or a dataset that ends before its planned rows, raises
    DatasetError; a row appended since is left for the next --resume."""
    planned, seen = len(units.rows), 0
    for row in rows:
        if row.index >= planned:
            return
        if row.key != units.rows.key(row.index):
            raise DatasetError(f"{name}:{row.line_no}: {CHANGED}; run again with --resume")
        seen += 1
        yield row
    if seen < planned:
        ends = f"it ends after {seen} of its {planned} rows"
        raise DatasetError(f"{name}: {CHANGED} ({ends}); run again with --resume")


def forgetting(run_dir: Path, rows: Iterator[DatasetRow]) -> Iterator[DatasetRow]:
    """`rows`; a dataset found changed since its scan also drops the scan remembered for
    --resume (`agent.batch.dataset_memo`), so that the next invocation scans it again."""
    try:
        yield from rows
    except DatasetError:
        forget(run_dir)
        raise


def until_changed(jobs: Iterator[Job], stop_feeding: Callable[[str], None]) -> Iterator[Job]:
    """`jobs`, ended where the dataset is found changed since the run scanned it: said in one
    line, no new prompt starts ("dataset_changed"), the running ones finish, and the run ends
    as at any stop, its checkpoint and statistics written; it exits 2 (`Completion`)."""
    try:
        yield from jobs
    except DatasetError as exc:
        log.error("%s", exc)
        stop_feeding(DATASET_CHANGED)


def every_unit(config: RunConfig) -> Iterator[DatasetRow]:
    """Every unit of work of the dataset, each valid row read (each (prompt, sample) a unit)."""
    rows = iter_rows(  # the same backend as the scan, so the same rows are valid
        config.dataset_file, config.max_samples, backend=config.sandbox.backend, options=config.dataset
    )
    return iter_units(rows, config.samples_per_prompt)


def jobs(
    config: RunConfig, rows: Iterator[DatasetRow], done: Collection[str], numbering: Numbering
) -> Iterator[Job]:
    """A job for each unit of `rows` not `done`, numbered as `numbering` says."""
    for row in rows:
        if row.key in done:
            continue
        rng = random.Random(f"{config.seed}:{row.key}")  # reproducible whatever the scheduling
        number = numbering.number_of(row.key, row.index)
        yield Job(
            index=number,
            key=row.key,
            prompt=row.prompt,
            image=row.image,
            cwd=row.cwd,
            metadata=row.metadata,
            batch_num=number // config.batch_size,
            toolsets=tuple(sample_toolsets_from_distribution(config.distribution, rng, config.distributions)),
            sampling=sample_sampling(config.agent.prompt_sampling(row.sampling), row.sample_index),
            sample_index=row.sample_index,
            checks=job_checks(row.verify, config.verify),
        )
