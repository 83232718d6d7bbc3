"""The single-query command's typed, frozen configuration (`python run_agent.py --query=...`),
built once from its flags by agent.cli.agent_cli and handed whole to run_agent.main."""

from __future__ import annotations

from dataclasses import dataclass

from agent.config.agent_config import AgentConfig
from agent.sandboxes import SandboxOptions


@dataclass(frozen=True)
class QueryConfig:
    """No defaults here: every value comes from the flag table (agent.cli.flags), whose
    defaults come from AgentConfig and RunConfig."""

    query: str
    agent: AgentConfig  # enabled/disabled toolsets included
    sandbox: SandboxOptions
    save_trajectories: bool  # --save_trajectories, or agent.save_trajectories in ./config.yaml
    verbose: bool
    quiet: bool
    embedded_threads: int
    allow_missing_toolsets: bool  # offer what runs here of the toolsets asked for
