"""scripts/serve_corpus.py: the offline browser example's server on a free port, checked before
the command runs, and a dataset naming that port (a fixed port, once 8765, could be taken and
the example's `http.server … &` then died without a word)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts" / "serve_corpus.py")
# The command run while the corpus is served: fetch every URL its prompts name, print the statuses.
FETCH = (
    "import json, re, sys, urllib.request\n"
    "rows = [json.loads(line) for line in open(sys.argv[1])]\n"
    "urls = {u for row in rows for u in re.findall(r'http://127\\.0\\.0\\.1:\\d+/', row['prompt'])}\n"
    "for url in sorted(urls):\n"
    "    with urllib.request.urlopen(url, timeout=10) as reply:\n"
    "        print(url, reply.status, 'about.md' in reply.read().decode())\n"
    "print(sys.argv[2])\n"
    "sys.exit(7)\n"
)


def test_the_prompts_name_a_served_free_port_while_the_command_runs(tmp_path: Path) -> None:
    with socket.socket() as taken:
        if _free(8765):
            taken.bind(("127.0.0.1", 8765))  # the old fixed port, held by something else: no matter
        out = tmp_path / "browse.jsonl"
        done = subprocess.run(
            [sys.executable, SCRIPT, "--prompts=data/browser_prompts.jsonl", f"--out={out}", "--",
             sys.executable, "-c", FETCH, str(out), "--allow_hosts={corpus_host}"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 7, done.stderr  # the command's own exit code
    line, allowed = done.stdout.splitlines()
    url, status, lists_documents = line.split()
    assert (status, lists_documents) == ("200", "True") and url != "http://127.0.0.1:8765/"
    assert allowed == "--allow_hosts=" + url.removeprefix("http://").rstrip("/")  # that port only
    prompts = [json.loads(row)["prompt"] for row in out.read_text().splitlines()]
    assert len(prompts) == 4 and all(url in prompt and "{corpus_url}" not in prompt for prompt in prompts)
    assert done.stderr.splitlines() == [
        f"serving data/corpus at {url}",
        f"wrote 4 prompts for {url} to {out}",
    ]


def test_a_dataset_without_the_placeholder_is_refused(tmp_path: Path) -> None:
    template = tmp_path / "fixed.jsonl"
    template.write_text(json.dumps({"prompt": "Open http://127.0.0.1:8765/"}) + "\n")
    done = subprocess.run(
        [sys.executable, SCRIPT, f"--prompts={template}", f"--out={tmp_path / 'o.jsonl'}", "--", "true"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "holds {corpus_url}" in done.stderr
    assert not (tmp_path / "o.jsonl").exists()


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0
