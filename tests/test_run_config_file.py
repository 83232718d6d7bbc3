"""The one reader of a run's run_config.json: absent is None, corrupt is one clear error naming
the file, and the callers that stop on a corrupt file say which flag was reading it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.store.run_config_file import RunConfigUnreadable, read_run_config
from agent.toolbox.distribution_file import recorded_distributions


def test_a_run_without_the_file_has_none_and_a_written_one_reads_back(tmp_path: Path) -> None:
    assert read_run_config(tmp_path) is None
    (tmp_path / "run_config.json").write_text(json.dumps({"batch_size": 3}), encoding="utf-8")
    assert read_run_config(tmp_path) == {"batch_size": 3}


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"{not json", "cannot be read"), (b"\xff\xfe", "cannot be read"), (b"[1, 2]", "is not a run's config")],
)
def test_a_corrupt_file_is_one_error_naming_it(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "run_config.json"
    path.write_bytes(content)
    with pytest.raises(RunConfigUnreadable, match=says) as caught:
        read_run_config(tmp_path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_resume_reading_distributions_from_a_config_that_is_no_object_stops(tmp_path: Path) -> None:
    # Before the one reader, a JSON array here read as "no distributions recorded" while bad
    # JSON stopped the resume: both are a corrupt file now, and both stop it.
    (tmp_path / "run_config.json").write_text("[]", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^--resume: .*run_config\.json is not a run's config$"):
        recorded_distributions(tmp_path)
