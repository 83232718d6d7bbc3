"""Mixture-of-agents tool (`mixture_of_agents`): declared, not implemented.

Querying several reference models and aggregating their answers needs endpoints this runner
does not configure; the spec has no handler, always reports itself unavailable and is never
offered to the model. It is declared so that the tool map is the same on every machine.
"""

from __future__ import annotations

from agent.protocols import Toolset

_REASON = "no mixture-of-agents backend is implemented in this runner"

TOOLSET = Toolset.declared_only(
    "moa",
    "Mixture of agents: ask several models, aggregate",
    _REASON,
    (
        {
            "name": "mixture_of_agents",
            "description": (
                "Ask several strong models the same hard question and return an aggregated answer."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "user_prompt": {"type": "string", "description": "The complete question to solve."}
                },
                "required": ["user_prompt"],
            },
        },
    ),
)
