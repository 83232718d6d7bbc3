"""The batch runner pointed at the Hub test double (tests/support/hub_double.py): its address and
token in the runner's environment, for the tests that push a run to the Hub."""

from __future__ import annotations

from pathlib import Path

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI

TOKEN = "hf_double_token_5b2c81d0e4"


class HubCLI(BatchCLI):
    """The batch runner with the Hub's address and token (or none) in its environment."""

    def __init__(
        self,
        workdir: Path,
        endpoint: SimulatedEndpoint,
        hub_url: str,
        token: str | None,
        hf_home: str = "hf-home",
    ) -> None:
        super().__init__(workdir, endpoint)
        self.hub_url, self.token, self.hf_home = hub_url, token, workdir / hf_home

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in super().env().items() if not k.startswith(("HF_", "HUGGING_FACE"))}
        env.update(HF_ENDPOINT=self.hub_url, HF_HOME=str(self.hf_home), HF_HUB_DISABLE_TELEMETRY="1")
        if self.token is not None:
            env["HF_TOKEN"] = self.token
        return env
