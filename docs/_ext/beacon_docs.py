"""
Beacon's own Sphinx extension: the parts of the manual made from the code,
so that they cannot drift from it.

- C{.. beacon-configuration::} renders every key of every section of the
  TOML configuration from the declarations themselves
  (L{beacon.config._sections.declared_keys}): its name, its type (from the
  reader that reads it), its default and its meaning (the C{@ivar} of the
  dataclass that holds its field). A key without an C{@ivar} fails the build.
- C{.. beacon-command::} renders the C{beacon} command's help, command by
  command, from its argparse parser (L{beacon.cli._main.build_parser}).
- The API reference's docstrings are epytext (C{C{...}}, C{L{...}},
  C{@param}); L{epytext_to_rst} turns them into reStructuredText for
  autodoc, as each is read.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import MISSING
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

#: How each reader of the configuration (L{beacon.config._reading.READERS})
#: reads a key's TOML value, in a reader's words.
TOML_TYPES = {
    "bool": "boolean",
    "int": "integer",
    "float": "number",
    "str": "string",
    "tuple[str, ...]": "array of strings",
    "networks": "array of networks (CIDR strings)",
    "endpoints": "array of Twisted server endpoint strings",
    "optional": "string (empty: not set)",
    "command": "array of strings: a program and its arguments",
    "mail_to": "string, or array of strings",
    "grpc_listen": "array of addresses (host:port, or a port)",
    "paths": "string, or array of strings (paths)",
    "signing_keys": "array of tables (key, kid, jku)",
}


# Epytext to reStructuredText.

_FIELD = re.compile(r"^(\s*)@(\w+)(?:\s+([\w.*]+))?:\s?(.*)$")
_FIELDS = {
    "param": "param", "type": "type", "return": "returns", "rtype": "rtype",
    "raise": "raises", "raises": "raises", "ivar": "ivar", "cvar": "cvar",
    "var": "var", "keyword": "keyword", "note": "note", "see": "see",
    "since": "since", "todo": "todo", "deprecated": "deprecated",
}


def _inline(text: str) -> str:
    """Epytext's inline markup (C{}, L{}, I{}, B{}, U{}) as reStructuredText."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] in "CLIBUM" and text[i + 1: i + 2] == "{":
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            inner = text[i + 2: j - 1]
            kind = text[i]
            if kind in "CM":
                inner = inner.replace("`", "'")
                out.append(f"``{inner}``" if inner.strip() else inner)
            elif kind == "L":
                target = inner.split("<")[-1].rstrip(">").strip()
                out.append(f":py:obj:`{target}`" if re.fullmatch(r"[\w.]+", target) else f"``{inner}``")
            elif kind == "U":
                out.append(f"`{inner} <{inner}>`_" if "<" not in inner else f"`{inner}`_")
            elif kind == "I":
                out.append(f"*{_inline(inner)}*" if inner.strip() else inner)
            else:
                out.append(f"**{_inline(inner)}**" if inner.strip() else inner)
            i = j
            # reStructuredText's inline markup must end before a word character.
            if i < len(text) and (text[i].isalnum() or text[i] == "_"):
                out.append("\\ ")
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def epytext_to_rst(lines: list[str]) -> list[str]:
    """An epytext docstring's lines as reStructuredText (fields as Sphinx's info fields)."""
    out: list[str] = []
    in_field = False
    for line in lines:
        found = _FIELD.match(line)
        if found is not None and found.group(2) in _FIELDS:
            indent, tag, arg, rest = found.groups()
            if not in_field and out and out[-1].strip():
                out.append("")
            name = _FIELDS[tag]
            out.append(f"{indent}:{name}{' ' + arg if arg else ''}: {_inline(rest)}".rstrip())
            in_field = True
            continue
        if in_field:
            # Fields come last: what follows one, up to the next, continues it.
            out.append("    " + _inline(line.strip()) if line.strip() else "")
            continue
        out.append(_inline(line))
    # A list right after a paragraph line needs a blank line in reStructuredText.
    fixed: list[str] = []
    for line in out:
        if re.match(r"\s*- ", line) and fixed and fixed[-1].strip() and not re.match(r"\s*- |\s{2,}", fixed[-1]):
            fixed.append("")
        fixed.append(line)
    return fixed


def _process_docstring(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    lines[:] = epytext_to_rst(lines)


# The configuration's keys.


def ivars(doc: str | None) -> dict[str, str]:
    """The C{@ivar} descriptions of an epytext docstring, by name, on one line each."""
    found: dict[str, str] = {}
    for match in re.finditer(r"@ivar (\w+):(.*?)(?=\n\s*@|\Z)", doc or "", re.S):
        found[match.group(1)] = " ".join(match.group(2).split())
    return found


def toml_value(value: Any) -> str:
    """A default as it is written in TOML."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')
    if isinstance(value, tuple):
        return "[%s]" % ", ".join(toml_value(v) for v in value)
    return repr(value)


def configuration_rst() -> list[str]:
    """Every key of every section, as reStructuredText."""
    from beacon.config._sections import declared_keys, default_of

    lines: list[str] = []
    current = None
    for section, name, item, holder in declared_keys():
        if section != current:
            current = section
            title = f"``[{section}]``"
            lines += ["", f".. _config-{section}:", "", title, "-" * len(title), ""]
        declared = item.metadata["key"]
        reader = declared.read or str(item.type)
        kind = TOML_TYPES.get(reader)
        if kind is None:
            raise ValueError(f"[{section}] {name}: no words for the reader {reader!r}: add it to TOML_TYPES")
        meaning = ivars(holder.__doc__).get(item.name)
        if not meaning:
            raise ValueError(
                f"[{section}] {name}: {holder.__name__} has no @ivar {item.name} saying what it means"
            )
        default = default_of(item) if (item.default is not MISSING or item.default_factory is not MISSING) else None
        lines += [
            f".. _config-{section}-{name}:",
            "",
            f"``{name}``",
            f"   *{kind}*; default ``{toml_value(default)}``.",
            f"   {_inline(meaning)}",
            "",
        ]
    return lines


class ConfigurationDirective(SphinxDirective):
    """C{.. beacon-configuration::}: every key, from the declarations."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(os.path.abspath(os.path.join(
            os.path.dirname(__file__), "..", "..", "beacon", "config", "_sections.py")))
        container = nodes.section()
        nested_parse_with_titles(self.state, StringList(configuration_rst(), "<beacon-configuration>"), container)
        return container.children


# The beacon command.


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:  # argparse offers no public walk of its sub-parsers
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            found += list(choices.items())
    return found


def command_rst() -> list[str]:
    """Each command's help, the top one first, as reStructuredText."""
    from beacon.cli._keygen import keygen_parser
    from beacon.cli._main import build_parser

    os.environ["COLUMNS"] = "100"
    lines: list[str] = []

    def add(path: str, parser: argparse.ArgumentParser) -> None:
        title = f"``{path}``"
        lines.extend(["", f".. _command-{path.replace(' ', '-')}:", "", title, "-" * len(title), "", "::", ""])
        lines.extend("   " + line if line else "" for line in parser.format_help().rstrip().split("\n"))
        lines.append("")
        for name, sub in _subcommands(parser):
            add(f"{path} {name}", sub)
            if f"{path} {name}" == "beacon card":
                keygen = keygen_parser()
                add("beacon card keygen", keygen)

    add("beacon", build_parser())
    return lines


class CommandDirective(SphinxDirective):
    """C{.. beacon-command::}: the command's help, from its parser."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        nested_parse_with_titles(self.state, StringList(command_rst(), "<beacon-command>"), container)
        return container.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("beacon-configuration", ConfigurationDirective)
    app.add_directive("beacon-command", CommandDirective)
    app.connect("autodoc-process-docstring", _process_docstring)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
