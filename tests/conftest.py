"""Test-wide fixtures are split by component under tests/fixtures/; helpers shared by test
modules live in tests/support/ (no test module imports another)."""

from __future__ import annotations

import pytest
from _pytest.nodeid import NodeId

pytest_plugins = [
    "tests.fixtures.endpoint",
    "tests.fixtures.sandbox",
    "tests.fixtures.containers",
    "tests.fixtures.browser",
    "tests.fixtures.docker_run",
    "tests.fixtures.ray",
    "tests.support.mcp_fixtures",
]

# Session fixtures too costly to set up once per xdist worker: the tests using one are one group.
GROUPED_SESSION_FIXTURES = {"_ray_nodes": "ray"}  # tests/fixtures/ray.py: a 3-node cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `long` first (in their order): pytest-xdist hands out single tests in
    collection order, so a minute-long test collected last ran alone at the end while the other
    workers had nothing left to do; started first, it overlaps the rest. (xdist sends groups of
    several tests before single ones by itself, largest first.)"""
    items.sort(key=lambda item: not _long_alone(item))


def _long_alone(item: pytest.Item) -> bool:
    """Marked `long` and in no group (a group's tests keep their order; xdist sends it whole)."""
    return item.get_closest_marker("long") is not None and item.get_closest_marker("xdist_group") is None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Under `pytest -n N --dist loadgroup` (scripts/check.sh) the tests of a module that share a
    module-scoped fixture (one Chromium, one batch run checked by several tests) go to one xdist
    worker, so that fixture is set up once, not once per worker; so do the tests of all modules
    that use one of GROUPED_SESSION_FIXTURES; every other test is handed to whichever worker is
    free."""
    info = getattr(item, "_fixtureinfo", None)  # a test function's fixtures (other items have none)
    if info is None:
        return
    named = item.get_closest_marker("xdist_group")
    shared = [group for name, group in GROUPED_SESSION_FIXTURES.items() if name in item.fixturenames]
    if named is not None:  # a module's own group (e.g. the runs that reap a shared engine)
        group = str(named.args[0] if named.args else named.kwargs["name"])
    elif shared:  # the tests of every module that share one costly session fixture
        group = shared[0]
        item.add_marker(pytest.mark.xdist_group(group))
    else:
        scopes = {definitions[-1].scope for definitions in info.name2fixturedefs.values() if definitions}
        if "module" not in scopes:
            return
        group = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    if item.config.getoption("loadgroup", False) and "@" not in item.nodeid:
        # pytest-xdist 3.8 tells the scheduler a test's group by a `@group` suffix of its node id,
        # which it writes to `item._nodeid`, an attribute pytest 9 no longer reads (the id is
        # `item._id`), so loadgroup would group nothing: write the suffix where pytest 9 keeps it.
        item._id = NodeId.parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]
