"""The mixture-of-agents family: `mixture_of_agents` asks the reference models
(`--moa_models`) the same question in parallel, then an aggregator model (`--moa_aggregator`,
default the run's model) synthesises their answers; the tool returns the aggregate.

Every call goes through the run's client (its endpoint, key, limiter and retries) and its
usage counts in the prompt's: N reference calls + 1 aggregation per use. A reference model
that fails is left out and named in the result; when all fail, or the aggregator does, the
result is an error the model reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from agent.errors import ModelAPIError
from agent.protocols import JSON, ChatRequest, ModelReply, ToolConfig, ToolContext, Toolset, ToolSpec

AGGREGATOR_PROMPT = (
    "You have been given the responses of several models to the user's query. Synthesise them "
    "into one high-quality answer: evaluate them critically, keep what is correct, drop what is "
    "wrong or biased, and do not simply copy any one of them. Answer the query itself, well "
    "structured and accurate.\n\nResponses from the models:"
)

SCHEMA: dict[str, Any] = {
    "name": "mixture_of_agents",
    "description": (
        "Ask several strong models the same hard question (math, proofs, algorithms, tricky "
        "analysis) in parallel and return an aggregated answer. Costly: use for hard problems only."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "user_prompt": {
                "type": "string",
                "description": "The complete, self-contained question to solve.",
            }
        },
        "required": ["user_prompt"],
    },
}


def unavailable(config: ToolConfig) -> str | None:
    if not config.moa_models:
        return "mixture_of_agents needs reference models: pass --moa_models=model-a,model-b,..."
    return None


async def mixture_of_agents(args: Mapping[str, Any], context: ToolContext) -> JSON:
    prompt = str(args["user_prompt"]).strip()
    if not prompt:
        return {"error": "user_prompt is empty: give the complete question"}
    models = context.config.moa_models
    outcomes = await asyncio.gather(*(_ask(context, model, prompt) for model in models))
    answers: list[tuple[str, str]] = []
    failed: list[dict[str, str]] = []
    for model, outcome in zip(models, outcomes, strict=True):
        if isinstance(outcome, str):
            failed.append({"model": model, "error": outcome})
        else:
            answers.append((model, outcome.content))
    if not answers:
        return {"error": "every reference model failed", "failed_models": failed}
    aggregate = await _ask(context, context.config.moa_aggregator, prompt, system=_references(answers))
    if isinstance(aggregate, str):
        return {"error": f"the aggregator model failed: {aggregate}", "failed_models": failed}
    return {
        "response": aggregate.content,
        "reference_models": [model for model, _ in answers],
        "failed_models": failed,
    }


async def _ask(context: ToolContext, model: str | None, prompt: str, system: str = "") -> ModelReply | str:
    """The model's reply (its usage counted), or why it failed (an empty answer is a failure)."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    try:
        reply = await context.model.complete(ChatRequest(messages=messages, tools=[], model=model))
    except ModelAPIError as exc:
        return f"{exc.error_class}: {exc}"
    context.add_usage(reply.usage)
    return reply if reply.content.strip() else "empty answer"


def _references(answers: list[tuple[str, str]]) -> str:
    listed = "\n\n".join(f"{i}. [{model}]\n{text}" for i, (model, text) in enumerate(answers, 1))
    return f"{AGGREGATOR_PROMPT}\n\n{listed}"


TOOLSET = Toolset(
    "moa",
    "Mixture of agents: ask several models, aggregate",
    (ToolSpec("mixture_of_agents", SCHEMA, mixture_of_agents, available=unavailable),),
)
