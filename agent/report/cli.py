"""The report's command line: `python -m agent.report RUN_DIR [--sample=N] [--output=FILE]`.

Writes the report of an existing run directory (it only reads the run's files) and prints
the path it wrote. A bad argument or a directory that holds no run is one line
naming it, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from agent.common.redaction import install
from agent.common.secrets import SECRET_VARIABLES
from agent.report.build import RunReport
from agent.report.sample import SAMPLE_SIZE
from agent.store.layout import DISCARDED_FILE, FAILURES_FILE, TRAJECTORIES_FILE, batch_files

EXIT_BAD_INPUT = 2
_RUN_FILES = ("statistics.json", TRAJECTORIES_FILE, DISCARDED_FILE, FAILURES_FILE)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see --help)\n")


def _sample_size(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"--sample must be a whole number from 1 to 100000, got {text!r}")
    return int(text)


def _output_file(text: str) -> Path:
    path = Path(text)
    if not text or text.endswith("/") or path.name in ("", ".", "..") or path.is_dir():
        raise argparse.ArgumentTypeError(f"must name a file, got {text!r}")
    return path


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="python -m agent.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory, e.g. data/my_run")
    parser.add_argument(
        "--sample", type=_sample_size, default=SAMPLE_SIZE, help="entries in the trajectory browser"
    )
    parser.add_argument(
        "--output", type=_output_file, default=None, help="where to write (default RUN_DIR/report.html)"
    )
    return parser.parse_args(argv)


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (any((path / name).is_file() for name in _RUN_FILES) or bool(batch_files(path)))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if not is_run_dir(args.run_dir):
        print(
            f"python -m agent.report: {args.run_dir}: not a run directory (no statistics.json, "
            "trajectories.jsonl, batch_*.jsonl, discarded.jsonl or failures.jsonl)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if args.output is not None and not args.output.parent.is_dir():
        print(f"python -m agent.report: --output: {args.output.parent} is not a directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    install(os.environ.get(name) for name in SECRET_VARIABLES)  # the files are redacted; the page is too
    try:
        path = RunReport(args.run_dir, args.sample).write(output=args.output)
    except OSError as exc:
        target = args.output or args.run_dir / "report.html"
        print(f"python -m agent.report: {target}: not written ({exc.strerror})", file=sys.stderr)
        return 1
    print(path)
    return 0
