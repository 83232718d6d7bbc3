"""Serve a folder (the offline document corpus) on a free loopback port for the browser tools,
write a dataset whose prompts name that address, and run a command while it is served.

    python scripts/serve_corpus.py --prompts=data/browser_prompts.jsonl --out=browse.jsonl -- \\
        python batch_runner.py --dataset_file=browse.jsonl --batch_size=4 --run_name=browse ...

A fixed port (the example once used 8765) fails when something else holds it, and a server
started with `&` dies quietly: the run then opened no page and still exited 0. Here the port
is whatever the kernel gives, the server is asked for its index before anything runs, and the
prompts' `{corpus_url}` placeholders become its address. With a command after `--`, the folder
is served while it runs (`{corpus_host}` in its arguments becomes `127.0.0.1:PORT`, for an
`--allow_hosts` that opens that port only) and this script exits with its exit code; without
one, the folder is served until Ctrl-C (the address and the dataset written are printed first).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PLACEHOLDER = "{corpus_url}"
HOST_PLACEHOLDER = "{corpus_host}"  # in the command's arguments
CHECK_TIMEOUT = 10.0  # seconds for the served index to answer


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """One line per page fetched by the browser would drown the run's own output."""


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """`folder` served on 127.0.0.1 at a free port, checked to answer; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="corpus-server", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with urllib.request.urlopen(url, timeout=CHECK_TIMEOUT) as reply:
            if reply.status != 200:
                raise SystemExit(f"error: {url} answered {reply.status}, not the corpus index")
        yield url
    finally:
        server.shutdown()
        server.server_close()


def write_prompts(template: Path, out: Path, url: str) -> int:
    """`template`'s rows with `{corpus_url}` in their prompts replaced by `url`; the count."""
    rows = [json.loads(line) for line in template.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not any(PLACEHOLDER in str(row.get("prompt", "")) for row in rows):
        raise SystemExit(f"error: no prompt of {template} holds {PLACEHOLDER}: nothing would open the corpus")
    lines = [json.dumps({**row, "prompt": row["prompt"].replace(PLACEHOLDER, url)}) for row in rows]
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


def _arguments(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    own, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dir", default="data/corpus", type=Path, help="the folder to serve")
    parser.add_argument("--prompts", type=Path, help=f"a JSONL dataset whose prompts hold {PLACEHOLDER}")
    parser.add_argument("--out", type=Path, help="where the dataset with the address goes")
    args = parser.parse_args(own)
    if (args.prompts is None) != (args.out is None):
        parser.error("--prompts and --out go together")
    if not args.dir.is_dir():
        parser.error(f"--dir={args.dir}: not a folder")
    return args, list(command)


def _run(command: list[str]) -> int:
    """`command`'s exit code; Ctrl-C reaches it too (same process group): it decides how to stop."""
    child = subprocess.Popen(command)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue


def main(argv: Sequence[str]) -> int:
    args, command = _arguments(argv)
    with served(args.dir) as url:
        print(f"serving {args.dir} at {url}", file=sys.stderr, flush=True)
        if args.prompts is not None:
            count = write_prompts(args.prompts, args.out, url)
            print(f"wrote {count} prompts for {url} to {args.out}", file=sys.stderr, flush=True)
        if command:
            host = urllib.parse.urlsplit(url).netloc
            return _run([argument.replace(HOST_PLACEHOLDER, host) for argument in command])
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
