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
    failures.jsonl, statistics.json and the report as that value, unchanged."""

    # The endpoint refused the key (401/403): check --api_key / the provider's key and its rights.
    AUTH = "auth"
    # The endpoint refused the request (400/422/other 4xx): check --model and the model's limits.
    BAD_REQUEST = "bad_request"
    # The model or path does not exist (404): check --model and --base_url.
    NOT_FOUND = "not_found"
    # Still throttled (429) after every retry: lower --num_workers or set --rpm/--tpm; resume.
    RATE_LIMIT = "rate_limit"
    # The endpoint failed (5xx, 408, 409) after every retry: its side; --resume retries later.
    SERVER_ERROR = "server_error"
    # No complete answer within --request_timeout after every retry: raise it or resume later.
    TIMEOUT = "timeout"
    # The endpoint could not be reached after every retry: check --base_url and the network.
    CONNECTION = "connection"
    # An answer that is no chat completion or image reply (bad JSON, too big): an endpoint bug.
    INVALID_RESPONSE = "invalid_response"
    # --max_cost was reached, so no model call starts: raise it and --resume to go on.
    BUDGET = "budget"
    # The conversation failed without saying how (not expected): report it as a bug.
    API = "api"
    # No outcome within --prompt_timeout: raise it, or look at what the prompt's tools wait on.
    PROMPT_TIMEOUT = "prompt_timeout"
    # The prompt's sandbox could not be made or used: check the --sandbox backend's set-up.
    SANDBOX = "sandbox"
    # An unexpected error in the runner (its message names it): report it as a bug; resume.
    EXCEPTION = "exception"
    # Its worker died --max_prompt_attempts times (crash, OOM killer): a poison prompt? --resume.
    WORKER_LOST = "worker_lost"


class AgentError(Exception):
    """Base of every error this project raises on purpose."""

    exit_code = 1


class ConfigError(AgentError):
    exit_code = 2


class DatasetError(AgentError):
    exit_code = 2


class RunLockedError(AgentError):
    exit_code = 3


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
