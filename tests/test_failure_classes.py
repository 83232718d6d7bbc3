"""One `FailureClass` names every way a prompt can fail: each class the program records (read off
the code that records failures, so a new bare string is caught) is a member, each member is
produced somewhere, each is written as its plain value (failures.jsonl, statistics.json and
the report are unchanged by the enum), and docs/output.md names each."""

from __future__ import annotations

import ast
import json
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai

from agent.errors import FailureClass, ModelAPIError
from agent.llm.client import classify
from agent.store.statistics import RunStatistics

REPO = Path(__file__).resolve().parent.parent
SOURCES = [*sorted((REPO / "agent").rglob("*.py")), *sorted((REPO / "tools").rglob("*.py"))]
SOURCES += [REPO / name for name in ("batch_runner.py", "run_agent.py")]
# Classes docs/output.md does not name yet: the documentation text for them is in the report of
# the change that made the enum (issue 22); once docs/output.md names one, remove it from here.
PENDING_DOCS: set[str] = set()


def _strings(node: ast.expr) -> Iterator[str]:
    """The string constants an argument can evaluate to (`x or "api"` gives "api")."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            yield inner.value


def _class_argument(call: ast.Call) -> ast.expr | None:
    """The failure-class argument of a call that records or raises one, else None."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "ModelAPIError" and call.args:
        return call.args[0]
    if isinstance(func, ast.Attribute) and func.attr == "of" and len(call.args) >= 2:
        return call.args[1] if isinstance(func.value, ast.Name) and func.value.id == "Failed" else None
    return None


def recorded_classes() -> tuple[int, set[str], set[str]]:
    """(calls that record or raise a failure class, string literals given as a class,
    FailureClass members named) in the code."""
    calls = 0
    literals: set[str] = set()
    members: set[str] = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and (argument := _class_argument(node)) is not None:
                calls += 1
                literals.update(_strings(argument))
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "FailureClass"
            ):
                members.add(node.attr)
    return calls, literals, members


def test_every_class_the_code_records_is_a_member_and_every_member_is_produced() -> None:
    calls, literals, members = recorded_classes()
    values = {member.value for member in FailureClass}
    assert calls > 10, "the scan found no Failed.of / ModelAPIError call: the scan is broken"
    assert not literals, f"failure classes given as strings, not FailureClass members: {literals}"
    produced = literals | {FailureClass[name].value for name in members if name in FailureClass.__members__}
    assert values <= produced, f"members nothing produces: {values - produced}"


def test_the_endpoint_classifier_gives_members() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/")
    for error in (openai.APITimeoutError(request), openai.APIConnectionError(request=request), ValueError()):
        failure, _ = classify(error)
        assert type(failure) is FailureClass


def test_a_member_is_written_as_its_plain_value_everywhere() -> None:
    for member in FailureClass:
        value = member.value
        assert str(member) == f"{member}" == f"{member:>0}" == value
        assert "%s" % (member,) == value  # noqa: UP031 - the logging calls format with %s
        assert json.dumps(member) == json.dumps(value)
        record = {"error_class": member, "counts": {member: 2}}
        plain = {"error_class": value, "counts": {value: 2}}
        assert json.dumps(record) == json.dumps(plain)
        assert json.dumps(record, indent=2, sort_keys=True) == json.dumps(plain, indent=2, sort_keys=True)
        assert pickle.loads(pickle.dumps(member)) is member  # across the worker pipe and Ray
        error = ModelAPIError(member, "why")
        assert f"failed ({error.error_class}): {error}" == f"failed ({value}): why"


def test_statistics_counts_a_member_and_its_string_as_one_class() -> None:
    def failures(*classes: str) -> str:
        stats = RunStatistics()
        for error_class in classes:
            stats.add_failure(error_class)
        document = stats.to_dict(
            run_name="r",
            distribution="d",
            model="m",
            total_prompts=3,
            batch_size=1,
            total_batches=3,
            duration_seconds=1.0,
        )
        return json.dumps(document["failures"], indent=2)

    enum = failures(FailureClass.WORKER_LOST, FailureClass.AUTH, "auth")
    assert enum == failures("worker_lost", "auth", "auth") == '{\n  "auth": 2,\n  "worker_lost": 1\n}'


def test_docs_output_names_every_failure_class() -> None:
    text = (REPO / "docs/output.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+)`", text))
    missing = {member.value for member in FailureClass} - named - PENDING_DOCS
    assert not missing, f"docs/output.md does not name the failure classes {sorted(missing)}"
    documented = PENDING_DOCS & named
    assert not documented, f"docs/output.md now names {sorted(documented)}: remove them from PENDING_DOCS"
