#!/usr/bin/env bash
# Stops what .ci/services.sh started (by PID), resets Podman's storage and deletes the state
# directory. The rootfs tarball cache is kept. Idempotent; quiet on success.
set -uo pipefail

state=${AGENT_CI_STATE:-/run/agent-ci}
[ -d "$state" ] || exit 0
status=0

fail() {
    echo "stop-services.sh: $*" >&2
    status=1
}

stop_pid() {  # pidfile name -> TERM, wait up to 20 s, then KILL
    local pidfile="$state/$1" pid i
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        fail "$1 ($pid) ignored SIGTERM and was killed"
    fi
    rm -f "$pidfile"
}

# Remove leftover containers first so that no shim outlives its daemon.
if [ -S "$state/docker.sock" ] && [ -s "$state/dockerd.pid" ] && kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null; then
    ids=$(docker -H "unix://$state/docker.sock" ps -aq 2>/dev/null)
    [ -z "$ids" ] || docker -H "unix://$state/docker.sock" rm -f $ids >/dev/null 2>&1 || fail "docker rm failed"
fi
stop_pid dockerd.pid
stop_pid podman.pid

podman_reset() {
    env CONTAINERS_CONF="$state/containers.conf" podman --root "$state/proot" --runroot "$state/prun" \
        system reset -f 2>&1 >/dev/null
}
if [ -d "$state/proot" ]; then
    # Seen failing once in five runs right after the service stopped (a container's storage
    # still busy); a second try a moment later is what a person would do. Its error is shown.
    podman_reset >/dev/null || { sleep 2; error=$(podman_reset) || fail "podman system reset failed: $error"; }
fi

# Overlay mounts left by a daemon killed hard would make rm fail; unmount them first.
grep -o " $state/[^ ]*" /proc/mounts | sort -r | while read -r mnt; do
    umount -l "$mnt" 2>/dev/null
done
rm -rf "$state" || fail "cannot remove $state"
exit "$status"
