"""Benchmark of the embedded model through the real path: agent loop, openai SDK, our HTTP
endpoint, the adapter, llama.cpp. Prints load time, prompt/generation tokens per second,
peak RSS, wall time, and what the prompts did (tool calls, answers).

    python -m bench.embedded_model [--prompts=data/example_prompts.jsonl] [--threads=1] [--limit=12]
"""

from __future__ import annotations

import json
import logging
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fire

from agent.servers.embedded.server import (
    EmbeddedEndpoint,
    EmbeddedSettings,
    EmbeddedSpec,
    LlamaTimings,
    resolve_embedded,
)
from run_agent import AIAgent


@dataclass(frozen=True)
class Measured:
    results: list[dict[str, Any]]
    wall: float
    load_seconds: float
    timings: LlamaTimings


def _prompts(path: str, limit: int) -> list[str]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["prompt"] for line in lines if line.strip()][:limit]


def _summary(prompt: str, result: dict[str, Any]) -> str:
    calls = [
        f"{c['function']['name']}({c['function']['arguments']})"
        for m in result["messages"]
        for c in m.get("tool_calls") or []
    ]
    answer = (result.get("final_response") or result.get("error") or "").replace("\n", " ")
    return f"- {prompt}\n    calls: {'; '.join(calls) or 'none'}\n    {result['outcome']}: {answer[:120]}"


def _run(spec: EmbeddedSpec, questions: list[str], threads: int, max_iterations: int) -> Measured:
    with EmbeddedEndpoint(spec, EmbeddedSettings(threads=threads)) as endpoint:
        agent = AIAgent(
            base_url=endpoint.base_url,
            api_key="embedded",
            model=endpoint.model_id,
            max_iterations=max_iterations,
            enabled_toolsets=["terminal", "file"],
            quiet_mode=True,
            run_name="bench-embedded",
        )
        began = time.perf_counter()
        results = [agent.run_conversation(q) for q in questions]
        wall = time.perf_counter() - began
    return Measured(results, wall, endpoint.model.load_seconds, endpoint.model.timings)


def _report(questions: list[str], measured: Measured, threads: int) -> None:
    results, timings = measured.results, measured.timings
    print("\n".join(_summary(q, r) for q, r in zip(questions, results, strict=True)))
    executed = sum(1 for r in results for m in r["messages"] if m.get("role") == "tool")
    completed = sum(r["completed"] for r in results)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"threads: {threads}  load: {measured.load_seconds:.2f} s  peak RSS: {peak_mib:.0f} MiB")
    print(
        f"prompt eval: {timings.prompt_tokens_per_second:.0f} tok/s "
        f"({timings.prompt_tokens} evaluated, {timings.cached_tokens} from the prompt cache)"
    )
    print(f"generation: {timings.generation_tokens_per_second:.0f} tok/s ({timings.generated_tokens} tokens)")
    print(f"wall for {len(results)} prompts: {measured.wall:.1f} s ({timings.calls} model calls)")
    print(f"completed: {completed}/{len(results)}  tool calls executed: {executed}")


def main(
    prompts: str = "data/example_prompts.jsonl",
    model: str = "embedded",
    threads: int = 1,
    limit: int = 12,
    max_iterations: int = 6,
) -> None:
    logging.basicConfig(level=logging.WARNING)
    spec = resolve_embedded(model)
    if spec is None:
        raise SystemExit(f"--model must be embedded or embedded:PATH, not {model!r}")
    questions = _prompts(prompts, limit)
    _report(questions, _run(spec, questions, threads, max_iterations), threads)
    print(f"model: {spec.model_id}")


if __name__ == "__main__":
    fire.Fire(main)
