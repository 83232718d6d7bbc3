"""Where the end of a run goes, process by process: the real `batch_runner.py` (as
`run_size.py` runs it: the simulated endpoint, `--policy=answer`, latency 0) under
`strace -f --seccomp-bpf`, tracing only process events, fsyncs, renames and kills, so the run
is hardly slowed (only those calls stop the tracee). Printed: every traced call from the
endpoint's last reply on, in seconds after it, with its process (the parent, a worker, the
fork server), then the phases `run_size.py` prints.

    cd bench && python end_trace.py                    # 20,000 prompts
    cd bench && python end_trace.py --prompts=2000 --all   # every call, not only the end's
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from endpoint_process import start_endpoint
from run_size import _phases, write_dataset

ROOT = Path(__file__).resolve().parent.parent
TRACED = "%process,fsync,fdatasync,rename,renameat,renameat2,kill,unlink,unlinkat"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=20_000)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose runner runs")
    parser.add_argument("--all", action="store_true", help="print the calls before the last reply too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-end-trace-") as tmp:
        work = Path(tmp)
        dataset = work / "prompts.jsonl"
        write_dataset(dataset, args.prompts)
        server = start_endpoint(0.0, 0.0, policy="answer")
        trace = work / "strace.txt"
        cmd = [
            "strace", "-f", "--seccomp-bpf", "-ttt", "-e", f"trace={TRACED}", "-o", str(trace),
            sys.executable, str(args.tree / "batch_runner.py"), f"--dataset_file={dataset}",
            "--batch_size=100", "--run_name=trace", f"--output_dir={work / 'runs'}",
            f"--base_url={server.base_url}", "--api_key=bench", "--model=sim-model", "--num_workers=2",
            "--max_inflight=256", "--distribution=terminal_only", "--sandbox=local",
        ]  # fmt: skip
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=args.tree)
        ended = time.monotonic()
        last = server.stop()["stats"]["last_reply_at"]
        if done.returncode != 0:
            raise SystemExit(f"runner exited {done.returncode}:\n{done.stderr.decode()[-3000:]}")
        offset = time.time() - time.monotonic()  # wall clock (strace's) minus the monotonic clock
        _print_trace(trace.read_text().splitlines(), last + offset, args.all)
        print(f"last reply at {last + offset:.6f} (wall clock)")
        print("phases_s:", _phases(work / "runs" / "trace", last, ended))


def _print_trace(lines: list[str], last_wall: float, everything: bool) -> None:
    """Each traced call as `+seconds pid call`, from the last reply on (or all of them)."""
    for line in lines:
        pid, at, call = line.split(maxsplit=2)
        since = float(at) - last_wall
        if everything or since >= -0.05:
            print(f"{since:+8.3f} {pid:>7} {call[:150]}")


if __name__ == "__main__":
    main()
