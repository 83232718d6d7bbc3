"""The network policy web_extract and the browser share: public addresses allowed, loopback,
private, link-local (cloud metadata), CGNAT and IPv4-mapped forms refused after resolution;
`--allow_hosts` entries allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.common.network_policy import NetworkPolicy, PolicyRefusal
from agent.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

REFUSED = [
    "http://127.0.0.1/",
    "http://localhost:8080/x",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata
    "http://100.64.0.1/",  # carrier-grade NAT
    "http://[::1]/",
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped loopback
    "http://0.0.0.0/",
    "http://224.0.0.1/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata address
    "http://[64:ff9b::7f00:1]/",  # NAT64 of loopback
    "http://[2002:a9fe:a9fe::]/",  # 6to4 of the metadata address
    "http://[::a9fe:a9fe]/",  # IPv4-compatible
    "http://[fec0::1]/",  # site-local
    "http://[::ffff:0:127.0.0.1]/",  # IPv4-translated (SIIT, ::ffff:0:0:0/96) loopback
    "http://[::ffff:0:a9fe:a9fe]/",  # IPv4-translated metadata address
    "http://[64:ff9b:1::808:808]/",  # local-use NAT64: where its IPv4 sits depends on the prefix
    "http://[64:ff9b:1:a9fe:a9:fe00:808:808]/",  # ... here 169.254.169.254 behind a /48 prefix
    "http://[2001:0:5ef5:79fd::80ff:fffe]/",  # Teredo with client 127.0.0.1
]


@pytest.mark.parametrize("url", ["http://host:notaport/", "http://127.0.0.1:99999/", "http://x:y:z/"])
@pytest.mark.anyio
async def test_a_malformed_url_is_a_refusal_not_a_crash(url: str) -> None:
    reason = await NetworkPolicy().check(url)
    assert reason is not None and "not a valid URL" in reason


@pytest.mark.parametrize("url", REFUSED)
@pytest.mark.anyio
async def test_non_public_addresses_are_refused_by_default(url: str) -> None:
    reason = await NetworkPolicy().check(url)
    assert reason is not None and "network policy" in reason


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/", "javascript:alert(1)", "http:///x"]
)
@pytest.mark.anyio
async def test_only_http_urls_with_a_host(url: str) -> None:
    with pytest.raises(PolicyRefusal):
        await NetworkPolicy().resolve(url)


@pytest.mark.anyio
async def test_public_addresses_are_allowed() -> None:
    assert await NetworkPolicy().check("http://93.184.216.34/") is None
    assert await NetworkPolicy().check("http://[64:ff9b::5db8:d822]/") is None  # NAT64 of a public one
    assert await NetworkPolicy().check("http://[::ffff:0:5db8:d822]/") is None  # translated public one
    assert await NetworkPolicy().check("https://[2606:2800:220:1:248:1893:25c8:1946]/") is None


@pytest.mark.anyio
async def test_allow_list_networks_and_hosts() -> None:
    policy = NetworkPolicy.from_allow_list(["127.0.0.1", "10.0.0.0/8", "localhost"])
    assert await policy.check("http://127.0.0.1:9/") is None
    assert await policy.check("http://10.9.9.9/") is None
    assert await policy.check("http://localhost/") is None
    assert await policy.check("http://192.168.0.1/") is not None
    assert await policy.check("http://[::ffff:127.0.0.1]/") is None  # the mapped form of an allowed one
    assert await policy.check("http://[::ffff:0:127.0.0.1]/") is None  # the translated form


@pytest.mark.anyio
async def test_an_entry_with_a_port_allows_that_port_only() -> None:
    # A served corpus on one loopback port no longer needs all of loopback (the model's own
    # endpoint and every other local service with it).
    entries = ["127.0.0.1:8123", "[::1]:8123", "localhost:9000", "10.0.0.0/8:80"]
    policy = NetworkPolicy.from_allow_list(entries)
    assert await policy.check("http://127.0.0.1:8123/corpus/") is None
    assert await policy.check("http://[::1]:8123/") is None
    assert await policy.check("http://localhost:9000/") is None
    assert await policy.check("http://10.1.2.3/") is None  # port 80, the URL's default
    for refused in ("http://127.0.0.1:8124/", "http://127.0.0.1/", "http://[::1]/", "https://10.1.2.3/"):
        assert await policy.check(refused) is not None, refused
    local = await policy.check("http://localhost:9001/")
    assert local is not None and "--allow_hosts" in local


@pytest.mark.parametrize("entry", ["127.0.0.1:0", "127.0.0.1:65536", "host:http", "[::1]:", "h:８０"])
def test_a_bad_port_in_an_allow_list_entry_is_a_config_error(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"--allow_hosts: .*the port must be a number from 1 to 65535"):
        NetworkPolicy.from_allow_list([entry])


@pytest.mark.parametrize(
    "entry",
    # a mistyped address (an all-digit last label), hyphens at a label's ends, an empty label,
    # a label over 63 characters, a name over 253: each was taken as a host name
    [
        *("not a host!", "256.1.1.1", "1.2.3", "-bad-.com", "bad-.com", "a..b"),
        *("a" * 64 + ".com", "ab." * 90 + "com"),
    ],
)
def test_a_malformed_allow_list_entry_is_a_config_error(entry: str) -> None:
    with pytest.raises(ConfigError, match="--allow_hosts"):
        NetworkPolicy.from_allow_list([entry])


def test_host_names_of_every_valid_shape_are_allowed() -> None:
    names = ["example.com", "localhost", "host123", "sub.123abc.com", "xn--bcher-kva.example", "a-b.c-d.io."]
    assert NetworkPolicy.from_allow_list(names).hosts == {n.rstrip(".") for n in names}


@pytest.mark.anyio
async def test_a_host_name_that_cannot_be_resolved_is_a_refusal_not_an_encoding_error() -> None:
    policy = NetworkPolicy()
    too_long = await policy.check("http://" + "a" * 70_000 + ".com/")
    assert too_long is not None and "not a host name (longer than 253 characters)" in too_long
    long_label = await policy.check("http://" + "a" * 70 + ".com/")  # IDNA refuses a 70-char label
    assert long_label is not None and "not a host name that can be resolved" in long_label


@pytest.mark.parametrize("entry", ["bad_host!", "300.1.1.1/8", "127.0.0.1/33", "*.example.com"])
def test_a_bad_allow_hosts_flag_stops_the_run_before_anything_is_read(entry: str, tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "batch_runner.py"), "--dataset_file=missing.jsonl",
            "--batch_size=1", "--run_name=x", "--base_url=http://127.0.0.1:9/v1", "--model=m",
            f"--allow_hosts={entry}"]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: --allow_hosts: {entry!r} is neither a host name nor a network"
    ]
