"""Batch runner: run the agent over a dataset of prompts and write ShareGPT trajectories.

    python batch_runner.py --dataset_file=data/prompts.jsonl --batch_size=10 --run_name=my_run \\
        --model=anthropic/claude-sonnet-4.6 --num_workers=4
    python batch_runner.py --dataset_file=data/prompts.jsonl --batch_size=10 --run_name=my_run --resume
    python batch_runner.py --run_name=my_run --export=parquet,openai --push_to_hub=org/name  # an existing run
    python batch_runner.py --run_name=my_run --rescore --keep=best  # check an existing run's entries again
    python batch_runner.py --list_distributions
    python batch_runner.py --help               # every flag, grouped, with its default

Output goes to <output_dir>/<run_name>/: batch_N.jsonl shards, checkpoint.json, statistics.json,
trajectories.jsonl (merged), plus discarded.jsonl and failures.jsonl records.
"""

from __future__ import annotations

from agent.common.stop_signals import stop_on_signals

if __name__ == "__main__":
    stop_on_signals()  # first: Ctrl-C and SIGTERM stop the command from here on (exit 130)

from agent.common.secrets import conceal

# Nothing else is imported here (those two modules import little): multiprocessing starts each
# worker process by importing this script again (as __mp_main__), and a worker needs none of the
# command line.


def run_cli() -> None:
    """The command (agent.cli.batch_main); also for a script of one's own that imports this."""
    from agent.cli.batch_main import run_cli as run

    run()


if __name__ == "__main__":
    conceal()  # may re-execute this script: first, so the heavy imports are paid once
    import sys

    from agent.backends import warm_up_early

    warm_up_early(sys.argv[1:])  # a run's workers start importing now, beside our own imports
    run_cli()
