"""The flag table and its edge, in process but through the real Fire tokeniser
(`read_command_line`): every flag of both CLIs, every boolean spelling, unknown names with the
nearest valid one, integer flags given words, values kept as typed, `--help` from the table,
and every default written once. The subprocess tests (test_batch_cli, test_run_agent_cli)
check the same through the scripts, the configs they record and what reaches the endpoint."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from agent.cli.agent_cli import build_query_config
from agent.cli.batch_cli import build_run_config
from agent.cli.command_line import read_command_line
from agent.cli.flags import BATCH, BY_NAME, CLIS, FLAGS, QUERY, flags_of
from agent.cli.help_page import help_page
from agent.config.agent_config import AgentConfig, is_loopback, load_prefill
from agent.config.run_config import RunConfig
from agent.errors import ConfigError
from tests.support.cli import assert_lists_every_flag

FALSE_SPELLINGS = ("false", "False", "FALSE", "0", "no", "No")
TRUE_SPELLINGS = ("true", "True", "1", "yes", "YES")
# A query offers every toolset unless told (some are unavailable everywhere without keys: a
# ConfigError): these tests are not about toolsets, so they offer the ones every machine has.
QUERY_TOOLSETS = "--enabled_toolsets=terminal,file"
REQUIRED = {
    BATCH: ["--dataset_file=d.jsonl", "--batch_size=2", "--run_name=r"],
    QUERY: ["--query=q", QUERY_TOOLSETS],
}


def read(cli: str, *argv: str) -> dict[str, Any]:
    values = read_command_line(cli, [*REQUIRED[cli], *argv])
    assert values is not None
    return values


def refused(cli: str, *argv: str) -> str:
    with pytest.raises(ConfigError) as caught:
        read_command_line(cli, [*REQUIRED[cli], *argv])
    return str(caught.value)


def of_kind(kind: str) -> list[tuple[str, str]]:
    return [(cli, flag.name) for cli in CLIS for flag in flags_of(cli) if flag.kind == kind]


# ---------------------------------------------------------------- booleans


@pytest.mark.parametrize(("cli", "name"), of_kind("bool"))
def test_every_boolean_flag_reads_false_and_true_in_every_spelling(cli: str, name: str) -> None:
    for spelling in FALSE_SPELLINGS:
        assert read(cli, f"--{name}={spelling}")[name] is False, spelling
        assert read(cli, f"--{name}", spelling)[name] is False, f"--{name} {spelling}"
    for spelling in TRUE_SPELLINGS:
        assert read(cli, f"--{name}={spelling}")[name] is True, spelling
    assert read(cli, f"--{name}")[name] is True  # bare, last
    assert read(cli, f"--{name}", "--verbose")[name] is True  # bare, before another flag
    assert read(cli, f"--no{name}")[name] is False  # Fire's negation
    assert read(cli)[name] is BY_NAME[name].default


@pytest.mark.parametrize(("cli", "name"), of_kind("bool"))
def test_a_boolean_flag_with_another_word_is_refused_naming_it(cli: str, name: str) -> None:
    message = refused(cli, f"--{name}=maybe")
    assert message.startswith(f"--{name}=maybe: must be true or false"), message


def test_false_booleans_reach_the_configs() -> None:
    run = build_run_config(
        read(
            BATCH,
            "--resume=false",
            "--verbose=no",
            "--reasoning_disabled=0",
            "--sandbox_network=False",
            "--keep_no_reasoning=NO",
        )
    )
    assert (run.resume, run.verbose, run.sandbox.network, run.keep_no_reasoning) == (False,) * 4
    assert run.agent.reasoning_config is None
    query = build_query_config(
        read(QUERY, "--save_trajectories=false", "--verbose=0", "--quiet=no", "--reasoning_disabled=False")
    )
    assert (query.save_trajectories, query.verbose, query.quiet) == (False, False, False)
    assert query.agent.reasoning_config is None


def test_true_booleans_reach_the_configs() -> None:
    run = build_run_config(
        read(BATCH, "--resume", "--verbose=yes", "--reasoning_disabled=1", "--sandbox_network=true")
    )
    assert (run.resume, run.verbose, run.sandbox.network) == (True, True, True)
    assert run.agent.reasoning_config == {"effort": "none"}
    query = build_query_config(read(QUERY, "--save_trajectories", "--quiet=YES", "--reasoning_disabled"))
    assert (query.save_trajectories, query.quiet) == (True, True)
    assert query.agent.reasoning_config == {"effort": "none"}


# ---------------------------------------------------------------- unknown names, positionals


@pytest.mark.parametrize(
    ("cli", "typed", "nearest"),
    [
        (BATCH, "--max_turn=1", "--max_turns"),
        (BATCH, "--max_sample=1", "--max_samples"),
        (BATCH, "--num_worker=2", "--num_workers"),
        (BATCH, "--resum", "--resume"),
        (BATCH, "--reasoning-efort=high", "--reasoning_effort"),
        (QUERY, "--max_turn=1", "--max_turns"),
        (QUERY, "--querry=hi", "--query"),
        (QUERY, "--enabled_toolset=terminal", "--enabled_toolsets"),
    ],
)
def test_a_misspelled_flag_names_the_nearest_valid_one(cli: str, typed: str, nearest: str) -> None:
    message = refused(cli, typed)
    assert message == f"unknown flag {typed.partition('=')[0]}: did you mean {nearest}?"


@pytest.mark.parametrize("cli", CLIS)
def test_an_unknown_flag_far_from_any_points_to_help_and_names_no_other(cli: str) -> None:
    # A new user read "--bogus (the nearest is --web_corpus)" as a suggestion to use it.
    assert refused(cli, "--bogus_flag=1") == "unknown flag --bogus_flag (--help lists every flag)"


def test_the_other_commands_flag_is_named_as_such() -> None:
    assert "--query is a flag of run_agent.py, not of batch_runner.py" in refused(BATCH, "--query=hi")
    assert "--num_workers is a flag of batch_runner.py, not of run_agent.py" in refused(
        QUERY, "--num_workers=2"
    )


@pytest.mark.parametrize("cli", CLIS)
def test_positional_arguments_and_fires_separator_are_refused(cli: str) -> None:
    assert refused(cli, "what is 2+2").startswith("unexpected argument 'what is 2+2'")
    assert refused(cli, "--", "--interactive").startswith("unexpected argument '--'")


# ---------------------------------------------------------------- values


@pytest.mark.parametrize(("cli", "name"), of_kind("int"))
def test_an_integer_flag_given_a_word_is_refused_naming_it(cli: str, name: str) -> None:
    assert refused(cli, f"--{name}=ten") == f"--{name} must be an integer, got 'ten'"
    assert refused(cli, f"--{name}=2.5") == f"--{name} must be an integer, got '2.5'"


BEYOND = "is beyond the range of a number (±1.8e308)"


@pytest.mark.parametrize(("cli", "name"), of_kind("float"))
def test_a_number_flag_must_be_a_positive_number(cli: str, name: str) -> None:
    assert refused(cli, f"--{name}=soon") == f"--{name} must be a number, got 'soon'"
    for bad in ("0", "-3"):
        assert refused(cli, f"--{name}={bad}") == f"--{name} must be positive, got {bad}"
    for odd in ("nan", "inf", "1_0", " 3", "\u0663", ""):  # Python's float() takes all but the last
        assert refused(cli, f"--{name}={odd}").startswith(f"--{name} "), odd
    assert read(cli, f"--{name}=1.5")[name] == 1.5 and read(cli, f"--{name}=2e1")[name] == 20.0
    assert refused(cli, f"--{name}=1e400") == f"--{name} {BEYOND}, got 1e400"


@pytest.mark.parametrize(("cli", "name"), of_kind("number"))
def test_a_signed_number_flag_must_be_finite(cli: str, name: str) -> None:
    for huge in ("1e400", "-1e400"):  # float() reads them as infinities
        assert refused(cli, f"--{name}={huge}") == f"--{name} {BEYOND}, got {huge}"


@pytest.mark.parametrize(("cli", "name"), of_kind("int"))
def test_an_integer_flag_takes_ascii_digits_only(cli: str, name: str) -> None:
    for odd in ("1_0", " 3", "\uff13", "\u0663", "9" * 5000, ""):  # int() takes the first four
        assert refused(cli, f"--{name}={odd}").startswith(f"--{name} "), odd


def test_minimums_and_choices_are_checked_with_the_flag_named() -> None:
    assert refused(BATCH, "--batch_size=2", "--num_workers=0") == "--num_workers must be at least 1, got 0"
    assert refused(QUERY, "--max_retries=-1") == "--max_retries must be at least 0, got -1"
    # positive, yet a pace of one call per 1e300 minutes: the run waited forever after its first
    assert refused(BATCH, "--rpm=1e-300") == "--rpm must be at least 0.01, got 1e-300"
    assert read(BATCH, "--rpm=0.01")["rpm"] == 0.01
    assert (
        refused(QUERY, "--api_dialect=soap")
        == "--api_dialect=soap: must be one of auto, openrouter, openai, generic"
    )
    assert refused(BATCH, "--provider_sort=cheapest").startswith(
        "--provider_sort=cheapest: must be one of price"
    )


@pytest.mark.parametrize(
    ("cli", "name"), [(cli, f.name) for cli in CLIS for f in flags_of(cli) if f.kind != "bool"]
)
def test_a_flag_that_needs_a_value_says_so_when_bare(cli: str, name: str) -> None:
    assert refused(cli, f"--{name}") == f"--{name} needs a value (--{name}=...)"


def test_values_stay_as_typed_not_as_fire_would_guess_them() -> None:
    values = read(BATCH, "--run_name=2024", "--model=None", "--providers_allowed=anthropic, openai")
    assert values["run_name"] == "2024"
    assert build_run_config({**values, "dataset_file": "d.jsonl"}).run_name == "2024"
    assert values["model"] == "None"
    assert values["providers_allowed"] == ("anthropic", "openai")
    query = read(QUERY, "--query=yes, no", "--ephemeral_system_prompt=[1, 2]", "--enabled_toolsets=terminal")
    assert query["query"] == "yes, no"
    assert query["ephemeral_system_prompt"] == "[1, 2]"
    assert query["enabled_toolsets"] == ("terminal",)
    assert read(BATCH, "--run_name", "1_000")["run_name"] == "1_000"  # `--name value` form too
    assert read(BATCH, "--max-turns=3")["max_turns"] == 3  # Fire's dashes-for-underscores


def test_a_required_flag_missing_is_named() -> None:
    values = read_command_line(BATCH, ["--dataset_file=d.jsonl", "--run_name=r"])
    assert values is not None
    with pytest.raises(ConfigError, match=r"^--batch_size is required \(see --help\)$"):
        build_run_config(values)
    assert refused(QUERY, "--query=") == "--query needs a value (leave the flag out for its default)"


# ---------------------------------------------------------------- help and defaults


@pytest.mark.parametrize("cli", CLIS)
def test_help_lists_every_flag_of_the_command_with_its_default(cli: str) -> None:
    assert read_command_line(cli, ["--model=x", "--help"]) is None
    assert read_command_line(cli, ["-h"]) is None
    defaults = {"max_turns": "10", "max_retries": "6", "model": "anthropic/claude-sonnet-4.6"}
    assert_lists_every_flag(help_page(cli), cli, defaults)


def test_help_shows_the_batch_runners_literal_defaults() -> None:
    rows = {line.split()[0]: line for line in help_page(BATCH).splitlines() if line.startswith("  --")}
    assert rows["--request_timeout=SECONDS"].endswith("[default: 600]")
    assert rows["--num_workers=N"].endswith("[default: 4]")
    assert rows["--max_inflight=N"].endswith("[default: 64]")
    assert rows["--distribution=TEXT"].endswith("[default: default]")
    assert rows["--resume[=BOOL]"].endswith("[default: false]")


def test_every_default_is_the_config_fields_default() -> None:
    agent = AgentConfig()
    run = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}
    assert agent.max_iterations == BY_NAME["max_turns"].default == 10
    assert agent.max_retries == BY_NAME["max_retries"].default == 6
    assert agent.request_timeout == BY_NAME["request_timeout"].default == 600
    for cli in CLIS:  # both commands build the same agent config from no flags
        values = read(cli)
        assert (values["max_turns"], values["max_retries"]) == (10, 6)
    for flag in FLAGS:
        if flag.name in run:
            assert flag.default == run[flag.name], flag.name
        if flag.name in AgentConfig.__dataclass_fields__:
            assert flag.default == getattr(agent, flag.name), flag.name


@pytest.mark.parametrize("cli", CLIS)
def test_a_nameless_flag_is_one_line_not_fires_usage_page(cli: str) -> None:
    assert refused(cli, "--=x").startswith("unexpected argument '--=x'")
    assert refused(cli, "-", "--max_turns=3").startswith("unexpected argument '-'")  # Fire's separator
    assert refused(cli, "---max_turns=3").startswith("unexpected argument '---max_turns=3'")


@pytest.mark.parametrize(
    "url",
    ["notaurl", "ftp://host/v1", "http://", "127.0.0.1:8000/v1", "http://127.0.0.1:99999/v1", "http://[::1",
     "http://127.0.0.1:port/v1", "http://user:hunter2pw@127.0.0.1:8000/v1"],
)  # fmt: skip
def test_a_base_url_that_is_no_http_url_is_refused_before_anything_runs(url: str) -> None:
    """Port out of range, a broken IPv6 host: once a traceback in every prompt. Credentials in
    the URL: no key the SDK sends, and the URL is saved: refused, the password not repeated."""
    with pytest.raises(ConfigError, match=r"^--base_url[=:]") as caught:
        AgentConfig(base_url=url)
    assert "hunter2pw" not in str(caught.value)
    values = read_command_line(BATCH, [*REQUIRED[BATCH], f"--base_url={url}"])
    assert values is not None
    with pytest.raises(ConfigError, match=r"^--base_url[=:]"):
        build_run_config(values)


@pytest.mark.parametrize(
    ("url", "loopback"),
    [("http://LOCALHOST:8000/v1", True), ("http://127.1.2.3/v1", True), ("http://[::1]:80/v1", True),
     ("http://localhost.example.com/v1", False), ("http://10.0.0.1/v1", False),
     ("https://openrouter.ai/api/v1", False)],
)  # fmt: skip
def test_loopback_is_the_host_not_a_substring_of_the_url(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback


def test_a_single_query_can_bound_its_model_calls() -> None:
    values = read_command_line(QUERY, ["--query=hi", "--request_timeout=3", QUERY_TOOLSETS])
    assert values is not None
    assert build_query_config(values).agent.request_timeout == 3.0


@pytest.mark.parametrize(
    ("content", "said"),
    [(None, "--prefill_messages_file={path}: cannot read: No such file or directory"),
     (b"[1,", "{path}:1: prefill file is not valid JSON"),
     (b'{"role": "user"}', "{path}: prefill file must hold a JSON array of messages"),
     (b'[{"role": "robot", "content": "x"}]', "{path}: item 0: each message needs a role"),
     (b"\xff\xfe[]", "{path}: prefill file is not UTF-8 text (at byte 0)")],
    ids=["missing", "not-json", "not-a-list", "bad-role", "not-utf8"],
)  # fmt: skip
def test_a_bad_prefill_file_is_one_line_naming_it(tmp_path: Path, content: bytes | None, said: str) -> None:
    path = tmp_path / "prefill.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_prefill(str(path))
    assert str(caught.value).startswith(said.format(path=path)), caught.value


@pytest.mark.parametrize(
    ("flag", "said"),
    [("--stop=x", "--stop: the embedded model takes none"),
     ('--sampling_extra={"foo": 1, "top_k": 3}', "--sampling_extra: the embedded model reads only seed")],
)  # fmt: skip
def test_sampling_the_embedded_model_would_drop_is_refused_not_recorded_as_sent(flag: str, said: str) -> None:
    values = read_command_line(QUERY, ["--query=hi", "--model=embedded", QUERY_TOOLSETS, flag])
    assert values is not None
    with pytest.raises(ConfigError, match=f"^{re.escape(said)}"):
        build_query_config(values)
    kept = read_command_line(
        QUERY, ["--query=hi", "--model=embedded", QUERY_TOOLSETS, '--sampling_extra={"top_k": 3}']
    )
    assert kept is not None and build_query_config(kept).agent.sampling.extra == {"top_k": 3}


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["--providers_allowed=,,"], "--providers_allowed=,,: names nothing"),
     (["--stop=,"], "--stop: ',' names no stop sequence"),
     (["--reasoning_effort=high", "--reasoning_disabled"],
      "--reasoning_effort=high and --reasoning_disabled contradict"),
     (["--providers_allowed=a,b", "--providers_ignored=b"],
      "--providers_allowed and --providers_ignored both name b")],
)  # fmt: skip
def test_a_value_that_names_nothing_or_flags_that_contradict_are_refused(argv: list[str], said: str) -> None:
    """Each once ran silently: with no provider filter, no stop, effort none, no tools…"""
    with pytest.raises(ConfigError, match=f"^{re.escape(said)}"):
        build_query_config(read(QUERY, *argv))
