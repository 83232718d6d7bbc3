"""What thousands of open conversations need from the operating system: open files.

Each conversation in flight holds a connection to the endpoint and, while a command runs,
that command's pipes and process handle; the limit on open files (RLIMIT_NOFILE, 1024 soft on
most systems) would fail conversations past a few hundred per process with EMFILE. At start
the soft limit is raised to the hard one; when even the hard limit is too low for the
conversations of one process, the run stops at once with one line naming the number needed.
"""

from __future__ import annotations

import resource

from agent.errors import ConfigError

FDS_PER_CONVERSATION = 6  # endpoint connection, a command's stdin/stdout/stderr pipes, pidfd, spare
BASE_FDS = 256  # the interpreter, the SDK, the event loop, logs, queues to the parent


def needed_fds(conversations: int) -> int:
    return BASE_FDS + FDS_PER_CONVERSATION * conversations


FDS_PER_WORKER = 8  # the parent's ends of a worker's pipes and its process handle


def raise_fd_limit(conversations: int, workers: int = 0) -> int:
    """Raise this process's open-file limit (children inherit it) for `conversations` at once
    in each worker and the parent's `workers` pipes; returns the new soft limit. ConfigError
    when the hard limit is below what they need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = needed_fds(conversations)
    parent_need = BASE_FDS + FDS_PER_WORKER * workers
    if hard != resource.RLIM_INFINITY and hard < parent_need:
        raise ConfigError(
            f"--num_workers={workers}: the runner needs {parent_need} open files for that many "
            f"worker processes, but the hard limit is {hard}: use fewer workers or raise it "
            f"(ulimit -Hn {parent_need})"
        )
    need = max(need, parent_need)
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(
            f"--max_inflight: {conversations} conversations in one process need {need} open files, "
            f"but the hard limit is {hard}: raise it (ulimit -Hn {need}; LimitNOFILE= for a service) "
            "or spread them over more processes (--num_workers)"
        )
    if soft != resource.RLIM_INFINITY and (soft < hard or hard == resource.RLIM_INFINITY):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)
