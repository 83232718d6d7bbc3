"""The network policy web_extract and the browser share: public addresses allowed, loopback,
private, link-local (cloud metadata), CGNAT and IPv4-mapped forms refused after resolution;
`--allow_hosts` entries allowed."""

from __future__ import annotations

import pytest

from agent.common.network_policy import NetworkPolicy, PolicyRefusal
from agent.errors import ConfigError

pytestmark = pytest.mark.anyio

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
]


@pytest.mark.parametrize("url", REFUSED)
async def test_non_public_addresses_are_refused_by_default(url: str) -> None:
    reason = await NetworkPolicy().check(url)
    assert reason is not None and "network policy" in reason


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/", "javascript:alert(1)", "http:///x"]
)
async def test_only_http_urls_with_a_host(url: str) -> None:
    with pytest.raises(PolicyRefusal):
        await NetworkPolicy().resolve(url)


async def test_public_addresses_are_allowed() -> None:
    assert await NetworkPolicy().check("http://93.184.216.34/") is None
    assert await NetworkPolicy().check("https://[2606:2800:220:1:248:1893:25c8:1946]/") is None


async def test_allow_list_networks_and_hosts() -> None:
    policy = NetworkPolicy.from_allow_list(["127.0.0.1", "10.0.0.0/8", "localhost"])
    assert await policy.check("http://127.0.0.1:9/") is None
    assert await policy.check("http://10.9.9.9/") is None
    assert await policy.check("http://localhost/") is None
    assert await policy.check("http://192.168.0.1/") is not None
    assert await policy.check("http://[::ffff:127.0.0.1]/") is None  # the mapped form of an allowed one


def test_a_malformed_allow_list_entry_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--allow_hosts"):
        NetworkPolicy.from_allow_list(["not a host!"])
