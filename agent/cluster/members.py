"""The driver's view of its worker actors: which jobs each holds, and which come back when one
is lost.

A job is "assigned" from its submission to its answer. When an actor dies (its node lost, its
process killed) the jobs it held go back to the front of the line and run on another actor, so
each prompt is answered, and written, exactly once: answers only ever come from the poll
replies the driver received, and a dead actor sends none.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agent.batch.jobs import Job


@dataclass
class Member:
    """One worker actor as the driver sees it."""

    id: int
    actor: Any  # its Ray handle
    assigned: dict[str, Job] = field(default_factory=dict)
    poll: Any = None  # the outstanding poll's ObjectRef
    node: str = ""
    ending: bool = False  # sent its end mark
    exited: bool = False  # said goodbye (WorkerExit)
    since: float | None = None  # never set: a replacement's start is not timed on Ray
    starting: Any = None  # a replacement's `start` call until it returned: given no job till then

    def said_ready(self) -> None:
        return  # an actor takes jobs once `start` returned: its inbox holds them until then

    def said_goodbye(self) -> None:
        self.exited = True

    def took(self, key: str) -> None:
        return  # what an actor runs is the tally's `running` alone

    def release(self, key: str) -> Job | None:
        return self.assigned.pop(key, None)


class JobLine:
    """Jobs waiting for an actor: the ones given back by lost actors first, then the dataset's
    (streamed: taken only when an actor has room)."""

    def __init__(self, jobs: Iterator[Job]) -> None:
        self.jobs = jobs
        self.returned: deque[Job] = deque()
        self.exhausted = False

    def give_back(self, jobs: list[Job]) -> None:
        self.returned.extendleft(reversed(jobs))

    def take(self, count: int) -> list[Job]:
        taken: list[Job] = []
        while len(taken) < count and self.returned:
            taken.append(self.returned.popleft())
        while len(taken) < count and not self.exhausted:
            job = next(self.jobs, None)
            if job is None:
                self.exhausted = True
            else:
                taken.append(job)
        return taken

    @property
    def empty(self) -> bool:
        return self.exhausted and not self.returned

    def drain(self) -> list[Job]:
        """What never ran (stop feeding): the returned jobs only; the rest of the dataset stays
        unread, as the local backend leaves it."""
        left = list(self.returned)
        self.returned.clear()
        self.exhausted = True
        return left
