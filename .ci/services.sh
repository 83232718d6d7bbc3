# shellcheck shell=bash
# Sandbox services for the test suite: a private Docker engine, a Podman compat socket and an
# unpacked Debian root filesystem, all built without any registry. Sourced by .ci/run after the
# apt installs; .ci/stop-services.sh undoes it. Idempotent (a second source reuses what runs)
# and quiet on success. Exports DOCKER_HOST, PODMAN_HOST and SANDBOX_ROOTFS.
#
# State lives under a short path because containerd keeps unix sockets under the exec root
# (sun_path is limited to 108 bytes). The rootfs tarball and its unpacked copy are cached
# between runs under AGENT_CI_CACHE.

AGENT_CI_STATE=${AGENT_CI_STATE:-/run/agent-ci}
AGENT_CI_CACHE=${AGENT_CI_CACHE:-/var/cache/agent-ci}
AGENT_CI_IMAGE=sandbox-test/python:3.11
AGENT_CI_ALIAS=python:3.11-slim
export AGENT_CI_STATE

_svc_fail() {
    echo "services.sh: $*" >&2
    return 1
}

_svc_alive() {  # pidfile -> true when the process it names is running
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

_svc_wait_docker() {  # host -> waits up to 30 s for the engine to answer
    local i
    for i in $(seq 150); do
        docker -H "$1" version >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    return 1
}

_svc_rootfs_tar() {
    # A Debian bookworm root with python3, built once per machine (25-50 s) and reused.
    local tar="$AGENT_CI_CACHE/rootfs-bookworm-python3-v1.tar" partial="$AGENT_CI_CACHE/partial.tar"
    # mmdebstrap picks the output format from the file name, so the partial name ends in .tar.
    if [ ! -s "$tar" ]; then
        mkdir -p "$AGENT_CI_CACHE" || return 1
        local mirror=bookworm
        [ -f /etc/apt/sources.list.d/debian.sources ] && mirror=/etc/apt/sources.list.d/debian.sources
        mmdebstrap --quiet --variant=apt --include=python3 \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' \
            bookworm "$partial" "$mirror" >"$AGENT_CI_STATE/mmdebstrap.log" 2>&1 \
            || { rm -f "$partial"; _svc_fail "mmdebstrap failed, see $AGENT_CI_STATE/mmdebstrap.log"; return 1; }
        mv "$partial" "$tar" || return 1
    fi
    AGENT_CI_ROOTFS_TAR=$tar
}

_svc_rootfs_dir() {
    # The unpacked root for bwrap image-root tests, cached next to its tarball (unpacking and
    # deleting it costs seconds); mount points exist up front since it is bound read-only.
    local dir="${AGENT_CI_ROOTFS_TAR%.tar}"
    if [ ! -e "$dir/.complete" ]; then
        rm -rf "$dir" && mkdir -p "$dir" || return 1
        tar -C "$dir" -xf "$AGENT_CI_ROOTFS_TAR" --exclude='./dev/*' || { _svc_fail "cannot unpack rootfs"; return 1; }
        mkdir -p "$dir/workspace" "$dir/tmp" "$dir/proc" "$dir/dev" && touch "$dir/.complete" || return 1
    fi
    export SANDBOX_ROOTFS=$dir
}

_svc_dockerd() {
    local s=$AGENT_CI_STATE host="unix://$AGENT_CI_STATE/docker.sock"
    if ! _svc_alive "$s/dockerd.pid"; then
        rm -f "$s/docker.sock"
        # No bridge, no iptables, no forwarding: containers only ever get `lo`. Started from the
        # state dir: the runtime drops files such as `oom` (after an OOM kill) into its cwd.
        (cd "$s" && exec dockerd --data-root "$s/data" --exec-root "$s/exec" --pidfile "$s/dockerd.pid" \
            -H "$host" --bridge=none --iptables=false --ip-forward=false --ip-masq=false) \
            >"$s/dockerd.log" 2>&1 </dev/null &
    fi
    _svc_wait_docker "$host" || { _svc_fail "dockerd did not answer on $host, see $s/dockerd.log"; return 1; }
    if ! docker -H "$host" image inspect "$AGENT_CI_IMAGE" >/dev/null 2>&1; then
        docker -H "$host" import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            "$AGENT_CI_ROOTFS_TAR" "$AGENT_CI_IMAGE" >/dev/null \
            || { _svc_fail "docker import of $AGENT_CI_ROOTFS_TAR failed"; return 1; }
    fi
    docker -H "$host" tag "$AGENT_CI_IMAGE" "$AGENT_CI_ALIAS" || return 1
    export DOCKER_HOST=$host
}

_svc_podman_conf() {
    # The three fixes from the feasibility notes (no CAP_SYS_RESOURCE, hybrid cgroups, conmon
    # lingering 300 s), plus no systemd on this machine; nothing in /etc is changed. The events
    # log is never rotated: past its default 1 MB podman deletes it, and a test reading the
    # events of its own run (which containers it created) lost them when that fell in its run.
    cat >"$AGENT_CI_STATE/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
exit_command_delay = 5
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_max_size = 0
EOF
}

_svc_podman() {
    local s=$AGENT_CI_STATE sock="unix://$AGENT_CI_STATE/podman.sock"
    _svc_podman_conf || return 1
    local -a pm=(env CONTAINERS_CONF="$s/containers.conf" podman --root "$s/proot" --runroot "$s/prun")
    if ! _svc_alive "$s/podman.pid"; then
        rm -f "$s/podman.sock"
        (cd "$s" && exec "${pm[@]}" system service --time=0 "$sock") >"$s/podman.log" 2>&1 </dev/null &
        echo $! >"$s/podman.pid"
    fi
    _svc_wait_docker "$sock" || { _svc_fail "podman service did not answer on $sock, see $s/podman.log"; return 1; }
    if ! "${pm[@]}" image exists "localhost/$AGENT_CI_IMAGE" 2>/dev/null; then
        "${pm[@]}" import --quiet --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            "$AGENT_CI_ROOTFS_TAR" "localhost/$AGENT_CI_IMAGE" >/dev/null 2>>"$s/podman.log" \
            || { _svc_fail "podman import failed, see $s/podman.log"; return 1; }
    fi
    # Podman resolves the short user-facing name through docker.io/library/.
    "${pm[@]}" tag "localhost/$AGENT_CI_IMAGE" "docker.io/library/$AGENT_CI_ALIAS" 2>>"$s/podman.log" || return 1
    export PODMAN_HOST=$sock
}

agent_ci_start_services() {
    mkdir -p "$AGENT_CI_STATE" || { _svc_fail "cannot create $AGENT_CI_STATE"; return 1; }
    local tool
    for tool in dockerd docker podman mmdebstrap bwrap; do
        command -v "$tool" >/dev/null || { _svc_fail "$tool is not installed (apt-get install it first)"; return 1; }
    done
    _svc_rootfs_tar && _svc_rootfs_dir && _svc_dockerd && _svc_podman
}

agent_ci_start_services
