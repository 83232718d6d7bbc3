"""The HTML report of a run: `report.html` in the run directory, one self-contained page (inline
SVG plots, an inline trajectory browser, no external request) written at the end of every run
and on demand with `python -m agent.report data/<run_name>`.

`RunReport` (`agent.report.build`) streams the run's files into a `RunDigest` (counts over
every entry, a bounded stratified sample for the browser); `agent.report.figures` and
`agent.report.sections` turn it into markup; `agent.report.page` assembles the page.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.report.build import REPORT_FILE, RunReport

__all__ = ["REPORT_FILE", "RunReport", "write_report"]

log = logging.getLogger("agent.report")


def write_report(report: RunReport, stats: Mapping[str, Any]) -> Path | None:
    """Write the report at the end of a run. The run's results are already safe on disk, so a
    report that cannot be written (disk full, permissions) is a warning naming the file, not a
    failed run; `python -m agent.report` writes it again later."""
    try:
        return report.write(stats)
    except OSError as exc:
        log.warning(
            "%s: report not written (%s); retry with python -m agent.report %s",
            report.run_dir / REPORT_FILE,
            exc,
            report.run_dir,
        )
        return None
