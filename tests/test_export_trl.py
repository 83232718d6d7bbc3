"""The `openai` export through the path TRL's SFTTrainer takes: `datasets.load_dataset("json")`,
then `transformers`' `apply_chat_template(messages, tools=...)` on every row, with a tokenizer
built here offline (a word-level `tokenizers` model; no download, no torch) and a Hermes-style
chat template that renders tools, reasoning, tool calls and results as tool-calling templates
do. `tools` is decoded from its JSON string as TRL does for such datasets. Every call, result,
reasoning and tool schema of every row comes out rendered, and each rendered call is JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent.export.run_export import export_run
from agent.export.sharegpt import convert
from agent.protocols.turns import from_openai_messages
from tests.support.histories import HISTORIES, SCHEMAS

datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")  # dev dependency: installed wherever the suite runs
tokenizers = pytest.importorskip("tokenizers")

TEMPLATE = """
{%- if tools %}<|system|>
# Tools
{% for tool in tools %}{{ tool.function | tojson }}
{% endfor %}{% endif %}
{%- for message in messages %}<|{{ message.role }}|>
{% if message.role == "assistant" %}
{%- if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>
{% endif %}{{ message.content }}
{%- for call in message.tool_calls or [] %}
<|call|>{"name": {{ call.function.name | tojson }}, "arguments": {% if call.function.arguments is string %}
{{- call.function.arguments }}{% else %}{{ call.function.arguments | tojson }}{% endif %}}<|/call|>
{%- endfor %}
{%- elif message.role == "tool" %}<tool_response>{{ message.content }}</tool_response>
{%- else %}{{ message.content }}{% endif %}
{% endfor %}"""


def offline_tokenizer() -> Any:
    vocab = {"[UNK]": 0, "<": 1, ">": 2, "|": 3, "tool_call": 4, "think": 5}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast
    return fast(tokenizer_object=model, unk_token="[UNK]", chat_template=TEMPLATE)


def write_run(run_dir: Path) -> None:
    run_dir.mkdir()
    with (run_dir / "trajectories.jsonl").open("w", encoding="utf-8") as handle:
        for index, history in enumerate(HISTORIES.values()):
            entry = {
                "prompt_index": index,
                "conversations": convert(from_openai_messages(history), SCHEMAS).conversations,
            }
            entry.update(metadata={"outcome": "completed"}, completed=True, toolsets_used=["terminal"])
            handle.write(json.dumps(entry) + "\n")


def test_every_openai_row_renders_through_a_chat_template_with_its_tools(tmp_path: Path) -> None:
    write_run(tmp_path / "run")
    report = export_run(tmp_path / "run", ("openai",))
    rows = datasets.load_dataset(
        "json", data_files=str(report.files["openai"]), split="train", cache_dir=str(tmp_path / "hf")
    )
    tokenizer = offline_tokenizer()
    assert rows.num_rows == len(HISTORIES)
    for row in rows:
        tools = json.loads(row["tools"])
        text = tokenizer.apply_chat_template(row["messages"], tools=tools, tokenize=False)
        assert [json.loads(line)["name"] for line in text.split("# Tools\n")[1].splitlines()[:2]] == [
            "terminal",
            "read_file",
        ]
        rendered_calls = [json.loads(c) for c in re.findall(r"<\|call\|>(.*?)<\|/call\|>", text)]
        calls = [c for m in row["messages"] for c in m["tool_calls"] or []]
        functions = [c["function"] for c in calls]
        assert rendered_calls == [
            {"name": f["name"], "arguments": json.loads(f["arguments"])} for f in functions
        ]
        for message in row["messages"]:
            if message["role"] == "tool":
                assert f"<tool_response>{message['content']}</tool_response>" in text
            if message["reasoning_content"]:
                assert f"<think>\n{message['reasoning_content']}\n</think>" in text
            assert (message["content"] or "") in text
        ids = tokenizer.apply_chat_template(row["messages"], tools=tools, tokenize=True, return_dict=True)
        assert len(ids["input_ids"]) > len(row["messages"])
