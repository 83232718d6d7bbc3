"""The simulated endpoint's command line: `python -m agent.servers.simulated`.

    python -m agent.servers.simulated --port=0 --latency=0.5 --rate_429=0.2
prints `listening on http://127.0.0.1:PORT/v1` and serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from agent.servers.simulated.replies import DEFAULT_TOOL_URL, POLICIES, REASONING_STYLES
from agent.servers.simulated.server import SimulatedEndpoint
from agent.servers.simulated.tokenizer import DRIFT_MODES, TOKEN_APIS


def _optional_float(text: str) -> float | None:
    return None if text.lower() in ("none", "") else float(text)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agent.servers.simulated", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per reply")
    parser.add_argument("--policy", choices=POLICIES, default="tool_then_answer")
    parser.add_argument("--reasoning", choices=REASONING_STYLES, default="field")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate_429", type=float, default=0.0)
    parser.add_argument("--retry_after", type=_optional_float, default=1.0, help="seconds, or none")
    parser.add_argument("--rate_5xx", type=float, default=0.0)
    parser.add_argument("--rate_hang", type=float, default=0.0)
    parser.add_argument("--rate_drop", type=float, default=0.0)
    parser.add_argument("--model", action="append", help="model id to list (repeatable)")
    parser.add_argument("--tool_url", default=DEFAULT_TOOL_URL, help="URL for the policy's url arguments")
    parser.add_argument(
        "--token_api", choices=TOKEN_APIS, default="vllm", help="whose token fields to answer when asked"
    )
    parser.add_argument(
        "--token_drift", choices=DRIFT_MODES, default="none", help="re-render earlier turns (token drift)"
    )
    return parser.parse_args(argv)


async def _serve_until_signal(endpoint: SimulatedEndpoint) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    def announce() -> None:
        print(f"listening on {endpoint.base_url}", flush=True)  # benchmarks read this exact line

    server = asyncio.create_task(endpoint.serve_forever(on_ready=announce))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({server, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    server.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await server  # re-raises a failure to listen


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        endpoint = SimulatedEndpoint(
            latency=args.latency,
            policy=args.policy,
            reasoning=args.reasoning,
            seed=args.seed,
            rate_429=args.rate_429,
            retry_after=args.retry_after,
            rate_5xx=args.rate_5xx,
            rate_hang=args.rate_hang,
            rate_drop=args.rate_drop,
            host=args.host,
            port=args.port,
            record=False,  # nobody reads the record of a CLI endpoint; keep memory flat
            model_ids=args.model or ("sim-model",),
            tool_url=args.tool_url,
            token_api=args.token_api,
            token_drift=args.token_drift,
        )
        asyncio.run(_serve_until_signal(endpoint))
    except (ValueError, OSError) as exc:
        print(f"simulated endpoint: {exc}", file=sys.stderr)
        return 2
    return 0
