"""
Transport limits shared by every public binding: who the source of a request
is, and a per-source rate limit. Both run before any JSON is parsed.

The rate limit is a token bucket per source: a fresh source may send C{burst}
requests at once, then C{rate} requests per second sustained. Buckets live in
a bounded LRU table (C{max_sources}); a source evicted from it starts again
with a full bucket, so memory stays bounded whatever the number of sources.
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, MutableMapping, NamedTuple, Sequence

from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.logger import Logger

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float
    limited: bool = False


class Admission(NamedTuple):
    """
    The rate limiter's answer (a tuple: made for every request a flooding
    source sends, it costs no more than one).

    @ivar retry_after: 0 when admitted; otherwise the seconds until the
        source may send again.
    @ivar first_refusal: True for the first refusal after a run of
        admissions (so a flood is logged once, not once per request).
    """

    retry_after: float
    first_refusal: bool = False

    @property
    def admitted(self) -> bool:
        """Whether the request may go on."""
        return self.retry_after == 0


_ADMITTED = Admission(0.0)


class RateLimiter:
    """
    A token bucket per source, on an injected clock.
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        clock: IReactorTime,
        max_sources: int = 100_000,
    ) -> None:
        """
        @param rate: Sustained requests per second per source; 0 disables
            the limit.
        @param burst: The bucket's capacity.
        @param clock: Read for the time.
        @param max_sources: How many sources are remembered at once.
        """
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._max_sources = max_sources
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    @property
    def clock(self) -> IReactorTime:
        """The clock the buckets are timed on."""
        return self._clock

    def admit(self, source: str) -> Admission:
        """Take one token from C{source}'s bucket, if there is one."""
        if self.rate <= 0:
            return _ADMITTED
        now = self._clock.seconds()
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            self._buckets[source] = bucket
            if len(self._buckets) > self._max_sources:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(source)
            elapsed = max(0.0, now - bucket.stamp)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate)
            bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            bucket.limited = False
            return _ADMITTED
        first = not bucket.limited
        bucket.limited = True
        return Admission((1.0 - bucket.tokens) / self.rate, first)

    def refusal(
        self,
        source: str,
        refusals: MutableMapping[str, int],
        log: Logger,
        said: str,
    ) -> int | None:
        """
        Take one of C{source}'s tokens for a request at a door that answers
        a source over its rate with a refusal naming when to retry (HTTP's
        429, gRPC's RESOURCE_EXHAUSTED).

        @param refusals: The door's refusal counts: C{rate_limited} counted.
        @param log: The door's logger, and C{said} what it warns (a format
            given C{source}, C{rate} and C{burst}) the first time a source is
            refused in a run of refusals, not for every one.
        @return: None when admitted; otherwise the whole seconds (at least
            one) to retry after.
        """
        admission = self.admit(source)
        if admission.admitted:
            return None
        refusals["rate_limited"] += 1
        if admission.first_refusal:
            log.warn(said, source=source, rate=self.rate, burst=self.burst)
        return max(1, math.ceil(admission.retry_after))


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


class SourceResolver:
    """
    Names the source of a request: the peer address, or, when the peer is a
    trusted proxy, the rightmost C{X-Forwarded-For} address that is not itself
    a trusted proxy.
    """

    def __init__(self, trusted_proxies: Iterable[IPNetwork] = ()) -> None:
        """
        @param trusted_proxies: Networks whose X-Forwarded-For is believed.
        """
        self._trusted = tuple(trusted_proxies)

    @property
    def trusts_proxies(self) -> bool:
        """Whether any proxy's X-Forwarded-For is believed (else it is not read)."""
        return bool(self._trusted)

    def _is_trusted(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(address in network for network in self._trusted)

    def resolve(self, peer: IAddress, forwarded_for: Sequence[bytes] | None) -> str:
        """
        @param peer: The transport's peer address.
        @param forwarded_for: The raw X-Forwarded-For header values, if any.
        @return: The source, as text.
        """
        if isinstance(peer, (IPv4Address, IPv6Address)):
            source = peer.host
        elif isinstance(peer, UNIXAddress):
            return "unix"
        else:
            return "unknown"
        if not self._trusted:
            return source
        address = _ip(source)
        if address is None or not self._is_trusted(address):
            return source
        hops: list[str] = []
        for value in forwarded_for or ():
            hops.extend(value.decode("latin-1").split(","))
        for hop in reversed(hops):
            hop_address = _ip(hop)
            if hop_address is None:
                # Past this point the header is not what a trusted proxy
                # wrote: the last trusted hop is the best source we know.
                break
            source = str(hop_address)
            if not self._is_trusted(hop_address):
                break
        return source
