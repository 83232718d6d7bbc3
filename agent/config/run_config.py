"""The batch run's typed, frozen configuration, built once from the CLI flags and saved with the run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.backends import BACKENDS, DEFAULT_BACKEND, unavailable_reason
from agent.backends import RUN_BACKENDS as RUN_BACKENDS  # the flag table's choices
from agent.config.agent_config import AgentConfig
from agent.config.dataset_config import DatasetOptions
from agent.config.distribution_config import Distribution
from agent.config.export_config import ExportOptions
from agent.config.verify_config import VerifyOptions
from agent.errors import ConfigError
from agent.protocols import Prices
from agent.sandboxes import SandboxOptions

# Each discard reason and the RunConfig field (bool, a flag of the same name) that turns its
# filter off. A discard whose filter is off is moved into the output when a run starts.
KEPT_BY: dict[str, str] = {
    "duplicate_call_id": "keep_malformed",
    "tool_not_offered": "keep_malformed",
    "invalid_arguments": "keep_malformed",
    "leaked_tool_call": "keep_malformed",
    "no_reasoning": "keep_no_reasoning",
    "token_drift": "keep_token_drift",  # --capture_tokens: a turn's prompt broke the sequence
}

# Each reason --keep discards for and the --keep modes that keep it. Not a filter of one entry
# like KEPT_BY's: judged from the entry's verification (`not_passing`) and its prompt's other
# samples (`not_best`), never written as a label; `agent.batch.keeping` re-judges it each run.
KEPT_BY_MODE: dict[str, tuple[str, ...]] = {
    "not_passing": ("all", "best"),
    "not_best": ("all", "passing"),
}


def kept_by(reason: str) -> str | None:
    """The flag that keeps what `reason` discards, as an operator types it (None: no flag)."""
    if reason in KEPT_BY_MODE:
        return "--keep=all"
    return f"--{KEPT_BY[reason]}" if reason in KEPT_BY else None


# Beyond these a value is no choice but a slip, and it broke only later: 100,000 embedded threads
# crashed the model's OpenMP at start, a price of 1e308 made a cost infinite after the calls were
# paid for (no entry could be written). The dearest model is priced well under $1,000 a million.
MAX_EMBEDDED_THREADS = 1024
MAX_PRICE = 1_000_000.0  # USD per million tokens

MAX_RUN_NAME = 128
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_run_name(name: str) -> str:
    """A run name that stays inside the output directory (no separators, no `..`)."""
    if len(name) > MAX_RUN_NAME:  # a directory name's own limit is 255 bytes
        raise ConfigError(f"--run_name: at most {MAX_RUN_NAME} characters (got {len(name)})")
    if not _RUN_NAME.match(name) or ".." in name:
        raise ConfigError(
            f"--run_name={name!r}: use letters, digits, '.', '_' or '-' (it names a directory under the "
            "output directory and must not escape it)"
        )
    return name


@dataclass(frozen=True)
class RunConfig:
    dataset_file: str
    batch_size: int
    run_name: str
    agent: AgentConfig
    output_dir: str = "data"
    distribution: str = "default"
    seed: int = 0
    num_workers: int = 4
    max_inflight: int = 64
    resume: bool = False
    verbose: bool = False
    max_samples: int | None = None
    keep_no_reasoning: bool = False
    prompt_timeout: float | None = None
    max_prompt_attempts: int = 2  # workers a prompt may lose (it was running when one died) in one run
    rpm: float | None = None
    tpm: float | None = None
    sandbox: SandboxOptions = field(default_factory=SandboxOptions)
    sandbox_starts: int = 4  # concurrent sandbox creations per worker process
    embedded_threads: int = 1
    keep_malformed: bool = False  # keep entries the well-formedness filter would discard
    # Entries whose tokens drifted are kept (labelled token_drift, counted in statistics.json)
    # unless this is False: an RL export of one is still exact, with fewer generated tokens.
    keep_token_drift: bool = True
    price_input: float | None = None  # USD per million prompt tokens
    price_output: float | None = None  # USD per million completion tokens
    price_cached: float | None = None  # USD per million cached prompt tokens (default: price_input)
    max_cost: float | None = None  # USD this invocation may spend before it stops scheduling
    allow_missing_toolsets: bool = False  # run although a sampled toolset is unavailable here
    export: ExportOptions = field(default_factory=ExportOptions)  # files made from the run at its end
    backend: str = DEFAULT_BACKEND  # "local": worker processes here; "ray": actors on a Ray cluster
    ray_address: str = "auto"  # the Ray cluster to join: "auto" (this machine's) or host:port
    samples_per_prompt: int = 1  # attempts at each prompt, each its own unit of work and entry
    verify: VerifyOptions = field(default_factory=VerifyOptions)  # checks of each attempt; --keep
    rescore: bool = False  # re-check an existing run's entries from their transcripts, run nothing
    dataset: DatasetOptions = field(default_factory=DatasetOptions)  # columns -> row fields, revision
    distributions_file: str | None = None  # YAML/JSON distributions adding to or overriding the table
    # Its distributions as loaded (a resume without the file: as run_config.json recorded them)
    distributions: Mapping[str, Distribution] = field(default_factory=dict)

    def __post_init__(self) -> None:
        given = (self.price_input is not None, self.price_output is not None)
        if any(given) and not all(given):
            raise ConfigError("--price_input and --price_output go together: pass both, or neither")
        if self.price_cached is not None and not all(given):
            raise ConfigError("--price_cached needs --price_input and --price_output")
        if self.backend in BACKENDS and (why := unavailable_reason(self.backend)) is not None:
            raise ConfigError(why)  # an unknown name is the flag table's (choices) to refuse

    @property
    def prices(self) -> Prices | None:
        """The price table of the flags, None when not given (then only a provider's cost counts)."""
        if self.price_input is None or self.price_output is None:
            return None
        return Prices(self.price_input, self.price_output, self.price_cached)

    def keeps(self, reason: str) -> bool:
        """Whether the filter that discards for `reason` is off in this run."""
        if reason in KEPT_BY_MODE:
            return self.verify.keep in KEPT_BY_MODE[reason]
        field_name = KEPT_BY.get(reason)
        return field_name is not None and bool(getattr(self, field_name))

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.run_name

    @property
    def inflight_per_worker(self) -> int:
        return max(1, -(-self.max_inflight // self.num_workers))

    def public(self) -> dict[str, Any]:
        """JSON-able, without secrets: what `run_config.json` holds."""
        data = {k: v for k, v in asdict(self).items() if k not in ("agent", "sandbox")}
        data["agent"] = self.agent.public()
        data["sandbox"] = asdict(self.sandbox)
        return data
