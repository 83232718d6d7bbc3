"""The project's exception tree. Operator-facing errors carry one clear line.

    AgentError
    ├── ConfigError          bad flags or configuration (exit 2)
    ├── DatasetError         the dataset cannot be used at all (exit 2)
    ├── RunLockedError       another runner holds the run directory (exit 3)
    ├── ModelAPIError        the endpoint failed for good (error_class says how)
    └── SandboxError         a sandbox could not be created or used
        ├── SandboxPathError     a path outside the sandbox
        ├── SandboxStartError    the prompt's sandbox could not be made (fails the prompt, even
        │                        when met inside a tool call: it is not the model's error)
        └── SandboxUnavailable   the backend cannot run on this machine

Errors the *model* should see (bad tool arguments, failing commands) never raise past the
tool layer: they become tool results.
"""

from __future__ import annotations


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
    """`error_class` is one of: auth, bad_request, not_found, rate_limit, server_error,
    timeout, connection, invalid_response; budget (--max_cost reached: no call starts)."""

    def __init__(self, error_class: str, message: str, *, status: int | None = None, attempts: int = 1):
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
