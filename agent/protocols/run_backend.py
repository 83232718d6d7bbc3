"""The run-backend seam: where a batch run's prompts run (worker processes here, actors on a
Ray cluster), as the parent drives it.

A backend opens the run's one rate-limit hub (`open`), starts its workers and schedules the
jobs onto them, streaming every event back to the parent's `on_event` (`serve`), gives up what
is in flight when the operator stops the run (`cancel`: conversations cancelled, sandboxes
destroyed, the answers that still come kept), and lets its workers and hub go (`shutdown`).
`stop_feeding` starts no new job (the cost budget), and `tally` says what is in flight and how
scheduling ended. One driver (`agent.batch.scheduler.drive`) calls them in that order for every
backend, and one `EventRoute` handles each event the workers send, whichever backend carries
it. The registry of backends by name is `agent.backends`.

The seam is generic in the run's own types (jobs, events, tally, config), which live above it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

JobT = TypeVar("JobT", contravariant=True)
TallyT = TypeVar("TallyT", covariant=True)
ConfigT = TypeVar("ConfigT", contravariant=True)
EventT = TypeVar("EventT", covariant=True)
BackendT = TypeVar("BackendT", covariant=True)


class RunBackend(Protocol[JobT, TallyT]):
    """One run's workers, wherever they run."""

    @property
    def tally(self) -> TallyT: ...  # in flight, lost, why scheduling ended

    def open(self) -> None: ...  # the limit hub and whatever the workers join; before `serve`

    def serve(self, jobs: Iterable[JobT]) -> None: ...  # start workers, run every job, events out

    def stop_feeding(self, reason: str) -> None: ...  # no new job starts; running ones finish

    def cancel(self) -> None: ...  # after Ctrl-C in `serve`: cancel what runs, keep its answers

    def shutdown(self) -> None: ...  # always last: workers and hub gone


class RunBackendFactory(Protocol[ConfigT, EventT, BackendT]):
    """How a backend is made: the run's config, the parent's event handler, and its tick
    (about once a second: group commit, progress)."""

    def __call__(
        self, config: ConfigT, on_event: Callable[[EventT], None], on_tick: Callable[[], None]
    ) -> BackendT: ...
