"""Datasets of the `datasets` library: a local directory written by `save_to_disk`, and
`hf://datasets/org/name[/config][:split]` on the Hugging Face Hub.

A Hub dataset is streamed (`streaming=True`: nothing downloaded whole; the library's files
cached under HF_HOME) at one commit: the run's start resolves --dataset_revision (a branch, tag
or commit; default main) to its commit (`resolve_commit`), `run_config.json` pins it, and every
read of the run, a --resume's too, reads that commit. With HF_HUB_OFFLINE=1 the dataset is
read from the Hub cache under HF_HOME (filled by `huggingface-cli download --repo-type dataset`),
the revision resolved by the cache's refs. A directory is opened with `load_from_disk` (memory
mapped, not loaded) and read in batches. Rows are numbered from 1 in the split's order.
Without the `datasets` extra, naming such a dataset is one line saying how to install it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.batch.dataset_source import Record, check_columns, judge_record
from agent.batch.row_columns import ColumnMap
from agent.errors import DatasetError

HUB_PREFIX = "hf://"
_SYNTAX = "hf://datasets/org/name[/config][:split]"
DEFAULT_SPLIT = "train"
_BATCH_ROWS = 256
# What `save_to_disk` writes: a DatasetDict's index, or one Dataset's state.
_DISK_MARKERS = ("dataset_dict.json", "state.json")


@dataclass(frozen=True)
class HubName:
    repo_id: str
    config: str | None
    split: str


def parse_hub_name(spec: str) -> HubName:
    """`hf://datasets/org/name[/config][:split]`; DatasetError naming the syntax otherwise."""
    rest = spec.removeprefix(HUB_PREFIX + "datasets/")
    path, _, split = rest.partition(":")
    parts = path.split("/")
    if rest == spec or len(parts) not in (2, 3) or not all(parts) or (":" in rest and not split):
        raise DatasetError(f"{spec}: not a Hub dataset name; write {_SYNTAX}")
    return HubName("/".join(parts[:2]), parts[2] if len(parts) == 3 else None, split or DEFAULT_SPLIT)


def datasets_module(name: str) -> Any:
    """The `datasets` library, or one line saying how to install it."""
    try:
        import datasets  # an optional extra: imported only for these datasets
    except ImportError:
        raise DatasetError(
            f'{name}: reading it needs the datasets extra: pip install -e ".[datasets]"'
        ) from None
    datasets.disable_progress_bars()  # the run's progress is the runner's to show
    return datasets


def is_datasets_directory(path: Path) -> bool:
    return any((path / marker).is_file() for marker in _DISK_MARKERS)


def _rows(name: str, batches: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    """Each row of `batches` (Arrow tables or row dicts), a read error as one line."""
    try:
        for batch in batches:
            yield from batch.to_pylist() if hasattr(batch, "to_pylist") else (batch,)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{name}: read failed ({exc})") from None


class _RowsSource:
    unit = "row "
    noun = "rows"
    name: str
    columns: ColumnMap

    def check(self) -> None:
        raise NotImplementedError

    def _load(self) -> Any:
        raise NotImplementedError

    def records(self, backend: str | None) -> Iterator[tuple[int, Record]]:
        dataset = self._load()
        names = dataset.column_names  # None: a streamed dataset whose features are not known
        if names is not None:
            check_columns(self.name, list(names), self.columns)
            dataset = dataset.select_columns([c for c in self.columns.read() if c in names])
        for number, record in enumerate(_rows(self.name, self._batches(dataset)), start=1):
            yield number, judge_record(self, number, record, backend, self.columns)

    def _batches(self, dataset: Any) -> Iterable[Any]:
        batches: Iterable[Any] = dataset.with_format("arrow").iter(batch_size=_BATCH_ROWS)
        return batches


class DiskSource(_RowsSource):
    """A `save_to_disk` directory: a Dataset, or one split of a DatasetDict (`DIR:split`;
    without one, `train`, or its only split when it has one)."""

    def __init__(self, path: Path, columns: ColumnMap, split: str | None = None) -> None:
        self.path, self.columns, self.split = path, columns, split
        self.name = str(path) if split is None else f"{path}:{split}"

    def check(self) -> None:
        self._load()

    def _load(self) -> Any:
        datasets = datasets_module(self.name)
        try:
            loaded = datasets.load_from_disk(str(self.path))
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{self.name}: cannot read the datasets directory ({exc})") from None
        if not isinstance(loaded, datasets.DatasetDict):
            if self.split is not None:
                raise DatasetError(
                    f"{self.name}: the directory holds one dataset, no splits: drop ':{self.split}'"
                )
            return loaded
        splits = list(loaded)
        chosen = self.split or (DEFAULT_SPLIT if DEFAULT_SPLIT in splits or len(splits) != 1 else splits[0])
        if chosen not in splits:
            raise DatasetError(
                f"{self.name}: no split {chosen!r}; its splits: {', '.join(splits)} "
                f"(name one: {self.path}:{splits[0]})"
            )
        return loaded[chosen]


def split_directory(path: str) -> tuple[Path, str] | None:
    """`DIR:split` when DIR is a datasets directory (and `path` itself is not a file)."""
    directory, colon, split = path.rpartition(":")
    if not colon or not split or "/" in split or Path(path).exists():
        return None
    return (Path(directory), split) if is_datasets_directory(Path(directory)) else None


class HubSource(_RowsSource):
    def __init__(self, spec: str, columns: ColumnMap, revision: str | None) -> None:
        self.name, self.columns, self.revision = spec, columns, revision
        self.hub = parse_hub_name(spec)

    def check(self) -> None:
        datasets_module(self.name)

    def _load(self) -> Any:
        datasets = datasets_module(self.name)
        hub = self.hub
        try:
            if _offline():
                where = _snapshot(hub.repo_id, self.revision)
                return datasets.load_dataset(where, name=hub.config, split=hub.split, streaming=True)
            return datasets.load_dataset(
                hub.repo_id, name=hub.config, split=hub.split, revision=self.revision, streaming=True
            )
        except _hub_errors() as exc:  # not found, no such config or split, unreachable
            raise DatasetError(f"{self.name}: cannot open the dataset ({_said(exc)})") from None

    def _batches(self, dataset: Any) -> Iterable[Any]:
        rows: Iterable[Any] = iter(dataset)  # streamed: the Hub's files are read as rows are used
        return rows


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _snapshot(repo_id: str, revision: str | None) -> str:
    """The cached snapshot of `repo_id` at `revision` (offline: from the cache's refs)."""
    from huggingface_hub import snapshot_download

    return str(snapshot_download(repo_id, repo_type="dataset", revision=revision or "main"))


def resolve_commit(spec: str, revision: str | None) -> str:
    """The commit `revision` (None: main) of the Hub dataset `spec` is at now."""
    datasets_module(spec)
    hub = parse_hub_name(spec)
    try:
        if _offline():
            return Path(_snapshot(hub.repo_id, revision)).name
        from huggingface_hub import HfApi

        sha = HfApi().dataset_info(hub.repo_id, revision=revision).sha
    except _hub_errors() as exc:  # no such dataset or revision, unreachable, not cached
        shown = revision or "main"
        raise DatasetError(f"{spec}: cannot resolve revision {shown!r} ({_said(exc)})") from None
    if not sha:
        raise DatasetError(f"{spec}: the Hub gave no commit for revision {revision or 'main'!r}")
    return str(sha)


def _hub_errors() -> tuple[type[Exception], ...]:
    """What the Hub's client raises for a dataset it cannot reach or find: OSError and ValueError,
    and its HTTP library's errors (httpx2's, not OSErrors: a refused connection was a traceback).
    Imported when asked: a run's parent does not import the HTTP client otherwise."""
    from httpx2 import HTTPError

    return OSError, ValueError, HTTPError


def _said(exc: BaseException) -> str:
    """The error in a few words, with its class where its text alone says little."""
    text = " ".join(str(exc).split())
    return text if isinstance(exc, OSError | ValueError) and text else f"{type(exc).__name__}: {text}"
