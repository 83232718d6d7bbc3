"""One rate limit per run, whatever the number of processes: the hub's arithmetic, and at the
simulated endpoint, `--rpm` held by two workers together even when only one has work (split
per worker, `--rpm=240` gave a lone busy worker 120 rpm)."""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import statistics
import threading
import time
from pathlib import Path

import pytest

from agent.batch.limit_pipes import HubServer
from agent.llm import shared_limit
from agent.llm.client import OpenAIChatModel
from agent.llm.rate_limit import AdaptiveLimiter
from agent.llm.shared_limit import HORIZON, LAPSE, STALE, TURN, Grant, LimitHub, Report
from agent.protocols import ChatRequest
from agent.servers.simulated.replies import usage_of
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, kill_started, tool_then_answer, wait_until, write_dataset


def test_a_burst_seen_by_one_member_cuts_and_pauses_everyone_once() -> None:
    hub = LimitHub(64)
    hub.exchange(Report("a", demand=32))
    first = hub.exchange(Report("b", demand=32, burst_generation=0, retry_after=2.0))
    assert first.limit == 32 and first.generation == 1 and first.pause > 1.9
    late = hub.exchange(Report("a", demand=32, burst_generation=0, retry_after=2.0))  # same burst
    assert late.limit == 32 and late.generation == 1 and late.share == 16 and late.pause > 1.9


def test_the_hub_keeps_the_runs_limit_at_each_change_dated_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.count(1000.0, 0.5)
    monkeypatch.setattr(shared_limit.time, "monotonic", lambda: next(clock))
    hub = LimitHub(8)  # 1000.0: the maximum
    hub.exchange(Report("a", demand=8))  # 1000.5: no change, no point
    hub.exchange(Report("b", demand=8, burst_generation=0))  # 1001.0: cut to 4
    hub.exchange(Report("a", demand=8, successes=8))  # 1001.5: grown back past 5
    assert 5.0 < hub.limit < 6.0
    assert hub.limit_history() == [(2.0, 8.0), (1.0, 4.0), (0.5, round(hub.limit, 2))]  # read at 1002.0
    assert shared_limit.dated([(2.0, 8.0)]) == [(1000.5, 8.0)]  # on this clock, read at 1002.5
    for _ in range(3 * shared_limit.HISTORY_LIMIT):  # a long run: bounded, the first point kept
        hub.exchange(Report("b", demand=8, burst_generation=hub.generation))
        hub.exchange(Report("a", demand=8, successes=1))
    assert len(hub.history) <= shared_limit.HISTORY_LIMIT and hub.history[0] == (1000.0, 8.0)


def test_the_limit_is_split_by_demand_not_evenly() -> None:
    hub = LimitHub(64)
    hub.limit = 32.0
    assert hub.exchange(Report("idle", demand=0)).share == 0  # it holds nothing it does not use
    busy = hub.exchange(Report("busy", demand=40))
    assert busy.share == 32
    assert hub.exchange(Report("idle", demand=10)).share == 0  # busy may use all 32 until it reports
    assert hub.exchange(Report("busy", demand=40, inflight=12)).share == 22  # 32 in use till it hears
    assert hub.exchange(Report("busy", demand=40, inflight=12)).share == 22  # now it has heard
    assert hub.exchange(Report("idle", demand=10)).share == 10


def test_the_shares_never_sum_past_the_limit() -> None:
    """--max_inflight=3 over two workers: 1 + 2, never 2 + 2 (each rounded up); a share cut
    while its calls are in flight frees nothing until they end."""
    hub = LimitHub(3)
    a = hub.exchange(Report("a", demand=2)).share
    b = hub.exchange(Report("b", demand=2)).share
    assert a + b <= 3 and a + b >= 2
    hub.exchange(Report("a", demand=2, inflight=a))
    hub.exchange(Report("b", demand=2, inflight=b))
    hub.limit = 1.0  # a burst cut it: the calls in flight still hold their slots
    assert hub.exchange(Report("c", demand=2)).share == 0
    for _ in range(2):  # the second report says the grant of 0 reached them
        hub.exchange(Report("a", demand=0, inflight=0))
        hub.exchange(Report("b", demand=0, inflight=0))
    assert hub.exchange(Report("c", demand=2)).share == 1  # freed: it makes progress


def test_a_share_given_back_frees_nothing_until_the_member_has_heard() -> None:
    """Between its report and the grant that reaches it, a member still starts calls on its
    previous share: given away at once, 2 workers each had 1 of --max_inflight=1."""
    hub = LimitHub(1)
    assert hub.exchange(Report("a", demand=1)).share == 1
    assert hub.exchange(Report("a", demand=0)).share == 0  # between two calls: a tool runs
    assert hub.exchange(Report("b", demand=1)).share == 0  # a may start on its 1 until it hears
    hub.exchange(Report("a", demand=0))
    assert hub.exchange(Report("b", demand=1)).share == 1


def test_more_workers_than_slots_each_get_turns_and_the_cap_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 slots, 4 members that always have a call waiting; each call ends by the member's next
    report, 0.3 s later, and a member starts calls on the share it holds, also before its report
    is answered. Never more than 2 calls in flight, and every member gets a call within 3
    TURNs of its last. Before, the split's left-over slots went to the members listed last: the first two
    never got one while the others kept asking."""
    now = [1000.0]
    monkeypatch.setattr(shared_limit.time, "monotonic", lambda: now[0])
    hub, members = LimitHub(2), "abcd"
    share, inflight, calls = dict.fromkeys(members, 0), dict.fromkeys(members, 0), dict.fromkeys(members, 0)
    called: dict[str, list[float]] = {member: [1000.0] for member in members}

    def start(member: str) -> None:
        while inflight[member] < min(1, share[member]):
            inflight[member] += 1
            calls[member] += 1
            called[member].append(now[0])
            assert sum(inflight.values()) <= 2, (inflight, share)

    for _ in range(60):
        for member in members:
            now[0] += 0.3 / len(members)
            inflight[member] = 0  # its call ended: the next one waits
            start(member)  # on the share it holds, before the hub answers
            share[member] = hub.exchange(Report(member, demand=1, inflight=inflight[member])).share
            start(member)
    waits = {m: max(b - a for a, b in itertools.pairwise(times)) for m, times in called.items()}
    assert max(waits.values()) < 3 * TURN, waits  # a turn within a bounded time
    assert min(calls.values()) >= 10 and sum(calls.values()) >= 90, calls


def test_successes_from_every_member_grow_the_one_limit() -> None:
    hub = LimitHub(8)
    hub.limit = 4.0
    hub.exchange(Report("a", demand=4, successes=4))
    grown = hub.exchange(Report("b", demand=4, successes=4)).limit
    assert 5.0 < grown < 6.5  # about one slot per window of the limit's size, from both


def test_start_permits_follow_one_pace_across_members(monkeypatch: pytest.MonkeyPatch) -> None:
    # One clock reading for both exchanges: on a loaded machine the second came 30 ms later.
    monkeypatch.setattr(shared_limit.time, "monotonic", lambda: 1000.0)
    hub = LimitHub(64, rpm=600)  # one start per 0.1 s
    a = hub.exchange(Report("a", demand=10, want_starts=10)).starts
    b = hub.exchange(Report("b", demand=10, want_starts=10)).starts
    assert len(a) >= 5 and max(a) <= HORIZON and a[0] == pytest.approx(0, abs=0.01)
    assert b[0] == pytest.approx(a[-1] + 0.1, abs=0.02)  # b's permits come after a's
    assert all(later - earlier == pytest.approx(0.1, abs=0.01) for earlier, later in itertools.pairwise(a))


def test_tokens_of_every_member_and_their_calls_in_flight_count_against_one_tpm() -> None:
    hub = LimitHub(8, tpm=1000)
    first = hub.exchange(Report("a", demand=2, want_starts=2, successes=1, tokens=300))
    assert len(first.starts) == 2  # 300 a call, 300 answered: room for two calls
    held = hub.exchange(Report("b", demand=1, want_starts=1))
    assert held.starts == ()  # a's two calls in flight hold 600
    answered = hub.exchange(Report("a", demand=0, successes=2, tokens=600, released=2))
    assert answered.tpm_wait > 59  # 900 answered: the next call fits once the first 300 leave
    assert hub.exchange(Report("b", demand=1, want_starts=1)).starts == ()


def test_rpm_is_one_budget_for_all_workers_at_the_endpoint(tmp_path: Path) -> None:
    """One conversation of 12 calls on one of two workers: the endpoint sees starts --rpm=120
    apart (0.5 s); split per worker they were 1 s apart. Judged on the median gap: a slow tool
    call on a loaded machine widens a gap."""
    turns = 12
    call = (("terminal", json.dumps({"command": "true"})),)
    with SimulatedEndpoint() as endpoint:
        endpoint.script("long", [Turn(reasoning="r", tool_calls=call)] * (turns - 1) + [Turn("done", "r")])
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": "long"}])
        done = BatchCLI(tmp_path, endpoint).run(
            f"--dataset_file={dataset}", "--batch_size=1", "--run_name=rpm", "--num_workers=2",
            "--rpm=120", f"--max_turns={turns}", "--distribution=terminal_only",
        )  # fmt: skip
        assert done.returncode == 0, done
        times = sorted(request.received_at for request in endpoint.requests)
    assert len(times) == turns
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # The budget holds: starts are paced on one schedule, so a call that reached the endpoint
    # late shortens only the windows it opens, by its lateness: any 8 gaps span 4 s, less a
    # call up to 1 s late (at twice the budget they would span 2 s).
    assert min(times[i + 8] - times[i] for i in range(len(times) - 8)) > 3.0
    assert statistics.median(gaps) == pytest.approx(0.5, rel=0.1)  # and all of it is used


def test_a_member_that_stopped_reporting_holds_no_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker actor lost with its node must not keep its slots for the rest of the run."""
    now = [1000.0]
    monkeypatch.setattr(shared_limit.time, "monotonic", lambda: now[0])
    hub = LimitHub(60)
    hub.exchange(Report("lost", demand=30))
    assert hub.exchange(Report("alive", demand=60)).share == 30
    now[0] += STALE + 1
    assert hub.exchange(Report("alive", demand=60)).share == 30  # its calls may be in flight yet
    now[0] += LAPSE
    assert hub.exchange(Report("alive", demand=60)).share == 60


def test_a_worker_that_exited_frees_its_slots_at_once_and_its_permits_after_lapse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's hub server reads a worker's exit as its pipe's EOF: its slots go to the
    others at once (silent, they counted until LAPSE), and the tokens its permits reserve count
    until LAPSE without passing to its replacement, which reports under the same name."""
    hub = LimitHub(4, tpm=9000)
    hub.exchange(Report("worker-1", demand=1, want_starts=1))
    hub.exchange(Report("worker-1", demand=4, want_starts=3, successes=1, tokens=2000, released=1))
    assert hub.exchange(Report("worker-0", demand=4)).share == 0  # worker-1 holds the 4 slots
    here, there = multiprocessing.Pipe()
    server = HubServer(hub, [here])
    server.start()
    try:
        there.send(Report("worker-1", demand=4, inflight=3))
        assert there.recv().share == 2  # split with worker-0; it may still start on its 4
        there.close()  # the worker is gone
        wait_until(lambda: "worker-1" not in hub.granted, "the hub to hear of the exit")
    finally:
        server.stop()
    assert hub.exchange(Report("worker-0", demand=4)).share == 4
    assert hub.exchange(Report("worker-1", demand=1)).share == 0  # its replacement
    assert sum(hub.held.values()) == 3 and hub.held["worker-1"] == 0  # 3 calls of 2,000 reserved
    now = time.monotonic()
    monkeypatch.setattr(shared_limit.time, "monotonic", lambda: now + LAPSE + 1)
    hub.exchange(Report("worker-0", demand=0))
    assert sum(hub.held.values()) == 0


def test_a_stalled_member_keeps_its_token_reservations(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose loop stalls past STALE (its answers unreported) still reserves its calls'
    tokens: forgotten at 5 s, 4 workers started 13,680 tokens in a minute under --tpm=9000."""
    now = [1000.0]
    monkeypatch.setattr(shared_limit.time, "monotonic", lambda: now[0])
    hub = LimitHub(16, tpm=9000)
    hub.exchange(Report("a", demand=1, want_starts=1))
    hub.exchange(Report("a", demand=6, want_starts=6, successes=1, tokens=1368, released=1))
    assert hub.held["a"] == 5  # 6 calls of 1,368: 8,208 of 9,000
    now[0] += STALE + 1  # a stalls with its 5 calls answered and unreported
    assert hub.exchange(Report("b", demand=4, want_starts=4)).starts == ()


class DirectLink:
    """A member's link to a hub in this process (the parent's hub thread, without the pipe)."""

    def __init__(self, hub: LimitHub, lock: threading.Lock) -> None:
        self.hub, self.lock = hub, lock

    async def exchange(self, report: Report) -> Grant:
        with self.lock:
            return self.hub.exchange(report)


def _member(endpoint: SimulatedEndpoint, link: DirectLink, name: str, until: float, stall: bool) -> None:
    """One worker's event loop: 3 conversations asking one call after another through the real
    client and a limiter on the hub, until `until`; with `stall`, the loop blocks for STALE + 3 s
    once its calls are in flight after the first answer (its answers arrive, unreported)."""

    async def ask(model: OpenAIChatModel, prompt: str) -> None:
        while True:
            await model.complete(ChatRequest(messages=[{"role": "user", "content": prompt}], tools=[]))

    async def go() -> None:
        limiter = AdaptiveLimiter(3, tpm=140, hub=link, member=name)
        model = OpenAIChatModel(base_url=endpoint.base_url, api_key="k", model="sim-model", limiter=limiter)
        tasks = [asyncio.create_task(ask(model, f"{name} {i}")) for i in range(3)]
        try:
            while stall and not (limiter.inflight and link.hub.window and link.hub.window.per_call):
                await asyncio.sleep(0.01)
            if stall:
                time.sleep(STALE + 3)  # blocks this loop, as a sandbox closing on a loaded machine did
            await asyncio.sleep(until - time.monotonic())
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await model.aclose()
            assert limiter.sync is not None
            await limiter.sync.aclose()

    asyncio.run(go())


@pytest.mark.long
def test_tpm_holds_over_four_members_while_one_stalls_past_stale(sim_endpoint: SimulatedEndpoint) -> None:
    """Four members on their own event loops, `--tpm=140` (10 calls of 14 tokens), one member's
    loop blocked past STALE with its calls answered and unreported: the tokens the endpoint
    answers stay within the minute's budget, give or take one call. Before, the hub forgot the
    stalled member's reservations at STALE and the others started their calls' worth more."""
    answer = Turn("done", "thinking", delay=0.5)
    sim_endpoint.set_default_script([answer])
    hub, lock = LimitHub(12, tpm=140), threading.Lock()
    until = time.monotonic() + STALE + 6
    members = [
        threading.Thread(target=_member, args=(sim_endpoint, DirectLink(hub, lock), f"m{i}", until, i == 0))
        for i in range(4)
    ]
    for member in members:
        member.start()
    for member in members:
        member.join(timeout=60)
    requests = sim_endpoint.requests
    assert requests[-1].received_at - requests[0].received_at < 50  # all within one minute's budget
    tokens = [usage_of(request.body, answer)["total_tokens"] for request in requests]
    assert sum(tokens) <= 140 + max(tokens), tokens


@pytest.mark.long
def test_tpm_holds_in_every_minute_across_four_workers(tmp_path: Path) -> None:
    """`--tpm` is one budget for four workers: the tokens of the calls started in any 60 s
    window stay within it, give or take one call (a call's tokens are known after it starts).
    Before, the workers' calls were counted apart: 4 workers started 21,888 tokens in 16 s
    under --tpm=9000, and at each minute's turn several workers started calls at once. Watched
    for 65 s, past the first minute's turn; a loaded machine only spreads the starts out."""
    answer = Turn("done", "thinking")
    prompts = [f"Budgeted prompt {i}" for i in range(24)]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, [answer])
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        cli.start(
            f"--dataset_file={dataset}", "--batch_size=24", "--run_name=tpm", "--num_workers=4",
            "--max_inflight=16", "--tpm=3000", "--distribution=terminal_only",
        )  # fmt: skip
        try:
            wait_until(lambda: len(endpoint.requests) >= 1, "the first call")
            time.sleep(65)
            window = list(endpoint.requests)
        finally:
            kill_started()
    starts = sorted((r.received_at, usage_of(r.body, answer)["total_tokens"]) for r in window)
    largest = max(tokens for _, tokens in starts)
    worst = max(sum(t for at, t in starts if begin <= at < begin + 60) for begin, _ in starts)
    assert worst <= 3000 + largest, (worst, [(round(at - starts[0][0], 1), t) for at, t in starts])
    assert len(starts) > 3000 // largest  # and the second minute's budget is used


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("slots", [1, 2, 3])
def test_max_inflight_holds_at_the_endpoint_for_any_number_of_workers(
    tmp_path: Path, slots: int, workers: int
) -> None:
    """`--max_inflight` is a cap on the calls at the endpoint at once, whatever the number of
    workers, also with more workers than slots (some wait for a grant of their first one), and
    every prompt finishes. Each conversation makes two calls with a tool call between (demand
    comes and goes). Before, each worker's share was rounded up: 3 over 2 workers put 4 calls
    at the endpoint, and 2 over 4 workers 4."""
    prompts = [f"Slow prompt {i}" for i in range(workers + 2)]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer(delay=0.4))
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        done = BatchCLI(tmp_path, endpoint).run(
            f"--dataset_file={dataset}", f"--batch_size={len(prompts)}", "--run_name=inflight",
            f"--num_workers={workers}", f"--max_inflight={slots}", "--distribution=terminal_only",
        )  # fmt: skip
        assert done.returncode == 0, done
        stats = endpoint.stats
    assert stats.requests_total == 2 * len(prompts)  # every prompt made progress
    assert stats.peak_inflight <= slots, stats


def test_tpm_alone_holds_at_the_endpoint(tmp_path: Path) -> None:
    """`--tpm` without `--rpm`: the tokens the endpoint answers in the first seconds stay within
    the minute's budget, give or take one call (a call's tokens are known after it starts).
    Before, a call started whenever a slot was free: 40 calls in flight went out at once."""
    answer = Turn("done", "thinking")
    prompts = [f"Budgeted prompt {i}" for i in range(40)]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, [answer])
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        cli.start(
            f"--dataset_file={dataset}", "--batch_size=40", "--run_name=tpm", "--num_workers=2",
            "--max_inflight=40", "--tpm=6000", "--distribution=terminal_only",
        )  # fmt: skip
        try:
            wait_until(lambda: len(endpoint.requests) >= 2, "calls after the first answer")
            time.sleep(3)  # for any call the budget would still let through
            window = list(endpoint.requests)
        finally:
            kill_started()
    assert window[-1].received_at - window[0].received_at < 50  # all within one minute's budget
    tokens = [usage_of(request.body, answer)["total_tokens"] for request in window]
    assert sum(tokens) <= 6000 + max(tokens), tokens


def test_a_lost_ray_actor_gives_its_slots_back_at_once() -> None:
    """On Ray a lost actor's replacement reports under a new name, so nothing would give the
    lost one's slots back before LAPSE: the driver tells the hub actor, which frees them."""
    from agent.cluster.actor import HubActor

    hub = HubActor(4, None, None, None)
    hub.exchange(Report("worker-1", demand=1, want_starts=1))
    hub.exchange(Report("worker-1", demand=4, want_starts=3, successes=1, released=1))
    assert hub.exchange(Report("worker-0", demand=4)).share == 0  # worker-1 holds the 4 slots
    hub.leave("worker-1")
    assert hub.exchange(Report("worker-0", demand=4)).share == 4
