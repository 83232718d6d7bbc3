"""The `--help` page of each command line, drawn from the flag table: usage, then every flag the
command accepts, grouped, one line each with its default, then how values are written and
what the exit codes mean."""

from __future__ import annotations

from agent.cli.flags import BATCH, GROUPS, QUERY, Flag, flags_of

_HEAD = {
    BATCH: (
        "usage: python batch_runner.py --dataset_file=PATH --batch_size=N --run_name=NAME [--flag=value ...]",
        "       python batch_runner.py --run_name=NAME --export=FORMATS [--push_to_hub=ORG/NAME]"
        "   (an existing run's output)",
        "       python batch_runner.py --run_name=NAME --rescore [--keep=best]   (check its entries again)",
        "       python batch_runner.py --list_distributions",
        "",
        "Run the agent over every prompt of a dataset (JSONL, Parquet, a datasets folder, hf://);"
        " ShareGPT trajectories go to <output_dir>/<run_name>/.",
    ),
    QUERY: (
        'usage: python run_agent.py --query="..." [--flag=value ...]',
        "",
        "Run one conversation and print the final answer.",
    ),
}
# What a required flag's row says: the batch runner's are required for a run, not for an
# existing run's export or rescore (which need --run_name alone).
REQUIRED = {BATCH: "required for a run", QUERY: "required"}
_EXIT_CODES = {
    BATCH: "0 done, 1 some prompts failed (rerun with --resume), 2 bad configuration or dataset,"
    " 3 run directory locked by another runner, 130 interrupted",
    QUERY: "0 answer printed, 1 the model endpoint failed, 2 bad configuration, 4 no final answer,"
    " 130 interrupted",
}
_VALUES = (
    "Values: booleans take true/false, yes/no or 1/0 in any case, and a bare --flag means true;",
    "lists are comma-separated (--providers_allowed=anthropic,openai). An unknown flag or a bad",
    "value stops the command with exit 2 before anything is read or sent.",
)
_METAVAR = {"number": "NUMBER", "str": "TEXT", "int": "N", "float": "SECONDS", "bool": "BOOL", "list": "A,B"}


def _usage(flag: Flag) -> str:
    if flag.kind == "bool":
        return f"--{flag.name}[=BOOL]"
    if flag.choices:
        metavar = "NAME"
    elif flag.name.endswith(("_file", "_dir")):
        metavar = "PATH"
    elif flag.name.startswith("price_") or flag.name == "max_cost":
        metavar = "USD"
    else:
        metavar = "NUMBER" if flag.name in ("rpm", "tpm") else _METAVAR[flag.kind]
    return f"--{flag.name}={metavar}"


def _row(cli: str, flag: Flag, width: int) -> str:
    meaning = f"{flag.help}: {', '.join(flag.choices)}" if flag.choices else flag.help
    default = REQUIRED[cli] if flag.required else f"default: {flag.shown_default}"
    return f"  {_usage(flag):{width}}  {meaning} [{default}]"


def help_page(cli: str) -> str:
    """The whole page for `cli` (batch_runner.py or run_agent.py)."""
    accepted = flags_of(cli)
    width = max(len(_usage(flag)) for flag in accepted)
    lines = list(_HEAD[cli])
    for group in GROUPS:
        members = [flag for flag in accepted if flag.group == group]
        if members:
            lines += ["", f"{group}:", *(_row(cli, flag, width) for flag in members)]
    lines += ["", *_VALUES, "", f"Exit codes: {_EXIT_CODES[cli]}."]
    return "\n".join(lines)
