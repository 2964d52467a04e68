"""The address rule of the outbound fetches: which addresses count as public, and what
the allow-list lets through."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from intake.addresses import AllowList, is_public

# Written from IANA's IPv4 and IPv6 special-purpose address registries (RFC 6890 and
# later), not from the code under test: no tenant URL may reach any of these.
NOT_GLOBAL_V4 = [
    ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]
NOT_GLOBAL_V6 = [
    ip_network(n)
    for n in (
        "::/128",
        "::1/128",
        "::/96",
        "64:ff9b:1::/48",
        "100::/64",
        "2001::/23",
        "2001:db8::/32",
        "3fff::/20",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
]
# Blocks allocated to regional registries for ordinary public unicast use.
PUBLIC = [
    ip_network(n)
    for n in (
        "1.0.0.0/8",
        "8.0.0.0/8",
        "45.0.0.0/8",
        "185.0.0.0/8",
        "2400::/12",
        "2600::/12",
        "2a00::/12",
    )
]


def addresses_in(networks):
    return st.sampled_from(networks).flatmap(
        lambda net: st.integers(0, net.num_addresses - 1).map(lambda i: net[i])
    )


@given(addresses_in(NOT_GLOBAL_V4 + NOT_GLOBAL_V6))
def test_every_address_of_a_special_purpose_block_is_refused(address):
    assert not is_public(address)


@given(addresses_in(NOT_GLOBAL_V4))
def test_ipv6_forms_of_a_refused_ipv4_address_are_refused(v4):
    as_int = int(v4)
    mapped = IPv6Address(0xFFFF_0000_0000 | as_int)  # ::ffff:a.b.c.d
    nat64 = IPv6Address(int(ip_address("64:ff9b::")) | as_int)  # 64:ff9b::a.b.c.d
    six_to_four = IPv6Address((0x2002 << 112) | (as_int << 80))  # 2002:aabb:ccdd::
    assert not any(is_public(a) for a in (mapped, nat64, six_to_four))


@given(addresses_in(PUBLIC))
def test_addresses_of_public_blocks_are_accepted(address):
    assert is_public(address)


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_outside_the_special_blocks_is_accepted_and_its_mapped_form_too(address):
    assume(not any(address in net for net in NOT_GLOBAL_V4))
    assert is_public(address)
    assert is_public(IPv6Address(0xFFFF_0000_0000 | int(address)))


@given(st.ip_addresses())
def test_an_accepted_address_is_global_for_the_standard_library_too(address):
    if is_public(address):
        assert address.is_global and not (
            address.is_private or address.is_loopback or address.is_multicast or address.is_link_local
        )


def test_the_allow_list_lets_its_networks_and_hosts_through_and_nothing_else():
    allow = AllowList.parse(["10.20.0.0/16", "127.0.0.1", "Directory.Internal."])
    assert allow.permits("db.example", IPv4Address("10.20.3.4"))
    assert allow.permits("x", IPv6Address("::ffff:127.0.0.1"))
    assert allow.permits("directory.internal", IPv4Address("192.168.1.1"))
    assert not allow.permits("db.example", IPv4Address("10.21.0.1"))
    assert not allow.permits("localhost", IPv4Address("127.0.0.2"))
    assert allow.permits("example.org", IPv4Address("8.8.8.8"))  # public: no list needed


def test_a_host_is_refused_when_any_of_its_addresses_is_not_permitted():
    allow = AllowList()
    assert allow.permits_all("example.org", [IPv4Address("8.8.8.8"), IPv6Address("2a00::1")])
    assert not allow.permits_all("mixed.example", [IPv4Address("8.8.8.8"), IPv4Address("10.0.0.1")])
    assert not allow.permits_all("nothing.example", [])


@pytest.mark.parametrize("entry", ["not a host", "10.0.0.0/33", "bücher.example", "-x.example"])
def test_a_bad_allow_list_entry_is_named(entry):
    with pytest.raises(ValueError, match="neither a CIDR nor a host name"):
        AllowList.parse(["127.0.0.1", entry])


def test_a_bad_allow_list_setting_is_a_system_check_error(settings):
    from intake.checks import check_allow_list

    settings.INTAKE_HTTP_ALLOW = ["10.0.0.0/8", "not a host"]
    assert [e.id for e in check_allow_list()] == ["intake.E001"]
    settings.INTAKE_HTTP_ALLOW = ["10.0.0.0/8", "directory.internal"]
    assert check_allow_list() == []
