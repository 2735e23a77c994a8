"""
Store URLs: reading one, and the store it names.

A store URL names the backend and where its data is:

  - C{sqlite:///relative/path.sqlite3} or C{sqlite:////absolute/path.sqlite3}
    (three slashes, then the path: a fourth slash makes it absolute);
  - C{postgresql://user@host:port/database} (or C{postgres://...}), a libpq
    URL; the password may be in it, in C{PGPASSWORD} or in a passfile.

L{parse_store_url} reads one; L{open_store} makes the store it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union
from urllib.parse import quote, unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict
from twisted.internet.interfaces import IReactorFromThreads

from beacon.store._postgres import PostgreSQLStore
from beacon.store._postgres_connect import describe, redact, scrub
from beacon.store._sqlite import SQLiteStore

#: The stores a URL can name.
Store = Union[SQLiteStore, PostgreSQLStore]

_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class StoreURL:
    """
    A parsed store URL.

    @ivar backend: C{"sqlite"} or C{"postgresql"}.
    @ivar location: The database file's path (SQLite) or the libpq URL
        as given, password included (PostgreSQL).
    @ivar display: The URL without any password, for logs and messages.
    """

    backend: str
    location: str
    display: str


def sqlite_url(path: str) -> str:
    """
    The store URL of the SQLite database at C{path} (percent-encoded, so
    that L{parse_store_url} gives C{path} back whatever it holds).
    """
    return _SQLITE_PREFIX + quote(path, safe="/")


def parse_store_url(url: str) -> StoreURL:
    """
    Read a store URL (see the module's docstring).

    @raises ValueError: If it is neither a C{sqlite:///} URL with a path nor
        a valid C{postgresql://} URL; the message holds no password.
    """
    if url.startswith(_SQLITE_PREFIX):
        raw = url[len(_SQLITE_PREFIX) :]
        path = unquote(raw)
        # A query or fragment is not a path (percent-encode ? and # in one).
        if not path or path.endswith("/") or "?" in raw or "#" in raw:
            raise ValueError(
                f"a sqlite store URL is sqlite:///PATH, with the database"
                f" file's path: {url!r}"
            )
        return StoreURL("sqlite", path, url)
    if url.startswith(_POSTGRES_SCHEMES):
        display = redact(url)
        try:
            conninfo_to_dict(url)
        except psycopg.Error as e:
            raise ValueError(
                f"not a valid PostgreSQL URL: {display}: {scrub(describe(e), url)}"
            ) from None
        return StoreURL("postgresql", url, display)
    shown = redact(url) if "://" in url else url
    raise ValueError(
        "a store URL is sqlite:///PATH or postgresql://user@host:port/database,"
        f" not {shown!r}"
    )


def open_store(url: str, reactor: IReactorFromThreads) -> Store:
    """
    The (not yet started) store that C{url} names.

    @raises ValueError: If C{url} is not a store URL.
    """
    parsed = parse_store_url(url)
    if parsed.backend == "sqlite":
        return SQLiteStore(parsed.location, reactor)
    return PostgreSQLStore(parsed.location, reactor)
