"""The dataset reader: line validation with exact messages, prompt keys, max_samples, streaming."""

from __future__ import annotations

import json
import re
import tracemalloc
from collections import deque
from pathlib import Path

import pytest

from agent.batch import dataset_jsonl as dataset_module
from agent.batch.dataset import (
    MAX_KEPT_ERRORS,
    DatasetRow,
    LineError,
    iter_rows,
    iter_units,
    iter_wanted_rows,
    keyed_units,
    scan_dataset,
)
from agent.batch.row_fields import CWD_RULE
from agent.errors import ConfigError, DatasetError
from agent.store.keys import prompt_key


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return tmp_path / "prompts.jsonl"


SURROGATE = "holds an unpaired surrogate escape (\\ud800-\\udfff), which is not Unicode text"
INVALID_LINES = [
    ('{"prompt": "x"', "invalid JSON: Expecting ',' delimiter (column 15)"),
    ("{prompt: 1}", "invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
    ('{"prompt": "x", "metadata": {"score": NaN}}', "invalid JSON: NaN is not valid JSON"),
    ('{"prompt": "x", "metadata": {"n": 1e999}}', "invalid JSON: 1e999 (out of range) is not valid JSON"),
    ('{"prompt": "x", "metadata": {"n": -1E400}}', "invalid JSON: -1E400 (out of range) is not valid JSON"),
    ('{"prompt": "x", "metadata": {"n": ' + "9" * 5000 + "}}", "invalid JSON: a number too long to read"),
    ("[" * 100_000, "invalid JSON: nested too deeply"),
    ("[1, 2]", "not a JSON object (got array)"),
    ('"a bare string"', "not a JSON object (got string)"),
    ("42", "not a JSON object (got number)"),
    ("true", "not a JSON object (got boolean)"),
    ("null", "not a JSON object (got null)"),
    ('{"question": "x"}', "prompt: missing"),
    ('{"prompt": 5}', "prompt: must be a non-empty string (got number)"),
    ('{"prompt": null}', "prompt: must be a non-empty string (got null)"),
    ('{"prompt": ["x"]}', "prompt: must be a non-empty string (got array)"),
    ('{"prompt": " \\t\\n "}', "prompt: must be a non-empty string (got a blank string)"),
    ('{"prompt": "x", "image": ""}', "image: must be a non-empty string (got a blank string)"),
    ('{"prompt": "x", "docker_image": 3}', "docker_image: must be a non-empty string (got number)"),
    ('{"prompt": "x", "cwd": {}}', "cwd: must be a non-empty string (got object)"),
    ('{"prompt": "x", "metadata": [1]}', "metadata: must be a JSON object (got array)"),
    ('{"prompt": "x", "metadata": "easy"}', "metadata: must be a JSON object (got string)"),
    ('{"prompt": "half \\ud800 a pair"}', f"prompt: {SURROGATE}"),
    ('{"prompt": "x", "metadata": {"note": "\\uDC00"}}', f"metadata: {SURROGATE}"),
]


@pytest.mark.parametrize(("line", "message"), INVALID_LINES, ids=[m for _l, m in INVALID_LINES])
def test_each_invalid_line_is_reported_as_file_line_field_reason_and_skipped(
    dataset: Path, line: str, message: str
) -> None:
    write_lines(dataset, ['{"prompt": "first"}', line, '{"prompt": "last"}'])
    scan = scan_dataset(dataset)
    assert [str(e) for e in scan.errors] == [f"{dataset}:2: {message}"]
    assert (scan.total_lines, scan.valid, scan.error_count) == (3, 2, 1)
    assert [row.prompt for row in iter_rows(dataset)] == ["first", "last"]


def test_an_escaped_surrogate_pair_is_text_and_is_accepted(dataset: Path) -> None:
    write_lines(dataset, ['{"prompt": "smile \\ud83d\\ude00", "metadata": {"k": "\\ud83d\\ude00"}}'])
    assert [row.prompt for row in iter_rows(dataset)] == ["smile \U0001f600"]


def test_a_lone_surrogate_in_a_field_the_run_never_reads_is_no_error(dataset: Path) -> None:
    write_lines(dataset, ['{"prompt": "fine", "notes": "half \\ud800"}'])
    assert [row.prompt for row in iter_rows(dataset)] == ["fine"]


def test_line_error_text_omits_the_field_part_when_there_is_no_field() -> None:
    assert str(LineError("data/x.jsonl", 17, "prompt", "must be a non-empty string")) == (
        "data/x.jsonl:17: prompt: must be a non-empty string"
    )
    assert str(LineError("data/x.jsonl", 3, None, "not a JSON object (got array)")) == (
        "data/x.jsonl:3: not a JSON object (got array)"
    )


def test_blank_lines_are_skipped_silently_but_keep_line_numbers(dataset: Path) -> None:
    write_lines(dataset, ["", '{"prompt": "a"}', "   ", "\t", '{"prompt": "b"}', ""])
    scan = scan_dataset(dataset)
    assert (scan.total_lines, scan.valid, scan.errors, scan.error_count) == (6, 2, [], 0)
    assert [(r.index, r.line_no) for r in iter_rows(dataset)] == [(0, 2), (1, 5)]


def test_row_fields_image_falls_back_to_docker_image_and_null_means_absent(dataset: Path) -> None:
    write_lines(
        dataset,
        [
            '{"prompt": "a", "image": "python:3.11", "docker_image": "ignored", "cwd": "/app"}',
            '{"prompt": "b", "docker_image": "rust:1.75", "metadata": {"difficulty": "hard"}}',
            '{"prompt": "c", "image": null, "cwd": null, "metadata": null, "extra": 1}',
        ],
    )
    a, b, c = iter_rows(dataset)
    assert (a.image, a.cwd, a.metadata) == ("python:3.11", "/app", {})
    assert (b.image, b.cwd, b.metadata) == ("rust:1.75", None, {"difficulty": "hard"})
    assert (c.image, c.cwd, c.metadata) == (None, None, {})


def test_crlf_line_ends_and_a_utf8_bom_are_accepted(dataset: Path) -> None:
    dataset.write_bytes(b'\xef\xbb\xbf{"prompt": "caf\xc3\xa9"}\r\n{"prompt": "b"}')
    assert [(r.prompt, r.line_no) for r in iter_rows(dataset)] == [("café", 1), ("b", 2)]
    assert scan_dataset(dataset).total_lines == 2


def test_prompt_key_hashes_the_stripped_text_and_appends_the_occurrence() -> None:
    key = prompt_key("  hello \n", 3)
    assert re.fullmatch(r"[0-9a-f]{20}:3", key)
    assert key == prompt_key("hello", 3)
    assert prompt_key("hello", 0) != prompt_key("hello", 1) != prompt_key("Hello", 1)


def test_repeated_prompts_get_distinct_keys_numbered_in_file_order(dataset: Path) -> None:
    write_lines(dataset, [json.dumps({"prompt": p}) for p in ["A", "B", "A", " A ", "B"]])
    rows = list(iter_rows(dataset))
    assert [(r.prompt, r.occurrence) for r in rows] == [("A", 0), ("B", 0), ("A", 1), (" A ", 2), ("B", 1)]
    assert [r.key for r in rows] == [prompt_key(r.prompt, r.occurrence) for r in rows]
    assert len({r.key for r in rows}) == 5


def test_reordering_or_extending_the_file_keeps_the_keys_of_existing_rows(tmp_path: Path) -> None:
    prompts = ["A", "B", "A", "C", "A", "B"]
    original = write_lines(tmp_path / "a.jsonl", [json.dumps({"prompt": p}) for p in prompts])
    reordered = write_lines(tmp_path / "b.jsonl", [json.dumps({"prompt": p}) for p in reversed(prompts)])
    extended = write_lines(tmp_path / "c.jsonl", [json.dumps({"prompt": p}) for p in [*prompts, "D", "A"]])
    keys = {r.key for r in iter_rows(original)}
    assert {r.key for r in iter_rows(reordered)} == keys
    assert {r.key for r in iter_rows(extended)} == keys | {prompt_key("D", 0), prompt_key("A", 3)}


def test_max_samples_keeps_the_first_n_valid_rows(dataset: Path) -> None:
    write_lines(dataset, ['{"prompt": "a"}', "oops", '{"prompt": "b"}', '{"prompt": "c"}', "42"])
    rows = list(iter_rows(dataset, max_samples=2))
    assert [(r.index, r.prompt, r.line_no) for r in rows] == [(0, "a", 1), (1, "b", 3)]
    scan = scan_dataset(dataset, max_samples=2)
    assert (scan.valid, scan.truncated, scan.error_count) == (2, 1, 2)  # every line is still validated
    assert scan_dataset(dataset, max_samples=10).valid == 3
    assert len(list(iter_rows(dataset, max_samples=10))) == 3


@pytest.mark.parametrize("max_samples", [None, 4])
@pytest.mark.parametrize("samples", [1, 3])
def test_the_keys_a_scan_keeps_are_those_iter_rows_gives(
    dataset: Path, max_samples: int | None, samples: int
) -> None:
    """The run's plan reads them instead of the dataset: the same keys, indices and samples
    as the rows' units, bad lines, repeated prompts and --max_samples included."""
    prompts = ["A", "B", "A", " A ", "C", "B", "D"]
    write_lines(
        dataset,
        [
            "oops",
            *(json.dumps({"prompt": p}) for p in prompts[:3]),
            "",
            *(json.dumps({"prompt": p}) for p in prompts[3:]),
        ],
    )
    units = [(u.key, u.index, u.sample_index) for u in iter_units(iter_rows(dataset, max_samples), samples)]
    scan = scan_dataset(dataset, max_samples, keys=True)
    assert scan.keys is not None and len(scan.keys) == scan.valid == len(units) // samples
    assert list(keyed_units(scan.keys, samples)) == units
    assert list(keyed_units(scan.keys, samples)) == units  # not consumed: the plan is a view of them
    assert scan_dataset(dataset, max_samples).keys is None


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_max_samples_must_be_a_positive_integer(dataset: Path, bad: object) -> None:
    write_lines(dataset, ['{"prompt": "a"}'])
    with pytest.raises(ConfigError, match="--max_samples must be a positive integer"):
        scan_dataset(dataset, max_samples=bad)  # type: ignore[arg-type]


def test_unusable_files_raise_one_line_naming_the_file(tmp_path: Path) -> None:
    cases = {
        tmp_path / "missing.jsonl": "dataset file not found",
        tmp_path: "is a directory, not a dataset file",
        write_lines(tmp_path / "empty.jsonl", []): "no valid row (the file is empty)",
        write_lines(tmp_path / "blank.jsonl", ["", "  "]): "no valid row (the file is empty)",
        write_lines(tmp_path / "bad.jsonl", ["[]", '{"prompt": ""}']): (
            f"no valid row (2 invalid of 2 lines; first: {tmp_path / 'bad.jsonl'}:1: "
            "not a JSON object (got array))"
        ),
    }
    for path, reason in cases.items():
        with pytest.raises(DatasetError) as info:
            scan_dataset(path)
        assert str(info.value) == f"{path}: {reason}"
        assert "\n" not in str(info.value)


def test_a_line_that_is_not_utf8_is_a_bad_line_and_the_rest_still_streams(dataset: Path) -> None:
    dataset.write_bytes(b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n\xff\xfe\n{"prompt": "b"}\n')
    scan = scan_dataset(dataset)
    assert [str(e) for e in scan.errors] == [
        f"{dataset}:2: not UTF-8 text (byte 0xe9 at column 16)",
        f"{dataset}:3: not UTF-8 text (byte 0xff at column 1)",
    ]
    assert (scan.total_lines, scan.valid, scan.error_count) == (4, 2, 2)
    assert [(row.line_no, row.prompt) for row in iter_rows(dataset)] == [(1, "a"), (4, "b")]


def test_a_file_of_only_non_utf8_lines_has_no_valid_row(dataset: Path) -> None:
    dataset.write_bytes(b"\xff\n\xc3\n")
    with pytest.raises(DatasetError) as info:
        scan_dataset(dataset)
    assert str(info.value) == (
        f"{dataset}: no valid row (2 invalid of 2 lines; "
        f"first: {dataset}:1: not UTF-8 text (byte 0xff at column 1))"
    )


CWD_ESCAPES = ["..", "../../x", "src/../..", "a/../b", "/../etc", "/app/..", "./.."]


@pytest.mark.parametrize("cwd", CWD_ESCAPES)
def test_a_cwd_with_a_dotdot_component_is_a_bad_line(dataset: Path, cwd: str) -> None:
    write_lines(dataset, ['{"prompt": "first"}', json.dumps({"prompt": "x", "cwd": cwd})])
    scan = scan_dataset(dataset)
    assert [str(e) for e in scan.errors] == [f"{dataset}:2: cwd: {cwd!r} has a '..' component; {CWD_RULE}"]
    assert [row.prompt for row in iter_rows(dataset)] == ["first"]


def test_a_cwd_holding_a_nul_is_a_bad_line(dataset: Path) -> None:
    write_lines(dataset, ['{"prompt": "first"}', '{"prompt": "x", "cwd": "/app\\u0000x"}'])
    assert [str(e) for e in scan_dataset(dataset).errors] == [
        f"{dataset}:2: cwd: holds a NUL character, which no path can"
    ]


@pytest.mark.parametrize("cwd", ["/app", "/", "src", "src/deep/", "./x", "..hidden", "a..b", "/srv/x../y"])
def test_absolute_and_workspace_relative_cwds_are_kept_as_given(dataset: Path, cwd: str) -> None:
    write_lines(dataset, [json.dumps({"prompt": "x", "cwd": cwd})])
    assert scan_dataset(dataset).error_count == 0
    assert [row.cwd for row in iter_rows(dataset)] == [cwd]


IMAGE_ROWS = [
    '{"prompt": "plain"}',
    '{"prompt": "registry", "image": "python:3.11"}',
    '{"prompt": "docker field", "docker_image": "rust:1.75"}',
    '{"prompt": "rootfs", "image": "/srv/rootfs"}',
]
LOCAL = "the local sandbox backend runs no images; use --sandbox=docker"
BWRAP = (
    "the bwrap sandbox backend runs no registry images ({!r}), only an unpacked root filesystem named "
    "by its absolute path; use --sandbox=docker"
)


@pytest.mark.parametrize(
    ("backend", "errors", "kept"),
    [
        (None, [], ["plain", "registry", "docker field", "rootfs"]),
        ("docker", [], ["plain", "registry", "docker field", "rootfs"]),
        ("local", [f"2: image: {LOCAL}", f"3: docker_image: {LOCAL}", f"4: image: {LOCAL}"], ["plain"]),
        (
            "bwrap",
            [f"2: image: {BWRAP.format('python:3.11')}", f"3: docker_image: {BWRAP.format('rust:1.75')}"],
            ["plain", "rootfs"],
        ),
    ],
)
def test_an_image_the_backend_cannot_run_is_a_bad_line(
    dataset: Path, backend: str | None, errors: list[str], kept: list[str]
) -> None:
    write_lines(dataset, IMAGE_ROWS)
    scan = scan_dataset(dataset, backend=backend)
    assert [str(e) for e in scan.errors] == [f"{dataset}:{e}" for e in errors]
    rows = list(iter_rows(dataset, backend=backend))
    assert [row.prompt for row in rows] == kept and scan.valid == len(kept)
    assert [row.index for row in rows] == list(range(len(kept)))


def test_only_the_first_thousand_errors_are_kept_but_all_are_counted(dataset: Path) -> None:
    write_lines(dataset, ['{"prompt": "ok"}'] + ["not json"] * 1500)
    scan = scan_dataset(dataset)
    assert (len(scan.errors), scan.error_count, scan.valid) == (MAX_KEPT_ERRORS, 1500, 1)
    assert scan.errors[-1].line_no == MAX_KEPT_ERRORS + 1


def test_a_200k_line_file_is_streamed_not_loaded(dataset: Path) -> None:
    """Rows come out before the reader reaches the end: a line appended after the first row
    came out is still read."""
    with dataset.open("wb") as out:
        for i in range(200_000):
            out.write(b'{"prompt": "task %d", "metadata": {"n": %d}}\n' % (i % 7, i))
    rows = iter_rows(dataset)
    first = next(rows)
    assert (first.index, first.prompt, first.occurrence) == (0, "task 0", 0)
    with dataset.open("ab") as out:  # a reader that had loaded the file would never see this
        out.write(b'{"prompt": "appended"}\n')
    last = deque(rows, maxlen=1)[0]
    assert (last.index, last.line_no, last.prompt) == (200_000, 200_001, "appended")
    scan = scan_dataset(dataset)
    assert (scan.total_lines, scan.valid, scan.error_count) == (200_001, 200_001, 0)


def test_iterating_a_large_file_holds_memory_flat(dataset: Path) -> None:
    """Only the prompt-hash counts grow; here there are 7 distinct prompts in ~25 MB."""
    padding = "x" * 500
    with dataset.open("w", encoding="utf-8") as out:
        for i in range(50_000):
            out.write(json.dumps({"prompt": f"task {i % 7}", "metadata": {"pad": padding, "n": i}}) + "\n")
    assert dataset.stat().st_size > 25_000_000
    tracemalloc.start()
    try:
        last: DatasetRow | None = None
        for row in iter_rows(dataset):
            last = row
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert last is not None and (last.index, last.occurrence) == (49_999, 49_999 // 7)
    assert peak < 2_000_000


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
def test_a_line_over_the_length_cap_is_a_bad_line_read_past_without_holding_it(
    dataset: Path, monkeypatch: pytest.MonkeyPatch, line_end: bytes
) -> None:
    monkeypatch.setattr(dataset_module, "MAX_LINE_BYTES", 1000)
    at_cap = b'{"prompt": "' + b"a" * (1000 - 14) + b'"}'
    assert len(at_cap) == 1000
    with dataset.open("wb") as out:
        out.write(at_cap + line_end)
        out.write(b'{"prompt": "' + b"b" * 1000 + b'"}' + line_end)
        out.write(b'{"prompt": "' + b"c" * (8 * 2**20))  # 8 MB, no line end at all
    tracemalloc.start()
    try:
        scan = scan_dataset(dataset)
        rows = list(iter_rows(dataset))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    too_long = "line longer than 1000 bytes (MAX_LINE_BYTES)"
    assert [str(e) for e in scan.errors] == [f"{dataset}:2: {too_long}", f"{dataset}:3: {too_long}"]
    assert [row.line_no for row in rows] == [1] and (scan.valid, scan.total_lines) == (1, 3)
    assert peak < 4 * 2**20


def _wanted(path: Path, scan_path: Path | None = None, **kwargs: object) -> list[DatasetRow] | None:
    scan = scan_dataset(scan_path or path, kwargs.get("max_samples"), keys=True, require_valid=False)  # type: ignore[arg-type]
    assert scan.keys is not None
    keys = list(scan.keys.iter_keys())
    wanted = kwargs.get("wanted", lambda row: True)
    rows = iter_wanted_rows(
        path, scan, backend=None, options=None,
        row_key=keys.__getitem__, wanted=wanted,  # type: ignore[arg-type]
    )  # fmt: skip
    return None if rows is None else list(rows)


def test_the_rows_wanted_are_those_every_row_read_gives_the_others_passed_unparsed(dataset: Path) -> None:
    lines = [json.dumps({"prompt": f"p{i % 5}", "metadata": {"i": i}}) for i in range(30)]
    lines[3], lines[9], lines[12] = "", "\u00a0\u2003", "  "  # blank, by str.strip as by bytes
    lines[5], lines[17] = '{"prompt": ""}', "[1]"  # bad lines: the scan kept both
    lines[20] = '\u00a0{"prompt": "x"}'  # not JSON whitespace: a bad line too
    write_lines(dataset, ["\ufeff" + lines[0], *lines[1:]])
    every = list(iter_rows(dataset))
    assert _wanted(dataset) == every and len(every) == 24
    odd = _wanted(dataset, wanted=lambda row: row % 2 == 1)
    assert odd == [row for row in every if row.index % 2 == 1]
    assert _wanted(dataset, max_samples=7) == every[:7]


def test_rows_are_read_whole_when_the_scan_did_not_keep_every_bad_line(dataset: Path) -> None:
    write_lines(dataset, ["[1]"] * (MAX_KEPT_ERRORS + 1) + ['{"prompt": "x"}'])
    assert _wanted(dataset) is None


def test_a_dataset_changed_since_its_scan_stops_the_feed_with_its_line(dataset: Path, tmp_path: Path) -> None:
    write_lines(dataset, ['{"prompt": "a"}', '{"prompt": "b"}'])
    other = write_lines(tmp_path / "other.jsonl", ['{"prompt": "a"}', '{"prompt": "c"}'])
    with pytest.raises(DatasetError, match=r"other.jsonl:2: the dataset changed since the run scanned it"):
        _wanted(other, scan_path=dataset)


def test_a_dataset_cut_short_since_its_scan_stops_the_feed(dataset: Path, tmp_path: Path) -> None:
    write_lines(dataset, ['{"prompt": "a"}', '{"prompt": "b"}', '{"prompt": "c"}'])
    short = write_lines(tmp_path / "short.jsonl", ['{"prompt": "a"}', '{"prompt": "b"}'])
    expected = r"short.jsonl:3: the dataset changed since the run scanned it \(it ends after 2 of its 3 rows"
    with pytest.raises(DatasetError, match=expected):
        _wanted(short, scan_path=dataset)


def test_rows_appended_since_the_scan_are_left_for_the_next_resume(dataset: Path) -> None:
    write_lines(dataset, ['{"prompt": "a"}', '{"prompt": "b"}'])
    scan = scan_dataset(dataset, keys=True)
    assert scan.keys is not None
    keys = list(scan.keys.iter_keys())
    with dataset.open("a") as handle:
        handle.write('{"prompt": "c"}\n')
    rows = iter_wanted_rows(
        dataset, scan, backend=None, options=None, row_key=keys.__getitem__, wanted=lambda row: True
    )
    assert rows is not None and [row.prompt for row in rows] == ["a", "b"]
