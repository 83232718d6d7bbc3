"""One process run inside a container through the engine's exec API, with a deadline.

Every exec starts with a handshake: the process waits for one line on stdin and then prints
its own pid before doing anything else (for a command: the shell that runs it, see
COMMAND_SCRIPT). docker-py parses the HTTP upgrade response through a
buffered reader and then reads the raw socket, so output written before the client has parsed
the headers is silently lost (reproduced on Docker and Podman with a client slowed by load);
waiting for our "go" closes that race. The pid names the command's session and process group
(runc makes every exec'd process a session leader), which is what a timeout kills, inside the
container. Processes that start their own session escape a timeout kill but still die with
the container at the end of the prompt. If the kill itself cannot run (a fork bomb holds every
pid), the container is restarted: all its processes die and its filesystem is kept.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from docker.errors import APIError

from agent.sandboxes.host.output_buffer import OutputBuffer

GO = "read -r _go || exit 125; "  # the handshake
PID = 'echo "$$"; '
# A command is run by bash (sh when the image has none) after an exec; the pid line comes from
# that shell, so an exec that fails (no memory or pid left: the engine or dash exits 126 and
# prints its error, if anything, where the pid line should be) is told apart from the command
# failing with 126. The prefix keeps the command on line 1 of its script.
COMMAND_SCRIPT = (
    r'cd -- "$2" || { echo "$$"; exit 1; }; '
    r'if command -v bash >/dev/null 2>&1; then exec bash -c "echo "\$\$"; $1" </dev/null 2>&1; fi; '
    r'exec sh -c "echo "\$\$"; $1" </dev/null 2>&1'
)
KILL_GRACE = 5.0  # seconds to collect the output of a killed command
KILL_TIMEOUT = 10.0
FRAME_HEADER = struct.Struct(">BxxxL")

# Kills the process group and the session of pid $1, repeating while members remain (they
# may fork while we scan). Builtins only: it must work in a container with no free pids left.
KILL_SCRIPT = r"""root=$1; round=0
while [ "$round" -lt 20 ]; do
  kill -KILL -- "-$root" 2>/dev/null
  left=
  for d in /proc/[0-9]*; do
    read -r line 2>/dev/null <"$d/stat" || continue
    set -- ${line##*") "}
    [ "$1" = Z ] && continue
    if [ "$3" = "$root" ] || [ "$4" = "$root" ]; then kill -KILL "${d#/proc/}" 2>/dev/null; left=1; fi
  done
  [ -z "$left" ] && exit 0
  round=$((round + 1))
done
exit 1
"""


@dataclass(frozen=True)
class ExecOutcome:
    stdout: bytes
    stderr: bytes
    exit_code: int  # -1 when unknown; meaningless when timed_out
    timed_out: bool
    restarted: bool = False  # the timeout kill could not run, so the container was restarted


class ExecNotStarted(Exception):
    """The engine could not start the process at all (no pid line): typically every pid of
    the container is taken. Docker reports this as exit code 126 with its error as the only
    stdout line ("OCI runtime exec failed: ..."); Podman as exit code 125 with it on stderr."""


class _FrameReader:
    """Demultiplexes the engine's stream frames; the first stdout line is the handshake pid.
    `pid` stays None when that line never came or is not a pid (then `refusal` holds it)."""

    def __init__(self, conn: Any, limit: int) -> None:
        self._conn = conn
        self._pending = b""
        self._pid_line = b""
        self.pid: int | None = None
        self.refusal: bytes | None = None
        self.stdout = OutputBuffer(limit)
        self.stderr = OutputBuffer(limit)

    def read_until(self, deadline: float) -> bool:
        """Reads until end of stream (True) or until the deadline passes (False)."""
        poller = select.poll()
        poller.register(self._conn.fileno(), select.POLLIN)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                return False
            chunk = self._conn.recv(65536)
            if not chunk:
                return True
            self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        self._pending += chunk
        while len(self._pending) >= FRAME_HEADER.size:
            stream, size = FRAME_HEADER.unpack_from(self._pending)
            end = FRAME_HEADER.size + size
            if len(self._pending) < end:
                return
            payload, self._pending = self._pending[FRAME_HEADER.size : end], self._pending[end:]
            if stream == 2:
                self.stderr.append(payload)
            elif stream == 1:
                self._stdout(payload)

    def _stdout(self, payload: bytes) -> None:
        if self.pid is None and self.refusal is None:
            self._pid_line += payload
            line, newline, payload = self._pid_line.partition(b"\n")
            if not newline:
                return
            if not line.strip().isdigit():
                # Not our shell's pid, so our shell never ran the script: Docker writes a failed
                # runc exec (no pid left for it) here, as does dash when its `exec bash` fails
                # (COMMAND_SCRIPT). Both exit 126, as a command may: only the pid line tells.
                self.refusal = line.strip()[:1000]
                return
            self.pid = int(line)
        if self.pid is not None:
            self.stdout.append(payload)

    def not_started(self) -> str:
        """What came instead of the pid line (the engine's or the shell's error), if anything."""
        text = self._pid_line if self.refusal is None else self.refusal
        return (text.strip()[:1000] + b" " + self.stderr.getvalue()).decode(errors="replace").strip()


def run_script(
    client: Any,
    container_id: str,
    script: str,
    args: list[str],
    *,
    timeout: float,
    limit: int,
    stdin: bytes = b"",
    kill: bool = True,
    prints_pid: bool = False,
    streams: set[Any] | None = None,
) -> ExecOutcome:
    """Runs `sh -c script sh args...` as root in the container, feeding it `stdin` then EOF.
    The pid line is printed before `script` unless the script prints it (`prints_pid`).
    After `timeout` s it is killed (unless `kill` is false: the kill script itself) and the
    outcome says `timed_out`. While it runs its connection is in `streams`, where another
    thread may shut it down to end the wait (`end_streams`)."""
    argv = ["/bin/sh", "-c", GO + ("" if prints_pid else PID) + script, "sh", *args]
    exec_id = client.api.exec_create(container_id, argv, stdin=True, workdir="/")["Id"]
    sock = client.api.exec_start(exec_id, socket=True)
    conn = getattr(sock, "_sock", sock)  # a SocketIO over unix sockets, the socket itself otherwise
    streams = set() if streams is None else streams
    streams.add(conn)
    try:
        conn.sendall(b"\n" + stdin)
        conn.shutdown(socket.SHUT_WR)  # EOF on the process's stdin; the engine keeps streaming
        reader = _FrameReader(conn, limit)
        finished = reader.read_until(time.monotonic() + timeout)
        restarted = False
        if not finished and kill:
            restarted = stop_command(client, container_id, reader.pid)
            reader.read_until(time.monotonic() + KILL_GRACE)
    finally:
        streams.discard(conn)
        conn.close()
        sock.close()
    return _outcome(client, exec_id, reader, finished=finished, restarted=restarted)


def _outcome(
    client: Any, exec_id: str, reader: _FrameReader, *, finished: bool, restarted: bool
) -> ExecOutcome:
    if not finished:
        return ExecOutcome(reader.stdout.getvalue(), reader.stderr.getvalue(), -1, True, restarted)
    exit_code = exec_exit_code(client, exec_id)
    if reader.pid is None:
        raise ExecNotStarted(f"exit code {exit_code}: {reader.not_started()}")
    return ExecOutcome(reader.stdout.getvalue(), reader.stderr.getvalue(), exit_code, False)


def end_streams(streams: set[Any]) -> None:
    """Shut down the connections of the `run_script` calls running now: their waits end at once."""
    for conn in list(streams):
        with suppress(OSError):  # closed meanwhile (the call ended): nothing left to wake
            conn.shutdown(socket.SHUT_RDWR)


def stop_command(client: Any, container_id: str, pid: int | None) -> bool:
    """Kills the session of `pid` inside the container; if that fails, restarts the container
    (and returns True)."""
    if pid is not None and pid > 1:
        try:
            outcome = run_script(
                client, container_id, KILL_SCRIPT, [str(pid)], timeout=KILL_TIMEOUT, limit=4096, kill=False
            )
        except (APIError, ExecNotStarted):  # typically: no pid left in the container
            outcome = None
        if outcome is not None and not outcome.timed_out and outcome.exit_code == 0:
            return False
    restart_container(client, container_id)
    return True


def restart_container(client: Any, container_id: str) -> None:
    """Kills every process of the container and starts it again; its filesystem is kept."""
    client.api.restart(container_id, timeout=0)


def exec_exit_code(client: Any, exec_id: str) -> int:
    # The stream can end a moment before the engine records the exit status.
    for _ in range(200):
        info = client.api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        time.sleep(0.01)
    return -1
