"""The network policy that `web_extract` and the browser share: which URLs a tool may fetch.

By default the public internet is allowed and everything else is refused: loopback, private,
link-local (cloud metadata addresses such as 169.254.169.254 included), carrier-grade NAT,
multicast and reserved ranges, in IPv4, IPv6 and IPv4-mapped IPv6. The check runs after DNS
resolution, on every address the name resolves to, and callers run it again on every request
and redirect. `--allow_hosts` lists host names or networks (CIDR or single addresses) that are
allowed although they are not public (the tests allow 127.0.0.1); an entry with a port
(`127.0.0.1:8123`, `[::1]:8123`, `corpus.lan:80`) allows that port only.

Callers that open the connection themselves should connect to the addresses `resolve` returned
(a name that resolves differently a moment later cannot then reach a refused address).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from agent.errors import ConfigError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


# IPv6 forms that carry an IPv4 address a gateway may route to (NAT64, SIIT's IPv4-translated
# ::ffff:0:0:0/96, 6to4, IPv4-compatible): judged by that IPv4 address, so 64:ff9b::a9fe:a9fe
# is the metadata address it translates to. Local-use NAT64 (64:ff9b:1::/48, RFC 8215) puts
# the IPv4 address where the operator's prefix length says (RFC 6052: bits 48-87 for a /48, ...),
# so it cannot be read off the address: refused unless --allow_hosts names it. Teredo
# (2001::/32) is not global, hence refused, like the rest of 2001::/23.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")
MAX_HOST_NAME = 253  # characters of a DNS name (RFC 1035), without the root's dot


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, translated, 6to4, NAT64,
    IPv4-compatible)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or address in _IPV4_TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # not :: nor ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


class PolicyRefusal(Exception):
    """The URL may not be fetched; the message says why (a tool result the model reads)."""


@dataclass(frozen=True)
class NetworkPolicy:
    networks: tuple[Network, ...] = ()  # allowed although not public
    hosts: frozenset[str] = frozenset()  # host names allowed whatever they resolve to
    # The same, on one port only (an entry with `:port`)
    network_ports: tuple[tuple[Network, int], ...] = ()
    host_ports: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def from_allow_list(cls, entries: Iterable[str]) -> NetworkPolicy:
        """The policy for `--allow_hosts` entries; a malformed entry is a ConfigError."""
        networks: list[tuple[Network, int | None]] = []
        hosts: set[tuple[str, int | None]] = set()
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            target, port = _split_port(entry)
            try:
                networks.append((ipaddress.ip_network(target.strip("[]"), strict=False), port))
            except ValueError:
                if not _is_host_name(target):
                    raise ConfigError(
                        f"--allow_hosts: {entry!r} is neither a host name nor a network"
                    ) from None
                hosts.add((target.lower().rstrip("."), port))
        return cls(
            tuple(n for n, port in networks if port is None),
            frozenset(h for h, port in hosts if port is None),
            tuple((n, port) for n, port in networks if port is not None),
            frozenset((h, port) for h, port in hosts if port is not None),
        )

    def allows_address(self, address: Address, port: int | None = None) -> bool:
        """Whether `address` may be reached (on `port`: an entry for that port counts too)."""
        plain = _embedded_ipv4(address) or address
        allowed = [*self.networks, *(n for n, only in self.network_ports if only == port)]
        if any(plain in network for network in allowed):
            return True
        if address in _LOCAL_NAT64:
            return any(address in network for network in allowed)
        if isinstance(plain, ipaddress.IPv6Address) and plain in _SITE_LOCAL:
            return False  # deprecated, but routed privately where it is used
        return plain.is_global and not plain.is_multicast

    async def resolve(self, url: str) -> list[str]:
        """The addresses `url`'s host resolves to, all allowed; raises PolicyRefusal otherwise
        (a scheme other than http/https, no host, a name that does not resolve, or any
        resolved address outside the policy)."""
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:  # a bad port, a bracketed host that is not IPv6
            raise PolicyRefusal(f"{url}: not a valid URL ({exc})") from None
        if parts.scheme not in ("http", "https"):
            raise PolicyRefusal(f"{url}: only http and https URLs may be fetched")
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise PolicyRefusal(f"{url}: the URL has no host")
        addresses = await _addresses(host, port)
        if host.lower() in self.hosts or (host.lower(), port) in self.host_ports:
            return addresses
        refused = [a for a in addresses if not self.allows_address(ipaddress.ip_address(a), port)]
        if refused:
            raise PolicyRefusal(
                f"{url}: {host} resolves to {refused[0]}, a private, loopback or link-local address "
                "(refused by the network policy; --allow_hosts allows it)"
            )
        return addresses

    async def check(self, url: str) -> str | None:
        """Why `url` may not be fetched, None when it may."""
        try:
            await self.resolve(url)
        except PolicyRefusal as refusal:
            return str(refusal)
        return None


async def _addresses(host: str, port: int) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    if len(host) > MAX_HOST_NAME:
        raise PolicyRefusal(f"{host[:60]}…: not a host name (longer than {MAX_HOST_NAME} characters)")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise PolicyRefusal(f"{host}: cannot resolve ({exc.strerror or exc})") from None
    except UnicodeError:  # a label IDNA cannot encode (over 63 characters, say)
        raise PolicyRefusal(f"{host[:200]}: not a host name that can be resolved") from None
    return sorted({str(info[4][0]).split("%")[0] for info in infos})


def _split_port(entry: str) -> tuple[str, int | None]:
    """An `--allow_hosts` entry's target and port: `host:80`, `10.0.0.0/8:80`, `[::1]:80`; an
    IPv6 address takes a port only in brackets (its own colons would read as one)."""
    if entry.startswith("[") and "]:" in entry:
        target, _, port = entry.rpartition(":")
    elif entry.count(":") == 1:
        target, _, port = entry.partition(":")
    else:
        return entry, None
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--allow_hosts: {entry!r}: the port must be a number from 1 to 65535")
    return target, int(port)


def _is_host_name(entry: str) -> bool:
    """RFC 1123: labels of letters, digits and inner hyphens, at most 63 each and 253 in all,
    and a last label that is not all digits (`256.1.1.1` is a mistyped address, not a name)."""
    name = entry.rstrip(".")
    labels = name.split(".")
    return (
        len(name) <= MAX_HOST_NAME and not labels[-1].isdigit() and all(_is_label(label) for label in labels)
    )


def _is_label(label: str) -> bool:
    inner = 0 < len(label) <= 63 and not label.startswith("-") and not label.endswith("-")
    return inner and label.replace("-", "").isalnum()
