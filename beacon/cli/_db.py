"""
The C{beacon db} commands: show or apply the submission store's schema
migrations, naming the store as C{twistd beacon} does. The store and the
configuration are imported only when a C{db} command runs.
"""

from __future__ import annotations

import argparse
from typing import IO, Any

from beacon.cli._text import inert


def add_parser(commands: Any) -> None:
    """Add C{db} and its steps to C{commands} (C{beacon}'s subparsers)."""
    db = commands.add_parser(
        "db",
        help="the submission store's schema (migrate before deploying)",
        description="Show or apply the submission store's schema migrations.",
    )
    steps = db.add_subparsers(dest="command", metavar="ACTION", required=True)
    for name, help in (
        ("status", "show the schema version (exit 1 when behind or newer than this Beacon)"),
        ("upgrade", "apply every pending migration, as start-up would"),
    ):
        step = steps.add_parser(name, help=help, description=help)
        step.add_argument("--store", metavar="URL", help="sqlite:///PATH or postgresql://user@host:port/db")
        step.add_argument("--config", metavar="FILE", help="a configuration file, as for twistd beacon")
        step.add_argument("--data", metavar="DIR", help="the data directory (for the default SQLite store)")


def database(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """
    Run C{beacon db status|upgrade}: the store is named as C{twistd beacon}
    names it (C{--store}, else C{--config}'s C{[store] url}, else the SQLite
    file in C{--data} or C{./beacon-data}).

    @return: The exit code.
    """
    from beacon.config import ConfigError, build_config, read_file
    from beacon.service import check_config, store_url
    from beacon.store import StoreError, parse_store_url, schema_status, status, upgrade

    def say(line: str) -> None:
        # Each step is said before it is taken, and shown at once: reaching
        # a database may take up to its connect timeout.
        out.write(inert(line) + "\n")
        out.flush()

    try:
        config = check_config(
            build_config(
                read_file(args.config) if args.config else {},
                data_dir=args.data,
                store_url=args.store,
            )
        )
        url = store_url(config)
        display = parse_store_url(url).display
        if args.command == "upgrade":
            say(f"reading the schema version of {display} ...")
            found = schema_status(url)
            if found.newer:
                say(f"{display}: schema version {found.current}, newer than this Beacon's"
                    f" ({found.supported}): nothing to do; upgrade Beacon instead")
                return 1
            if found.pending:
                say(f"applying {found.pending} migration(s) to {display}: schema version"
                    f" {found.current} -> {found.supported} ...")
            say(upgrade(url))
            return 0
        say(f"reading the schema version of {display} (changing nothing) ...")
        say(status(url))
        found = schema_status(url)
        return 0 if found.current == found.supported else 1
    except (ConfigError, StoreError) as e:
        err.write(f"beacon: {inert(str(e))}\n")
        return 1
