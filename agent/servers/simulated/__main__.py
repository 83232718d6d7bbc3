"""`python -m agent.servers.simulated`: serve a simulated endpoint (see `agent.servers.simulated.cli`)."""

import sys

from agent.servers.simulated.cli import main

sys.exit(main())
