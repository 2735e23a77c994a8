"""
Text written by strangers, made inert wherever Beacon shows it (a terminal,
a notification, a mail): every control, format or separator character is
written as a visible backslash escape, so that it is shown, never obeyed.
"""

from __future__ import annotations

import unicodedata

__all__ = ["UNSAFE_CATEGORIES", "inert_text"]

#: Unicode categories never shown as they are: controls, format characters
#: (bidirectional overrides, zero-width characters), surrogates, line and
#: paragraph separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escape(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert_text(text: str, *, keep_lines: bool = False) -> str:
    """
    C{text} with every character of L{UNSAFE_CATEGORIES} written as a
    visible escape (C{\\x1b}, C{\\u202e}): one line, unless C{keep_lines},
    which keeps line feeds.
    """
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        c
        if (keep_lines and c == "\n") or unicodedata.category(c) not in UNSAFE_CATEGORIES
        else _escape(c)
        for c in text
    )
