"""The containers this project owns: their labels, creation with the isolation defaults,
removal, and reaping of containers whose owner process has died.

Every container carries labels naming the project, the run, the prompt, its sandbox id and
its owner (see owner.py). A container is removed when its prompt ends; whatever a killed
process left behind is removed by `reap_stale`, which the runner calls at start. Containers
owned by another host are never touched: their owner's liveness cannot be checked from here.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docker.errors import APIError, NotFound

from agent.protocols import SandboxSpec
from agent.sandboxes.docker import disk_image
from agent.sandboxes.docker.engine import short_error
from agent.sandboxes.host.owner import FIELDS, current_owner, owner_is_dead

if TYPE_CHECKING:
    from agent.protocols import SandboxOptions

log = logging.getLogger(__name__)
LAYER, IMAGE, NONE = "layer", "image", "none"  # how a container's disk is capped: see _create_capped
_disk_mode: dict[str, str] = {}  # engine -> LAYER, IMAGE or NONE
PREFIX = "io.agent-batch-runner"
LABEL_PROJECT = f"{PREFIX}.sandbox"  # value "1" on every container of ours
LABEL_RUN = f"{PREFIX}.run"
LABEL_PROMPT = f"{PREFIX}.prompt-key"
LABEL_ID = f"{PREFIX}.sandbox-id"
LABEL_HOST = f"{PREFIX}.owner-host"  # and .owner-pid, .owner-start, .owner-boot: see owner.py
LABEL_PID = f"{PREFIX}.owner-pid"

# What a root shell in the container needs beyond an empty capability set: edit and chown any
# file of the container (DAC_OVERRIDE, FOWNER, CHOWN: tar, pip, editors), switch users
# (SETUID, SETGID: apt's _apt sandbox, su) and signal processes of those users (KILL: our own
# timeout kill). No NET_RAW, MKNOD, SYS_CHROOT, AUDIT_WRITE, NET_BIND_SERVICE.
CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"]
KEEPALIVE = ["/bin/sh", "-c", "while :; do sleep 86400; done"]  # portable: busybox has no `sleep infinity`


def owner_labels() -> dict[str, str]:
    return {f"{PREFIX}.owner-{key}": value for key, value in current_owner().items()}


def owner_of(labels: dict[str, str]) -> dict[str, str]:
    return {key: labels.get(f"{PREFIX}.owner-{key}", "") for key in FIELDS}


@dataclass(frozen=True)
class ContainerPlan:
    """Everything needed to create one prompt's container."""

    image: str
    workdir: str
    sandbox_id: str
    spec: SandboxSpec

    def name(self) -> str:
        run = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.spec.run_name)[:24].strip("-.") or "run"
        return f"agent-sbx-{run}-{self.sandbox_id[:12]}"

    def labels(self) -> dict[str, str]:
        return {
            LABEL_PROJECT: "1",
            LABEL_RUN: self.spec.run_name,
            LABEL_PROMPT: self.spec.prompt_key,
            LABEL_ID: self.sandbox_id,
            **owner_labels(),
        }


def create_container(client: Any, plan: ContainerPlan, options: SandboxOptions) -> Any:
    """Creates and starts the container with the isolation defaults; returns it."""
    memory = f"{options.memory_mb}m"
    kwargs: dict[str, Any] = {
        "command": KEEPALIVE,
        "name": plan.name(),
        "labels": plan.labels(),
        "working_dir": plan.workdir,  # the engine creates it when missing
        "hostname": "sandbox",
        "cap_drop": ["ALL"],
        "cap_add": CAPABILITIES,
        "security_opt": ["no-new-privileges"],
        "mem_limit": memory,
        "memswap_limit": memory,  # no swap: a memory hog is killed, not slowed to a crawl
        "nano_cpus": int(options.cpus * 1e9),
        "pids_limit": options.pids_limit,
        "init": True,  # reaps orphans and forwards signals
        "detach": True,
    }
    if not options.network:
        kwargs["network_mode"] = "none"
    container = _create_capped(client, plan, kwargs, options)
    container.start()
    return container


def _create_capped(client: Any, plan: ContainerPlan, kwargs: dict[str, Any], options: SandboxOptions) -> Any:
    """Create the container with its disk capped at `disk_mb`: past it a write fails with
    ENOSPC. Its writable layer where the engine can (`storage_opt` size: overlay on xfs with
    pquota, btrfs, zfs); elsewhere (overlay on ext4) /workspace and /tmp, on a disk image of
    that size (disk_image.py) where the engine is local and the runner root. Otherwise it is
    not capped, said once per engine. Not a tmpfs: a restart (how a fork bomb or a cancelled
    command is stopped) would empty it."""
    engine = str(client.api.base_url)
    if _disk_mode.get(engine, LAYER) == LAYER:
        try:
            size = {"size": f"{options.disk_mb}m"}
            container = client.containers.create(plan.image, storage_opt=size, **kwargs)
            _disk_mode[engine] = LAYER
            return container
        except APIError as exc:
            if "storage-opt" not in str(exc) and "storage opt" not in str(exc).lower():
                raise
            _disk_mode[engine] = _fallback(engine, exc)
    if _disk_mode[engine] == IMAGE:
        kwargs["mounts"] = disk_image.make(client, options.root, plan.sandbox_id, options.disk_mb)
    return client.containers.create(plan.image, **kwargs)


def _fallback(engine: str, exc: APIError) -> str:
    """How the disk is capped on an engine that refused `storage_opt`, said in the log once."""
    reason = disk_image.unavailable_reason()
    if reason is None:
        log.info(
            "the engine at %s cannot cap a container's writable layer (%s): --sandbox_disk_mb caps "
            "/workspace and /tmp, on a disk image of that size per sandbox",
            engine,
            short_error(exc),
        )
        return IMAGE
    log.warning(
        "the engine at %s cannot cap a container's disk (%s) and %s: --sandbox_disk_mb does not hold there",
        engine,
        short_error(exc),
        reason,
    )
    return NONE


def disk_mode(client: Any) -> str | None:
    """How the engine's containers have their disk capped: LAYER, IMAGE or NONE (None: no
    container made yet)."""
    return _disk_mode.get(str(client.api.base_url))


def disk_capped(client: Any) -> bool | None:
    """Whether the engine caps our containers' disk (None: no container made yet)."""
    mode = disk_mode(client)
    return None if mode is None else mode != NONE


def remove_sandbox(client: Any, sandbox_id: str, container_id: str | None = None) -> None:
    """Removes the sandbox's container (with its anonymous volumes). Without an id (creation
    was interrupted), finds it by its sandbox-id label."""
    ids = [container_id] if container_id else _ids(client, {"label": f"{LABEL_ID}={sandbox_id}"})
    for ident in ids:
        try:
            client.api.remove_container(ident, force=True, v=True)
        except NotFound:
            continue  # already gone


def _ids(client: Any, filters: dict[str, str]) -> list[str]:
    return [str(item["Id"]) for item in client.api.containers(all=True, filters=filters)]


def reap_stale(client: Any, run_name: str | None = None) -> list[str]:
    """Removes containers of ours (optionally of one run) whose owner process is dead.
    Returns the names removed."""
    label = f"{LABEL_RUN}={run_name}" if run_name is not None else f"{LABEL_PROJECT}=1"
    removed = []
    for item in client.api.containers(all=True, filters={"label": label}):
        labels = item.get("Labels") or {}
        if labels.get(LABEL_PROJECT) != "1" or not owner_is_dead(owner_of(labels)):
            continue
        try:
            client.api.remove_container(item["Id"], force=True, v=True)
        except NotFound:
            continue
        names = item.get("Names") or [item["Id"][:12]]
        removed.append(str(names[0]).lstrip("/"))
    return removed
