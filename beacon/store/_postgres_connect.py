"""
How Beacon reaches a PostgreSQL database and speaks of it without leaking
a secret: the libpq connection string it connects with (the URL and
L{CONNECT_DEFAULTS}), the URL as logs and messages show it (L{redact},
L{scrub}), opening a connection (L{connect_or_fail}, L{session}), and
reading a database error or a broken connection (L{describe}, L{broken}).

The password comes from the URL, C{PGPASSWORD} or a passfile, as libpq
finds it; it is never logged.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from beacon.store._interface import StoreError

#: libpq settings used unless the URL (or, for the first, PGCONNECT_TIMEOUT)
#: says otherwise: a bounded connection attempt, a name in
#: C{pg_stat_activity}, and TCP keepalives so that a vanished server or
#: network is noticed on an idle connection within about a minute.
CONNECT_DEFAULTS = {
    "connect_timeout": "10",
    "application_name": "beacon",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}

_SECRET_KEYS = frozenset({"password", "sslpassword"})


def _split_url(url: str) -> tuple[str, str | None, str, str, str, str]:
    """
    Split a libpq URL into scheme, user info (L{None} without C{@}),
    hosts, path, query and fragment, without judging them (libpq does).
    """
    scheme, _, rest = url.partition("://")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    slash = rest.find("/")
    netloc, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    userinfo, at, hosts = netloc.rpartition("@")
    return scheme, (userinfo if at else None), hosts, path, query, fragment


def _secrets(url: str) -> set[str]:
    """Every password in C{url}, as written and percent-decoded."""
    found: set[str] = set()
    if "://" in url:
        _, userinfo, _, _, query, _ = _split_url(url)
        if userinfo is not None and ":" in userinfo:
            found.add(userinfo.partition(":")[2])
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key in _SECRET_KEYS:
                found.add(value)
    else:
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            params = {}
        found.update(str(v) for k, v in params.items() if k in _SECRET_KEYS)
    return {s for s in found | {unquote(s) for s in found} if s}


def redact(url: str) -> str:
    """
    C{url} (a libpq URL or C{key=value} connection string) without its
    password, for logs and messages.
    """
    if "://" not in url:
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            return "<an unreadable connection string>"
        return make_conninfo(
            "", **{k: v for k, v in params.items() if k not in _SECRET_KEYS}
        )
    scheme, userinfo, hosts, path, query, fragment = _split_url(url)
    shown = f"{scheme}://"
    if userinfo is not None:
        shown += f"{userinfo.partition(':')[0]}@"
    shown += hosts + path
    kept = [
        (k, v)
        for k, v in parse_qsl(query, keep_blank_values=True)
        if k not in _SECRET_KEYS
    ]
    if kept:
        shown += f"?{urlencode(kept)}"
    if fragment:
        shown += f"#{fragment}"
    return shown


def scrub(text: str, url: str) -> str:
    """
    C{text} (an error message about C{url}) with C{url} shown as
    L{redact} shows it and its password, if any, masked wherever else it
    appears (libpq quotes a URL it cannot read whole).
    """
    text = text.replace(url, redact(url))
    for secret in _secrets(url):
        text = text.replace(secret, "****")
    return text


def conninfo(url: str) -> str:
    """
    The libpq connection string Beacon connects with: C{url} with
    L{CONNECT_DEFAULTS} for whatever it does not set.

    @raises StoreError: If C{url} is not a valid libpq URL or string.
    """
    try:
        given = conninfo_to_dict(url)
    except psycopg.Error as e:
        raise StoreError(
            f"not a PostgreSQL URL: {redact(url)}: {scrub(describe(e), url)}"
        ) from None
    defaults = {k: v for k, v in CONNECT_DEFAULTS.items() if k not in given}
    if "PGCONNECT_TIMEOUT" in os.environ:
        defaults.pop("connect_timeout", None)
    if "PGAPPNAME" in os.environ:
        defaults.pop("application_name", None)
    return make_conninfo(url, **defaults)


def describe(error: BaseException) -> str:
    """
    A one-line account of a database error: its class and PostgreSQL's
    primary message, never the detail (which can quote a row's values).
    """
    primary: str | None = None
    if isinstance(error, psycopg.Error):
        primary = error.diag.message_primary
    if not primary:
        lines = str(error).strip().splitlines()
        primary = lines[0] if lines else ""
    return f"{type(error).__name__}: {primary}"


def broken(connection: psycopg.Connection[Any]) -> bool:
    """Whether C{connection} can no longer be used."""
    return bool(connection.closed or connection.broken)


def connect_or_fail(info: str, display: str) -> psycopg.Connection[Any]:
    """
    An autocommit connection to C{info}.

    @raises StoreError: If it cannot be made; the message names the
        database by C{display} and never holds a password.
    """
    try:
        return psycopg.connect(info, autocommit=True)
    except psycopg.Error as e:
        raise StoreError(
            f"cannot connect to the database {display}: {describe(e)}{_what_to_create(e, info)}"
        ) from None


_MISSING = re.compile(r'(database|role) "([^"]*)" does not exist')


def _what_to_create(error: psycopg.Error, info: str) -> str:
    """
    For a connection refused because its database or role does not exist,
    the command that creates it (for the operator to run as a PostgreSQL
    superuser); else nothing.
    """
    missing = _MISSING.search(str(error))
    if missing is None:
        return ""
    try:
        params = conninfo_to_dict(info)
    except psycopg.Error:
        params = {}
    where = ""
    for option, key in (("-h", "host"), ("-p", "port")):
        value = params.get(key)
        if value and "," not in str(value):
            where += f" {option} {shlex.quote(str(value))}"
    kind, name = missing.groups()
    if kind == "database":
        owner = params.get("user")
        command = f"createdb{where}"
        if owner:
            command += f" -O {shlex.quote(str(owner))}"
        command += f" {shlex.quote(name)}"
        return f"; create it (as a PostgreSQL superuser): {command}"
    database = params.get("dbname")
    command = f"createuser{where} {shlex.quote(name)}"
    if database:
        command += (
            f", then, if the database is missing too: createdb{where}"
            f" -O {shlex.quote(name)} {shlex.quote(str(database))}"
        )
    return f"; create the role (as a PostgreSQL superuser): {command}"


def session(
    info: str, setup: Callable[[psycopg.Connection[Any]], None]
) -> psycopg.Connection[Any]:
    """
    An autocommit connection to C{info}, given its session settings by
    C{setup} (and closed again if that fails).

    @raises psycopg.Error: If it cannot be opened or set up.
    """
    connection = psycopg.connect(info, autocommit=True)
    try:
        setup(connection)
    except BaseException:
        connection.close()
        raise
    return connection
