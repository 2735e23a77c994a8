"""
The URLs a caller gives the client (an agent's base URL, its card's URL,
C{unix:///path}): only the schemes the client speaks, checked before any
connection, and for a near miss the URL it most likely meant.

What is said of a URL that will not do (L{InvalidURL}):

  - a scheme the client does not speak: within two edits of one it
    speaks (and fewer edits than half its letters: C{htps}, C{htp},
    C{hptts}, C{wws}, but not C{ftp}), that one is suggested, the one
    with TLS when two are as near (C{httpd}: C{https});
  - a known scheme without its C{://} (C{http:/host}, C{https:host},
    C{http//host}): the same with it;
  - no scheme at all (C{127.0.0.1:8080}, C{example.org}): C{http://} is
    suggested for a loopback host (C{localhost}, C{127.0.0.0/8}, C{::1})
    or an IP address with a port, C{https://} for anything else;
  - a known scheme without a host (C{https://}, C{http:///host}).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from beacon.client._errors import InvalidURL

#: The schemes of an agent's URL.
WEB_SCHEMES = ("http", "https", "ws", "wss")
#: The scheme of a unix socket's URL (C{unix:///path}).
UNIX_SCHEME = "unix"
#: What the client speaks, as said in an error.
SPOKEN = "http://, https://, ws://, wss://"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_MISSING_SLASHES = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)(?::/{0,3}|;/{0,3}|/{2,3})(?!/)(.+)", re.DOTALL)
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?(?:[/?#].*)?", re.DOTALL)


def _distance(a: str, b: str) -> int:
    """The optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


#: Of two schemes as near a misspelling, the one with TLS.
_TLS_FIRST = {"https": 0, "wss": 0, "http": 1, "ws": 1, UNIX_SCHEME: 2}


def near_scheme(scheme: str, schemes: tuple[str, ...] = (*WEB_SCHEMES, UNIX_SCHEME)) -> str | None:
    """
    The scheme of C{schemes} that C{scheme} (lower case) is most likely a
    misspelling of, or itself: within two edits, and fewer edits than
    half its letters; of two as near, the one with TLS. None when none
    is near.
    """
    best: tuple[int, int] | None = None
    found = None
    for known in schemes:
        distance = _distance(scheme, known)
        if distance > 2 or (distance and 2 * distance >= len(scheme)):
            continue
        rank = (distance, _TLS_FIRST.get(known, 3))
        if best is None or rank < best:
            best, found = rank, known
    return found


def _loopback_or_address(host: str, port: bool) -> bool:
    """Whether C{host} is loopback, or an IP address given with a port."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or port


def _with_scheme(scheme: str, rest: str) -> str:
    """C{scheme://rest}; for C{unix}, C{unix:///rest} (its path is absolute)."""
    if scheme == UNIX_SCHEME:
        return f"unix:///{rest.lstrip('/')}"
    return f"{scheme}://{rest}"


def check_url(url: str, *, unix: bool = True) -> str:
    """
    Check a URL given to the client (see the module docstring).

    @param unix: Whether C{unix:///path} is taken too.
    @return: C{url}, its scheme in lower case.
    @raise InvalidURL: It names no place the client speaks to; with the
        URL it most likely meant, when there is one.
    """
    schemes = (*WEB_SCHEMES, UNIX_SCHEME) if unix else WEB_SCHEMES
    spoken = SPOKEN + (" or unix:///path" if unix else "")
    given = _SCHEME.match(url)
    if given is not None:
        scheme = given.group(1).lower()
        rest = url[given.end() :]
        if scheme == UNIX_SCHEME and unix:
            parts = urlsplit(url)
            if parts.netloc or not parts.path.strip("/"):
                raise InvalidURL(
                    url,
                    "a unix socket's URL is unix:///path (three slashes, then the socket's absolute path)",
                    _with_scheme(UNIX_SCHEME, rest) if rest.strip("/") else None,
                )
            return f"{UNIX_SCHEME}://{rest}"
        if scheme in schemes:
            try:
                parts = urlsplit(url)
                host, _ = parts.hostname, parts.port
            except ValueError as e:
                raise InvalidURL(url, f"not a valid URL ({e})") from None
            if not host:
                bare = rest.lstrip("/")
                raise InvalidURL(
                    url, "no host after the scheme", f"{scheme}://{bare}" if bare else None
                )
            return f"{scheme}://{rest}"
        near = near_scheme(scheme, schemes)
        raise InvalidURL(
            url,
            f"Beacon speaks {spoken}, not {given.group(1)}://",
            None if near is None else _with_scheme(near, rest),
        )
    slashes = _MISSING_SLASHES.fullmatch(url)
    if slashes is not None:
        near = near_scheme(slashes.group(1).lower(), schemes)
        if near is not None:
            raise InvalidURL(
                url, f"no :// after the scheme {slashes.group(1)}", _with_scheme(near, slashes.group(2))
            )
    if unix and url.startswith("/"):
        raise InvalidURL(url, "no scheme", _with_scheme(UNIX_SCHEME, url))
    address = _HOST.fullmatch(url)
    if address is not None and address.group(1).strip("[].-_"):
        host, port = address.group(1), bool(address.group(2))
        scheme = "http" if _loopback_or_address(host, port) else "https"
        raise InvalidURL(url, "no scheme", f"{scheme}://{url}")
    raise InvalidURL(url, f"not a URL Beacon speaks ({spoken})" if url else "no URL given")


__all__ = ["SPOKEN", "UNIX_SCHEME", "WEB_SCHEMES", "check_url", "near_scheme"]
