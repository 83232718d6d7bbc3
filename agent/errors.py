"""The project's exception tree. Operator-facing errors carry one clear line.

    AgentError
    ├── ConfigError          bad flags or configuration (exit 2)
    ├── DatasetError         the dataset cannot be used at all (exit 2)
    ├── RunLockedError       another runner holds the run directory (exit 3)
    ├── ModelAPIError        the endpoint failed for good (its FailureClass says how)
    └── SandboxError         a sandbox could not be created or used
        ├── SandboxPathError     a path outside the sandbox
        ├── SandboxStartError    the prompt's sandbox could not be made (fails the prompt, even
        │                        when met inside a tool call: it is not the model's error)
        └── SandboxUnavailable   the backend cannot run on this machine

Errors the *model* should see (bad tool arguments, failing commands) never raise past the
tool layer: they become tool results. A prompt that reaches no outcome is recorded with one
`FailureClass` (failures.jsonl, statistics.json's failures per class, report.html).
"""

from __future__ import annotations

from enum import StrEnum


class FailureClass(StrEnum):
    """Why a prompt reached no outcome. A member is a `str` equal to its value: written to
    failures.jsonl, statistics.json and the report as that value, unchanged. What each means
    and what the operator can do about it: `FAILURE_ADVICE`."""

    AUTH = "auth"
    BAD_REQUEST = "bad_request"
    NOT_FOUND = "not_found"
    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    INVALID_RESPONSE = "invalid_response"
    BUDGET = "budget"
    API = "api"
    PROMPT_TIMEOUT = "prompt_timeout"
    SANDBOX = "sandbox"
    EXCEPTION = "exception"
    WORKER_LOST = "worker_lost"


# What the operator can do about each class, said under "Failed this run" in the summary.
FAILURE_ADVICE: dict[str, str] = {  # every class: tests/test_run_stats.py
    FailureClass.AUTH: "the endpoint refused the key (401/403): check --api_key and the key's rights",
    FailureClass.BAD_REQUEST: "the endpoint refused the request: check --model and its limits",
    FailureClass.NOT_FOUND: "no such model or path (404): check --model and --base_url",
    FailureClass.RATE_LIMIT: "throttled (429) after every retry: lower --max_inflight or set --rpm/--tpm",
    FailureClass.SERVER_ERROR: "the endpoint failed (5xx, 408, 409) after every retry: its side",
    FailureClass.TIMEOUT: "no complete answer within --request_timeout after every retry: raise it?",
    FailureClass.CONNECTION: "the endpoint was not reached: check --base_url, that it is up, the network",
    FailureClass.INVALID_RESPONSE: "answers that are no chat completion: the endpoint's bug",
    FailureClass.BUDGET: "--max_cost was reached: raise it to go on",
    FailureClass.API: "failed without saying how: a bug, please report it",
    FailureClass.PROMPT_TIMEOUT: "no outcome within --prompt_timeout: raise it, or see what its tools await",
    FailureClass.SANDBOX: "its sandbox could not be made or used: check the --sandbox backend's set-up",
    FailureClass.EXCEPTION: "an error in the runner (failures.jsonl has it): a bug, please report it",
    FailureClass.WORKER_LOST: "its worker died --max_prompt_attempts times: a prompt that kills it?",
}


class AgentError(Exception):
    """Base of every error this project raises on purpose."""

    exit_code = 1


class ConfigError(AgentError):
    exit_code = 2


class DatasetError(AgentError):
    exit_code = 2


class RunLockedError(AgentError):
    exit_code = 3


class RunDirectoryError(AgentError):
    """The run directory could not be written (a full disk, a quota, a read-only mount) while
    the run ran: what it wrote is kept, and `--resume` goes on from there."""


class ModelAPIError(AgentError):
    """`error_class` is one of the model endpoint's classes (auth ... invalid_response) or
    budget (--max_cost reached: no call starts)."""

    def __init__(
        self, error_class: FailureClass, message: str, *, status: int | None = None, attempts: int = 1
    ):
        super().__init__(message)
        self.error_class = error_class
        self.status = status
        self.attempts = attempts


class SandboxError(AgentError):
    pass


class SandboxPathError(SandboxError):
    pass


class SandboxStartError(SandboxError):
    pass


class SandboxUnavailable(SandboxError):
    exit_code = 2
