"""A scripted OpenAI-compatible endpoint for tests and benchmarks (`SimulatedEndpoint`).

Owns which reply a request gets (per-conversation scripts of `Turn`s, else the default
policy; final answers and a judge model's verdicts by rule: `agent.servers.simulated.verdicts`),
seeded fault injection (429 with Retry-After, 5xx, hang, drop), latency, and the record of
every request received. What a reply looks like is `agent.servers.simulated.replies`'s
job; HTTP is `agent.servers.endpoint_server`'s; the command line is
`agent.servers.simulated.cli`'s (`python -m agent.servers.simulated`).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.common.lifecycle import StartStop
from agent.servers.endpoint_server import EndpointServer
from agent.servers.faults import EndpointFault
from agent.servers.simulated.images import (
    ImageStore,
    add_image_output,
    describe_images,
    generations,
    image_parts,
    wants_image_output,
)
from agent.servers.simulated.replies import (
    DEFAULT_TOOL_URL,
    POLICIES,
    REASONING_STYLES,
    Turn,
    build_completion,
    first_user_text,
    policy_turn,
    script_slots,
    styled_turn,
)
from agent.servers.simulated.token_fields import add_token_fields, wants_tokens
from agent.servers.simulated.tokenizer import DRIFT_MODES, TOKEN_APIS
from agent.servers.simulated.verdicts import is_judge, judge_turn, marked_answer
from agent.servers.traffic import current_request

# Turn and EndpointFault are re-exported: scripts are written with them next to the endpoint.
__all__ = ["EndpointFault", "EndpointStats", "RecordedRequest", "SimulatedEndpoint", "Turn"]


@dataclass(frozen=True)
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]
    path: str
    received_at: float  # time.time()


@dataclass(frozen=True)
class EndpointStats:
    requests_total: int
    inflight: int
    peak_inflight: int
    faults: Mapping[str, int]  # "429", "500", … for HTTP faults; "hang", "drop"
    first_request_at: float | None = None  # time.monotonic() of the first chat request
    last_reply_at: float | None = None  # time.monotonic() when the last chat request was answered


class SimulatedEndpoint(StartStop):
    """An `EndpointServer` whose responder is a scripted, fault-injecting simulated model.

    Scripts are keyed by a conversation's first user message. The reply to a request is the
    turn for the number of assistant messages already in its history, so a retried request
    gets the same reply. Faults in a script are consumed: the retry after a scripted fault
    gets the next turn. A script that ends in faults keeps failing with its last one.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        policy: str = "tool_then_answer",
        reasoning: str = "field",
        seed: int = 0,
        rate_429: float = 0.0,
        retry_after: float | None = 1.0,
        rate_5xx: float = 0.0,
        rate_hang: float = 0.0,
        rate_drop: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
        max_recorded: int | None = None,
        model_ids: Sequence[str] = ("sim-model",),
        reject_unknown_models: bool = False,  # True: 404 for a model not in model_ids, as providers do
        tool_url: str = DEFAULT_TOOL_URL,
        token_api: str = "vllm",  # "none": token fields are ignored, as an OpenAI-strict server does
        token_drift: str = "none",  # how earlier turns are re-rendered: tokenizer.DRIFT_MODES
        reuse_port: bool = False,  # share the port with servers in other processes (EndpointServer)
    ) -> None:
        rates = (rate_429, rate_5xx, rate_hang, rate_drop)
        _check_options(policy, reasoning, rates, (token_api, token_drift))
        self._token_api, self._token_drift = token_api, token_drift
        self._latency, self._policy, self._reasoning = latency, policy, reasoning
        self.tool_url = tool_url  # the page the default policy's url arguments name
        self._rates, self._retry_after = rates, retry_after
        self._rng = random.Random(seed)
        self._record, self._recorded = record, deque[RecordedRequest](maxlen=max_recorded)
        self._lock = threading.Lock()
        self._scripts: dict[str, tuple[tuple[Turn, ...], ...]] = {}
        self._default_script: tuple[tuple[Turn, ...], ...] | None = None
        self._attempts: Counter[tuple[str, int]] = Counter()
        self._faults: Counter[str] = Counter()
        self._serve(model_ids, reject_unknown_models, host=host, port=port, reuse_port=reuse_port)

    def _serve(self, model_ids: Sequence[str], reject_unknown: bool, **where: Any) -> None:
        """`where`: how `EndpointServer` listens (host, port, reuse_port)."""
        self._default_model = model_ids[0]
        self._other_models = frozenset(model_ids[1:])
        self._known_models = frozenset(model_ids) if reject_unknown else None
        self._images = ImageStore()
        routes = {"/v1/images/generations": self._generate}
        self.server = EndpointServer(
            self._respond, model_ids=model_ids, routes=routes, files=self._images.get, **where
        )

    # ------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    async def serve_forever(self, on_ready: Callable[[], None] | None = None) -> None:
        await self.server.serve_forever(on_ready)

    # ------------------------------------------------------------ scripting and inspection

    def script(self, prompt: str, turns: Sequence[Turn]) -> None:
        """Replies for the conversation whose first user message is `prompt`."""
        with self._lock:
            self._scripts[prompt] = script_slots(turns)

    def set_default_script(self, turns: Sequence[Turn]) -> None:
        """Replies for every conversation without its own script (instead of the policy)."""
        with self._lock:
            self._default_script = script_slots(turns)

    def clear(self) -> None:
        """Forget every script and which scripted faults were consumed."""
        with self._lock:
            self._scripts.clear()
            self._default_script = None
            self._attempts.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far (empty when record=False)."""
        with self._lock:
            return list(self._recorded)

    def clear_requests(self) -> None:
        with self._lock:
            self._recorded.clear()

    @property
    def stats(self) -> EndpointStats:
        with self._lock:
            faults = dict(self._faults)
        server = self.server
        return EndpointStats(
            server.requests_total,
            server.inflight,
            server.peak_inflight,
            faults,
            server.first_request_at,
            server.last_reply_at,
        )

    # ------------------------------------------------------------ answering

    async def _respond(self, body: dict[str, Any]) -> dict[str, Any]:
        self._remember(body)
        injected = self._draw_fault(body)  # answered at once: an overloaded server does not think first
        if injected is not None:
            raise self._counted(injected)
        turn, scripted = self._choose_turn(body)
        if self._latency + turn.delay > 0:
            await asyncio.sleep(self._latency + turn.delay)
        if turn.fault is not None:
            raise self._counted(turn.fault)
        completion = build_completion(body, turn, self._default_model)
        if wants_image_output(body) and not scripted:  # a script says what the model answers
            add_image_output(completion, body, first_user_text(body.get("messages") or []))
        if self._token_api == "vllm" and wants_tokens(body):  # else the reply as it always was
            add_token_fields(completion, body, self._token_drift)
        return completion

    async def _generate(self, body: dict[str, Any]) -> dict[str, Any]:
        """`/v1/images/generations`: recorded, faults and latency as for chat, then a PNG."""
        self._remember(body)
        injected = self._draw_fault(body)
        if injected is not None:
            raise self._counted(injected)
        if self._latency > 0:
            await asyncio.sleep(self._latency)
        return generations(body, self._images)

    def _counted(self, fault: EndpointFault) -> EndpointFault:
        with self._lock:
            self._faults[str(fault.status) if fault.kind == "http" else fault.kind] += 1
        return fault

    def _remember(self, body: dict[str, Any]) -> None:
        if not self._record:
            return
        context = current_request()
        headers, path = (context.headers, context.path) if context else ({}, "")
        with self._lock:
            self._recorded.append(RecordedRequest(body, headers, path, time.time()))

    def _draw_fault(self, body: dict[str, Any]) -> EndpointFault | None:
        model = body.get("model")
        if self._known_models is not None and model not in self._known_models:
            return EndpointFault(404, f"The model `{model}` does not exist")
        with self._lock:
            draw = self._rng.random()
            status = self._rng.choice((500, 502, 503))
        rate_429, rate_5xx, rate_hang, rate_drop = self._rates
        if draw < rate_429:
            headers = {} if self._retry_after is None else {"Retry-After": f"{self._retry_after:g}"}
            return EndpointFault(429, "rate limit exceeded (simulated)", headers=headers)
        draw -= rate_429
        if draw < rate_5xx:
            return EndpointFault(status, "upstream error (simulated)")
        draw -= rate_5xx
        if draw < rate_hang:
            return EndpointFault(kind="hang")
        if draw - rate_hang < rate_drop:
            return EndpointFault(kind="drop")
        return None

    def _choose_turn(self, body: dict[str, Any]) -> tuple[Turn, bool]:
        """The turn that answers `body`, and whether a script chose it."""
        messages = body.get("messages") or []
        if is_judge(body.get("model")):  # a judge's verdict follows its rule, never a script
            return judge_turn(body), False
        prompt = first_user_text(messages)
        replied = sum(1 for message in messages if message.get("role") == "assistant")
        with self._lock:
            slots = self._scripts.get(prompt, self._default_script)
            if slots is not None and replied < len(slots):
                attempt = self._attempts[(prompt, replied)]
                self._attempts[(prompt, replied)] += 1
                slot = slots[replied]
                return slot[min(attempt, len(slot) - 1)], True
        return self._unscripted_turn(body, messages), False

    def _unscripted_turn(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> Turn:
        """The policy's turn, except that images shown are described, and a request without
        tools for one of the endpoint's other models (`model_ids[1:]`: a tool asking another
        model) gets an answer signed by that model, which mixture-of-agents tests check."""
        shown = image_parts(messages)
        if shown:
            return Turn(content=describe_images(shown))
        tools = body.get("tools") or []
        turn = policy_turn(self._policy, self._reasoning, messages, tools, self.tool_url)
        final = marked_answer(first_user_text(messages), body.get("seed"))
        if final is not None and not turn.tool_calls:  # the rule's answer is the whole reply
            turn = styled_turn(final, "The task says what to answer.", self._reasoning)
        model = body.get("model")
        if not tools and model in self._other_models:
            turn = replace(turn, content=f"{turn.content}\n(answered by {model})")
        return turn


def _check_options(policy: str, reasoning: str, rates: tuple[float, ...], tokens: tuple[str, str]) -> None:
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    if reasoning not in REASONING_STYLES:
        raise ValueError(f"reasoning must be one of {REASONING_STYLES}, not {reasoning!r}")
    token_api, token_drift = tokens
    if token_api not in TOKEN_APIS:
        raise ValueError(f"token_api must be one of {TOKEN_APIS}, not {token_api!r}")
    if token_drift not in DRIFT_MODES:
        raise ValueError(f"token_drift must be one of {DRIFT_MODES}, not {token_drift!r}")
    if min(rates) < 0 or sum(rates) > 1 + 1e-9:
        raise ValueError("fault rates must be >= 0 and sum to at most 1")
