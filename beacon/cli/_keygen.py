"""
C{beacon card keygen}: a new private key for signing the agent card
(C{[card] signing_key}), written with mode 0600 and never over a file;
its public key, as a JWKS, on standard output (what C{beacon card
--verify} takes, and what a C{jku} URL serves).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import IO

from beacon.cli._options import Parser

#: The algorithms keygen offers, the default first.
KEYGEN_ALGORITHMS = ("ES256", "EdDSA", "RS256")


def keygen_parser() -> argparse.ArgumentParser:
    """The parser of C{beacon card keygen}."""
    parser = Parser(
        prog="beacon card keygen",
        description="Write a new private key for [card] signing_key (mode 0600, never over "
        "an existing file) and print its public key as a JWKS (for beacon card --verify, "
        "or to publish at a jku URL).",
    )
    parser.add_argument("path", metavar="PATH", help="where to write the PEM private key")
    parser.add_argument(
        "--alg", choices=KEYGEN_ALGORITHMS, default=KEYGEN_ALGORITHMS[0],
        help="ES256 (EC P-256), EdDSA (Ed25519) or RS256 (RSA 3072) [default: ES256]",
    )
    return parser


def keygen(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """
    Run C{beacon card keygen}.

    @return: The exit code: 0, or 1 when the file exists or cannot be written.
    """
    from beacon.signing import generate_key

    pem, key = generate_key(args.alg)
    try:
        fd = os.open(args.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        err.write(f"beacon: {args.path} exists: not overwritten (choose another path)\n")
        return 1
    except OSError as e:
        err.write(f"beacon: cannot write {args.path}: {(e.strerror or str(e)).lower()}\n")
        return 1
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
    finally:
        os.close(fd)
    out.write(json.dumps({"keys": [key.jwk]}, indent=2) + "\n")
    err.write(f"beacon: wrote {args.path} ({key.alg}, kid {key.kid})\n")
    return 0
