"""Test-wide fixtures are split by component under tests/fixtures/."""

pytest_plugins = [
    "tests.fixtures.endpoint",
    "tests.fixtures.sandbox",
    "tests.fixtures.containers",
    "tests.fixtures.browser",
    "tests.fixtures.docker_run",
]
