"""`python -m agent.report data/<run_name>`: write the run's `report.html` again (see `agent.report.cli`)."""

import sys

from agent.report.cli import main

sys.exit(main())
