"""Which network addresses a tenant-supplied URL may reach.

A URL a tenant gives us is fetched from inside our network: without a rule it could
read a cloud metadata service, an admin port on localhost or anything else only we can
reach, and learn from the error what answered. The rule: every address a host resolves
to must be a public internet address, unless the deployment's allow-list names the
address's network or the host itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

# IANA's special-purpose address registries, the blocks that are not globally reachable
# (and a few that are but lead somewhere no tenant should go: 6to4 relays, the whole of
# 192.0.0.0/24). The stdlib's flags are checked as well; this table keeps the answer
# the same across Python patch releases, whose flags have changed.
NOT_PUBLIC: tuple[IPNetwork, ...] = tuple(
    ip_network(block)
    for block in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata services
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the limited broadcast address
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::/96",  # IPv4-compatible (deprecated)
        "::ffff:0:0/96",  # IPv4-mapped (judged by the IPv4 address, see embedded_ipv4)
        "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo, ORCHID, ...)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)

NAT64 = ip_network("64:ff9b::/96")
HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


def embedded_ipv4(address: IPAddress) -> IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, NAT64 or 6to4): where
    a packet sent to it ends up, so the address to judge."""
    if isinstance(address, IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    return address.sixtofour


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a globally routable unicast address."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return is_public(inner)
    if any(address in block for block in NOT_PUBLIC):
        return False
    return address.is_global and not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def host_key(host: str) -> str:
    """A host name as the allow-list compares it: lower case, no trailing dot."""
    return host.lower().rstrip(".")


@dataclass(frozen=True)
class AllowList:
    """Internal networks and host names a deployment lets tenants' URLs reach."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """``["10.20.0.0/16", "127.0.0.1", "directory.internal"]``; ValueError names a
        bad entry."""
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for entry in (e.strip() for e in entries):
            try:
                networks.append(ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if not HOST_NAME.match(host_key(entry)):
                raise ValueError(
                    f"{entry!r} is neither a CIDR nor a host name "
                    f"(write international names in their xn-- form)"
                )
            hosts.add(host_key(entry))
        return cls(tuple(networks), frozenset(hosts))

    def permits(self, host: str, address: IPAddress) -> bool:
        """Whether a URL naming ``host`` may connect to ``address``."""
        if host_key(host) in self.hosts:
            return True
        judged = [a for a in (address, embedded_ipv4(address)) if a is not None]
        if any(a in network for a in judged for network in self.networks):
            return True
        return is_public(address)

    def permits_all(self, host: str, addresses: Iterable[IPAddress]) -> bool:
        """Whether every address ``host`` resolved to is permitted (and there is one):
        a name that also resolves to an internal address could be steered to it."""
        addresses = list(addresses)
        return bool(addresses) and all(self.permits(host, a) for a in addresses)
