"""`--sandbox=docker`'s default image (--image) is checked only when a row of the dataset uses
it: a dataset whose rows all name their own (existing) image runs whatever --image says."""

from __future__ import annotations

import random

import pytest

from tests.fixtures.containers import DEFAULT_IMAGE
from tests.fixtures.docker_run import DockerRun, run_cleanly
from tests.support.batch import read_json, trajectory_prompts

# Every docker-backend run removes the containers of dead runners on the engine it shares with
# the other tests, so such runs go to one xdist worker: a run of another test must not reap the
# containers a test killed on purpose before its own run does (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("docker-engine")

NO_SUCH_DEFAULT = f"sandbox-test/no-such-default-{random.randrange(16**8):08x}:1"


def test_a_missing_default_image_is_no_obstacle_when_every_row_names_its_own(docker_run: DockerRun) -> None:
    prompts = ["Docker: own image 0", "Docker: own image 1"]
    docker_run.write([{"prompt": prompt, "image": DEFAULT_IMAGE} for prompt in prompts])
    docker_run.script(dict.fromkeys(prompts, "cat /etc/os-release"))
    finished = run_cleanly(docker_run, f"--image={NO_SUCH_DEFAULT}")
    assert finished.returncode == 0, finished
    assert sorted(trajectory_prompts(docker_run.run_dir)) == prompts
    # not checked, so not recorded as the run's: no prompt of it ran there
    assert read_json(docker_run.run_dir / "run_config.json")["sandbox"]["default_image"] is None


def test_a_missing_default_image_stops_a_run_with_a_row_that_needs_it(docker_run: DockerRun) -> None:
    docker_run.write([{"prompt": "Docker: own", "image": DEFAULT_IMAGE}, {"prompt": "Docker: default"}])
    finished = run_cleanly(docker_run, f"--image={NO_SUCH_DEFAULT}")
    assert finished.returncode == 2, finished
    [line] = [line for line in finished.stderr.splitlines() if line.strip()]
    assert line.startswith("error: --sandbox=docker is unavailable here: ") and NO_SUCH_DEFAULT in line
    assert docker_run.endpoint.requests == []
