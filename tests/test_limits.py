"""
The transport limits on their own: the per-source token bucket on an
injected clock, its bounded memory, and how the source is named behind
trusted proxies.
"""

from __future__ import annotations

import ipaddress

import pytest
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.task import Clock

from beacon.bindings.admission import RateLimiter, SourceResolver


def test_burst_then_sustained_rate() -> None:
    """A fresh source gets `burst` requests at once, then one per 1/rate seconds."""
    clock = Clock()
    limiter = RateLimiter(rate=2, burst=5, clock=clock)
    assert [limiter.admit("a").admitted for _ in range(6)] == [True] * 5 + [False]
    clock.advance(0.5)
    assert limiter.admit("a").admitted
    assert not limiter.admit("a").admitted


def test_retry_after_is_the_time_to_the_next_token() -> None:
    """A refusal says how long until a token is available."""
    clock = Clock()
    limiter = RateLimiter(rate=4, burst=1, clock=clock)
    limiter.admit("a")
    clock.advance(0.125)
    assert limiter.admit("a").retry_after == pytest.approx(0.125)


def test_sources_are_independent() -> None:
    """One noisy source does not use up another's bucket."""
    limiter = RateLimiter(rate=1, burst=1, clock=Clock())
    assert limiter.admit("noisy").admitted
    assert not limiter.admit("noisy").admitted
    assert limiter.admit("quiet").admitted


def test_first_refusal_is_marked_once_per_run() -> None:
    """Only the first refusal of a run is marked, so a flood is logged once."""
    clock = Clock()
    limiter = RateLimiter(rate=1, burst=1, clock=clock)
    limiter.admit("a")
    flags = [limiter.admit("a").first_refusal for _ in range(3)]
    assert flags == [True, False, False]
    clock.advance(1)
    assert limiter.admit("a").admitted
    assert limiter.admit("a").first_refusal


def test_zero_rate_disables_the_limit() -> None:
    """rate = 0 admits everything and remembers nothing."""
    limiter = RateLimiter(rate=0, burst=1, clock=Clock())
    assert all(limiter.admit("a").admitted for _ in range(1000))
    assert len(limiter) == 0


def test_memory_is_bounded_by_max_sources() -> None:
    """However many sources arrive, at most max_sources buckets are kept."""
    limiter = RateLimiter(rate=1, burst=1, clock=Clock(), max_sources=100)
    for n in range(1000):
        limiter.admit(f"10.0.{n // 256}.{n % 256}")
    assert len(limiter) == 100


def networks(*texts: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Networks from text."""
    return [ipaddress.ip_network(t) for t in texts]


def test_source_is_the_peer_without_trusted_proxies() -> None:
    """With no trusted proxies X-Forwarded-For is ignored."""
    resolver = SourceResolver()
    peer = IPv4Address("TCP", "192.0.2.1", 1234)
    assert resolver.resolve(peer, [b"203.0.113.9"]) == "192.0.2.1"


def test_untrusted_peer_cannot_forge_a_source() -> None:
    """A peer that is not a trusted proxy cannot choose its source."""
    resolver = SourceResolver(networks("10.0.0.0/8"))
    peer = IPv4Address("TCP", "192.0.2.1", 1234)
    assert resolver.resolve(peer, [b"203.0.113.9"]) == "192.0.2.1"


def test_rightmost_untrusted_forwarded_address_is_the_source() -> None:
    """Behind trusted proxies the source is the rightmost untrusted X-Forwarded-For hop."""
    resolver = SourceResolver(networks("10.0.0.0/8"))
    peer = IPv4Address("TCP", "10.0.0.1", 1234)
    header = [b"198.51.100.7, 203.0.113.9, 10.0.0.2"]
    assert resolver.resolve(peer, header) == "203.0.113.9"


def test_repeated_forwarded_headers_are_read_in_order() -> None:
    """Several X-Forwarded-For headers count as one list, in order."""
    resolver = SourceResolver(networks("10.0.0.0/8"))
    peer = IPv4Address("TCP", "10.0.0.1", 1234)
    assert resolver.resolve(peer, [b"203.0.113.9", b"10.0.0.3"]) == "203.0.113.9"


def test_garbage_hop_stops_the_walk() -> None:
    """An unparsable hop ends the walk at the last trusted hop."""
    resolver = SourceResolver(networks("10.0.0.0/8"))
    peer = IPv4Address("TCP", "10.0.0.1", 1234)
    assert resolver.resolve(peer, [b"not-an-ip, 10.0.0.5"]) == "10.0.0.5"


def test_ipv6_and_unix_peers() -> None:
    """IPv6 peers are named by address, unix socket peers as 'unix'."""
    resolver = SourceResolver()
    assert resolver.resolve(IPv6Address("TCP", "::1", 1), None) == "::1"
    assert resolver.resolve(UNIXAddress(b"/tmp/s"), None) == "unix"
