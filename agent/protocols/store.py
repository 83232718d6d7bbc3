"""The run-store seam: the run directory as a batch run uses it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol


class KnownKeys(Protocol):
    """Keys asked for with the `prompt_index` of the line or record they came from: a hint to
    a book that numbers its keys by the run's plan (`agent.batch.planned`), where a wrong
    or missing one (-1) costs time, never a wrong answer."""

    def has(self, key: str, index: int) -> bool: ...


class KeyBook(KnownKeys, Protocol):
    """Keys noted as `KnownKeys` are asked for. The merge notes the keys it writes in one; the
    end of a run asks it which prompts are in the output."""

    def note(self, key: str, index: int) -> bool: ...  # whether `key` was new

    def __contains__(self, key: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def __len__(self) -> int: ...


class StoredKeys(Protocol):
    """Which prompts a run directory already answered (what a resume skips or retries)."""

    @property
    def done(self) -> set[str]: ...  # keys with a result line

    @property
    def discarded(self) -> set[str]: ...  # keys with a discard record

    @property
    def failures(self) -> dict[str, int]: ...  # key -> failed attempts, for keys not done or discarded

    @property
    def indices(self) -> dict[str, int]: ...  # key -> the prompt_index it was first written with

    @property
    def tombstoned(self) -> set[str]: ...  # keys whose result was withdrawn (moved to discards)

    @property
    def unrecorded(self) -> set[str]: ...  # tombstoned keys without a record in discarded.jsonl

    @property
    def labels(self) -> dict[str, list[str]]: ...  # key -> discard_reasons of a kept flawed entry


class MergeSummary(Protocol):
    """What a merge reports: its counts (`as_dict`, JSON) and the keys it wrote."""

    @property
    def kept_keys(self) -> KeyBook: ...

    @property
    def unkept(self) -> list[tuple[str, dict[str, Any]]]: ...  # (key, entry) to move to discards

    @property
    def tokens(self) -> dict[str, Any] | None: ...  # --capture_tokens: the merged sidecar's counts

    def as_dict(self) -> dict[str, Any]: ...


class RunStore(Protocol):
    """Where a batch run's results go, as `BatchRun` uses it. `lock` then `repair` before the
    first append; `close` releases the lock. Appended lines survive kill -9 once the call
    returns; `write_json` replaces a file atomically after syncing every line appended before
    it, and `merge` writes the merged trajectories (calling `on_entry` for each) and returns
    its report."""

    def lock(self) -> None: ...

    def close(self) -> None: ...

    def repair(self) -> list[str]: ...  # notes on what was repaired, for the log

    # numbered: each key's prompt_index too; known: result keys left out of `done`
    def scan(self, *, numbered: bool = True, known: KnownKeys | None = None) -> StoredKeys: ...

    def append_result(self, batch_num: int, entry: Mapping[str, Any] | bytes) -> None: ...

    def append_tokens(self, batch_num: int, line: bytes, entry: bytes) -> None: ...  # before `entry`

    def append_discard(self, record: Mapping[str, Any]) -> None: ...

    def append_failure(self, record: Mapping[str, Any]) -> None: ...

    def sync(self) -> None: ...  # fsync what was appended (a move's discard records before its tombstones)

    def write_json(
        self, name: str, data: Any, long_list: tuple[str, Iterable[int]] | None = None
    ) -> None: ...

    def merge(
        self,
        valid_tools: Collection[str],
        on_entry: Callable[[dict[str, Any]], None] | None = None,
        output: str = ...,
        exclude: Collection[str] = (),
        keep_unknown: bool = True,
    ) -> MergeSummary: ...  # `exclude`: keys not merged (withdrawn); `keep_unknown`: see merge_run

    def read_json(self, name: str) -> Any | None: ...  # None when missing or corrupt

    def note_keys_in(self, new_book: Callable[[], KeyBook]) -> None: ...  # each merge's own book
