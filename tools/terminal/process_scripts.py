"""The POSIX sh scripts behind background processes, run through `Sandbox.exec` so that every
backend (local, bwrap, docker) runs them alike.

A background process lives in a session directory inside the sandbox (`$TMPDIR` or /tmp):
`log` takes its stdout and stderr, `in` is a FIFO it reads as stdin, `ctl` a FIFO its wrapper
reads orders from (`close`, `term`, `kill`), `pid` appears once it runs. The wrapper stays in
the foreground of one long `exec` until the command ends, because a command must not outlive
its exec under bwrap (each exec is a pid namespace of its own); orders therefore go through
`ctl`, never by pid, and a pid is never shown (it would mean nothing to the model's next
command under bwrap). The FIFOs are opened read-write by their holders, so no open ever
blocks on a missing partner, and the command sees end-of-input only when told to `close`.
"""

from __future__ import annotations

import shlex

SETUP_TIMEOUT = 30.0
ORDER_TIMEOUT = 20.0  # an order waits up to 10 s for the wrapper to be ready, then is sent
READ_TIMEOUT = 30.0

# $d: the session directory. Prints the directory as the sandbox sees it (absolute).
_SETUP = (
    'd="${{TMPDIR:-/tmp}}/.agent-processes/{sid}" && mkdir -p "$d" && mkfifo "$d/in" "$d/ctl" '
    '&& : >"$d/log" && printf "%s\\n" "$d"'
)

# The command runs in a process group of its own (bash's job control; setsid under sh), so
# `term`/`kill` reach everything it started. The controller holds stdin's FIFO open until
# told to close it; the wrapper exits with the command's exit status.
_WRAPPER = """\
d={d}; cmd={cmd}
exec 6<>"$d/ctl" 4<>"$d/in" 2>/dev/null </dev/null
run=
if [ -n "${{BASH_VERSION:-}}" ]; then set -m; elif command -v setsid >/dev/null; then run=setsid; fi
shell=sh; if command -v bash >/dev/null; then shell=bash; fi
$run $shell -c "$cmd" <"$d/in" >>"$d/log" 2>&1 4>&- 6>&- &
pid=$!
set +m
(
  while read -r order <&6; do
    case $order in
      close) exec 4>&- ;;
      term) kill -TERM -- "-$pid" || kill -TERM "$pid" ;;
      kill) kill -KILL -- "-$pid" || kill -KILL "$pid" ;;
    esac
  done
) >/dev/null 2>&1 &
controller=$!
exec 4>&- 6>&-
echo "$pid" >"$d/pid"
wait "$pid"; code=$?
kill "$controller"
exit "$code"
"""

_READY = 'd={d}; i=0; while [ ! -s "$d/pid" ]; do [ $i -ge 200 ] && exit 3; i=$((i+1)); sleep 0.05; done; '

GAP = "\n\x01gap\x01\n"  # between the head and the tail of a long read; no command writes it

# Bytes of `log` from {offset}: all of them when at most {head}+{tail}, else the first {head},
# GAP, and the last {tail}. The first line is the log's size, so the caller knows its new offset.
_READ = """\
exec 2>/dev/null; f={d}/log; off={offset}
size=$(wc -c <"$f") || exit 1
printf '%s\\n' "$size"
new=$((size - off))
if [ "$new" -le {whole} ]; then tail -c +$((off + 1)) "$f" | head -c "$new"
else tail -c +$((off + 1)) "$f" | head -c {head}; printf '{gap}'; head -c "$size" "$f" | tail -c {tail}; fi
"""

# Lines of `log`: the first line is how many there are (a last line without newline counts).
_LINES = """\
exec 2>/dev/null; f={d}/log
awk 'END {{ print NR }}' "$f" || exit 1
{select}
"""


def setup(sid: str) -> str:
    return _SETUP.format(sid=sid)


def wrapper(directory: str, command: str) -> str:
    return _WRAPPER.format(d=shlex.quote(directory), cmd=shlex.quote(command))


def order(directory: str, what: str) -> str:
    """Send `what` (close, term, kill) to the wrapper's controller once it is ready."""
    return _READY.format(d=shlex.quote(directory)) + f'printf "%s\\n" {what} 1<>"$d/ctl"'


def feed(directory: str, data_file: str) -> str:
    """Copy `data_file` (then removed) into the process's stdin once it is ready."""
    source = shlex.quote(data_file)
    copy = f'cat {source} 1<>"$d/in"; rc=$?; rm -f {source}; exit $rc'
    return _READY.format(d=shlex.quote(directory)) + copy


def feed_text(directory: str, text: str) -> str:
    """Write `text` (no NUL: it travels in the script) into the process's stdin once it is ready."""
    return _READY.format(d=shlex.quote(directory)) + f'printf "%s" {shlex.quote(text)} 1<>"$d/in"'


def read(directory: str, offset: int, head: int, tail: int) -> str:
    return _READ.format(
        d=shlex.quote(directory), offset=offset, whole=head + tail, head=head, tail=tail, gap=_GAP_PRINTF
    )


def lines(directory: str, offset: int | None, limit: int) -> str:
    last, page = f'tail -n {limit} "$f"', f'tail -n +{(offset or 0) + 1} "$f" | head -n {limit}'
    select = last if offset is None else page
    return _LINES.format(d=shlex.quote(directory), select=select)


_GAP_PRINTF = "\\n\\001gap\\001\\n"  # GAP as printf writes it
