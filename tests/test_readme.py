"""
README's examples, checked so that they cannot drift from the code.

README.rst is read as reStructuredText by a small reader of its own (no
docutils needed): its literal blocks (a paragraph ending in C{::}, then the
indented lines) and its inline literals (C{``...``}). The convention, which
README's "Develop" states too:

- A literal block is a I{shell example} when one of its lines starts with
  a command (L{COMMANDS}: C{curl}, C{beacon}, C{twistd}...). A line that
  starts with C{beacon: } or C{twistd beacon: } is a message Beacon
  prints, never a command. A command goes on while its line ends with
  C{\\} or a quote is open. The lines after a command, up to the next
  one, are what it prints.
- Every shell example runs, in README's order, against one
  C{twistd -n beacon} started here on a free loopback port, with its data in
  C{beacon-data} of a temporary working directory (where C{make run} puts
  it), C{.venv/bin} on C{PATH} and standard input not a terminal. Each
  command runs in C{bash -c} and must exit 0; where README shows output, it
  must match (L{matches}: C{...} matches any text, whitespace is compared
  loosely, as doctest's ELLIPSIS and NORMALIZE_WHITESPACE do). Before it
  runs, C{127.0.0.1:8080} becomes the port of the Beacon started here (in
  the output shown too), an endpoint's C{tcp:PORT:} becomes C{tcp:0:} (a
  port the kernel picks), C{ID} the first task id (36 base32hex digits) of
  the latest output that showed one, and L{SHORT_ID} its first 12
  characters. A command whose comment says C{until Ctrl-C} is stopped with
  SIGINT, to its process group as a terminal does, once it printed its
  first line; it must then exit 0 or die of that signal. A C{twistd}
  daemon an example starts is waited for (and stopped, if the example did
  not) at the end.
- The RST comment C{.. test: skip: <why>} right before a block's C{::}
  line says why that block cannot run here (root, a container engine, a
  database elsewhere); C{.. test: synopsis} marks a usage summary, whose
  options are checked but which is not run.
- In every block, run or not: every C{beacon ...} command line parses
  with C{beacon.cli}'s parser, every C{twistd ...} line (and C{make run
  ARGS=}, C{docker run}, a unit's C{ExecStart=}) with twistd's options and
  C{twistd beacon}'s; a synopsis's and an inline literal's C{--options}
  are options of the command they name. Every block that starts with a
  section of Beacon's configuration (C{[server]}...) is TOML that
  L{beacon.config.build_config} accepts; every C{from beacon... import}
  line imports.
- The event table of README's "Logs" names every stable event name the
  code logs, and no other; every project file README names exists.

Every wait is bounded (L{WAIT}, a safety net); nothing sleeps: the test
waits on Beacon's log lines and on the commands' own output and exit.
"""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

import beacon
from beacon.cli._main import build_parser, parse_args
from beacon.config import build_config
from peers.process import LISTENING, LOOPBACK_HTTP, STARTED, TwistdProcess, _die_with_parent

ROOT = Path(__file__).parent.parent
README = ROOT / "README.rst"
BIN = Path(sys.executable).parent

#: The longest any one thing here may take (a command, Beacon's start, a
#: line awaited): a safety net on a loaded machine, never a measure.
WAIT = 60.0

#: The programs a shell example's command lines start with.
COMMANDS = (
    "curl", "beacon", "twistd", "make", "printf", "kill", "export", "sudo", "docker",
    "podman", "useradd", "python3", "install", "systemctl", "journalctl", "sqlite3",
    "bench/run", ".venv/bin/python", "ssh",
)
_COMMAND = re.compile(r"(?:%s)(?=\s|$)" % "|".join(re.escape(c) for c in COMMANDS))
#: What Beacon prints (an error line), which is never a command.
_MESSAGE = re.compile(r"(?:twistd )?beacon: ")

#: README's example of a short id (what `beacon review list` shows).
SHORT_ID = "06h3fq2k1b9v"
#: The address the examples use for the Beacon that `make run` starts.
README_ADDRESS = "127.0.0.1:8080"
#: A task id, as receipts give them.
TASK_ID = re.compile(r"\b[0-9a-v]{36}\b")
#: Project paths README may name that the checkout does not hold until a
#: tool makes them.
GENERATED = {"bench/.work"}

_HEADING_RULE = re.compile(r"([=\-~^\"'`#*+])\1{2,}\Z")
_MARK = re.compile(r"\.\. test: (.*)\Z")
_SECTION = re.compile(r"\[([a-z_]+)\]\Z")


# README, read.


@dataclass
class Block:
    """One literal block of README."""

    line: int  #: the README line of its first line
    text: str  #: its lines, dedented
    mark: str | None  #: its C{.. test:} comment, if any
    section: str  #: the title of the section it is in

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    def where(self) -> str:
        return f"README.rst:{self.line} ({self.section})"


@dataclass
class Command:
    """One command of a shell example and the output README shows for it."""

    text: str
    line: int
    expected: list[str] = field(default_factory=list)

    @property
    def until_ctrl_c(self) -> bool:
        return "until Ctrl-C" in self.text


@dataclass
class Readme:
    blocks: list[Block]
    prose: str  #: README without its literal blocks
    sections: dict[str, str]  #: each section's title and text (blocks included)


def read_readme(text: str) -> Readme:
    """Find README's literal blocks, their marks and sections."""
    lines = text.split("\n")
    blocks: list[Block] = []
    prose: list[str] = []
    sections: dict[str, list[str]] = {}
    section = ""
    mark: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and _HEADING_RULE.match(following) and len(following) >= len(line.rstrip()):
            section = line.strip()
            sections[section] = []
        sections.setdefault(section, []).append(line)
        found = _MARK.match(line)
        if found is not None:
            assert mark is None, f"README.rst:{i + 1}: a test mark with no block after it"
            mark = (i + 1, found.group(1))
            prose.append(line)
            i += 1
            continue
        if mark is not None and line.strip() and line.strip() != "::":
            pytest.fail(
                f"README.rst:{mark[0]}: '.. test: {mark[1]}' must come right before a '::' line"
            )
        if line.rstrip().endswith("::") and not line.lstrip().startswith(".."):
            prose.append(line)
            indent = len(line) - len(line.lstrip())
            j = i + 1
            body: list[tuple[int, str]] = []
            while j < len(lines) and (
                not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
            ):
                body.append((j, lines[j]))
                j += 1
            while body and not body[-1][1].strip():
                body.pop()
            while body and not body[0][1].strip():
                body.pop(0)
            assert body, f"README.rst:{i + 1}: '::' with no literal block after it"
            cut = min(len(t) - len(t.lstrip()) for _, t in body if t.strip())
            blocks.append(
                Block(
                    line=body[0][0] + 1,
                    text="\n".join(t[cut:] for _, t in body),
                    mark=mark[1] if mark is not None else None,
                    section=section,
                )
            )
            sections[section].extend(t for _, t in body)
            mark = None
            i = j
            continue
        prose.append(line)
        i += 1
    assert mark is None, f"README.rst:{mark[0]}: a test mark with no block after it"
    return Readme(blocks, "\n".join(prose), {k: "\n".join(v) for k, v in sections.items()})


def is_command(line: str) -> bool:
    """Whether a block's line starts a command (not a message Beacon prints)."""
    return bool(_COMMAND.match(line)) and not _MESSAGE.match(line)


def _complete(text: str) -> bool:
    """Whether a command's text is whole: no trailing backslash, no open quote."""
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def commands(block: Block) -> list[Command]:
    """A shell example's commands and the output each shows; [] for another block."""
    found: list[Command] = []
    lines = block.lines
    i = 0
    while i < len(lines):
        line = lines[i]
        if is_command(line):
            start = i
            text = line
            while not _complete(text) and i + 1 < len(lines):
                i += 1
                text += "\n" + lines[i]
            assert _complete(text), f"README.rst:{block.line + start}: an unfinished command"
            found.append(Command(text, block.line + start))
        elif line.strip():
            if not found:
                return []
            found[-1].expected.append(line)
        i += 1
    return found


def argv(command: str) -> list[str]:
    """A command line's words, as the shell splits them (comments left out)."""
    return shlex.split(command.replace("\\\n", " "), comments=True)


TEXT = README.read_text()
DOC = read_readme(TEXT)
SHELL = [b for b in DOC.blocks if commands(b)]
RUN = [b for b in SHELL if b.mark is None]


def block_id(block: Block) -> str:
    return f"line{block.line}"


# The convention itself.


def test_marks_are_known_and_on_shell_examples() -> None:
    """Each `.. test:` mark is `skip: <why>` or `synopsis`, on a shell example; README has examples to run."""
    for block in DOC.blocks:
        if block.mark is None:
            continue
        assert block in SHELL, f"{block.where()}: '.. test: {block.mark}' on a block that is no shell example"
        assert block.mark == "synopsis" or re.fullmatch(r"skip: \S.*", block.mark), (
            f"{block.where()}: unknown mark '.. test: {block.mark}'"
            " (skip: <why>, or synopsis)"
        )
    assert len(RUN) >= 8, [b.where() for b in RUN]
    assert any("until Ctrl-C" in c.text for b in RUN for c in commands(b))


def test_reader_finds_what_readme_holds() -> None:
    """The reader sees README's blocks: the Start example runs, the error lines are output, the synopsis is marked."""
    start = next(b for b in RUN if b.section == "Start")
    found = commands(start)
    assert [argv(c.text)[0] for c in found] == ["curl"] * 5 + ["beacon"]
    assert found[2].expected[0].startswith('{"jsonrpc":"2.0"')
    configure = [b for b in DOC.blocks if b.section == "Configure"]
    assert any(b.text.startswith("twistd beacon: unknown key") and b not in SHELL for b in configure)
    synopses = [b for b in DOC.blocks if b.mark == "synopsis"]
    assert [b.section for b in synopses] == ["Talk to other agents", "Reading the inbox"]
    assert SHORT_ID in TEXT


# TOML: every configuration example is one Beacon accepts.

_SECTIONS = {"server", "store", "card", "limits", "operator", "websocket", "auth", "notify", "metrics"}
TOML = [b for b in DOC.blocks if (m := _SECTION.match(b.lines[0])) and m.group(1) in _SECTIONS]


def test_configuration_sections_are_known() -> None:
    """The sections the reader treats as Beacon's are the configuration's, and a block holding one starts with it (no TOML mixed with something else)."""
    empty = build_config({})
    for name in _SECTIONS:
        assert build_config({name: {}}) == empty
    for block in DOC.blocks:
        if any((m := _SECTION.match(line)) and m.group(1) in _SECTIONS for line in block.lines):
            assert block in TOML, f"{block.where()}: a Beacon section in a block that does not start with one"
    assert len(TOML) >= 5


@pytest.mark.parametrize("block", TOML, ids=block_id)
def test_toml_example_is_accepted(block: Block) -> None:
    """A configuration example is valid TOML, and build_config accepts it: no key, section or value README shows can drift."""
    values = tomllib.loads(block.text)
    build_config(values)


# Command lines: every one README shows parses.


def _subparser(parser: Any, words: list[str]) -> Any:
    """The parser of the command C{words} names (C{review list}...)."""
    if words[:2] == ["card", "keygen"]:
        # A command of its own, beside beacon card URL (beacon.cli._main.parse_args).
        from beacon.cli._keygen import keygen_parser

        return keygen_parser()
    for word in words:
        for action in parser._actions:
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict) and word in choices:
                parser = choices[word]
                break
        else:
            pytest.fail(f"beacon has no command {' '.join(words)!r}")
    return parser


def _commands_of(parser: Any) -> set[str]:
    names: set[str] = set()
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            names.update(choices)
    return names


TOP_COMMANDS = _commands_of(build_parser())


def beacon_argv(words: list[str]) -> list[str] | None:
    """The arguments of the C{beacon} command in a command line's words, if it runs one."""
    for i, word in enumerate(words[:-1]):
        if (word == "beacon" or word.endswith("/bin/beacon")) and (
            words[i + 1] in TOP_COMMANDS or words[i + 1] == "--version"
        ):
            # Up to a redirection or the next command of the line.
            rest = words[i + 1:]
            ends = [n for n, w in enumerate(rest) if w in SHELL_OPERATORS]
            return rest[: ends[0]] if ends else rest
    return None


#: What ends a command's words on a shell line (shlex keeps them as words).
SHELL_OPERATORS = frozenset({">", ">>", "|", "||", "&&", ";", "2>", "2>&1"})


def twistd_argv(words: list[str]) -> list[str] | None:
    """The arguments of twistd a command line runs, if it runs it (also through make run, docker run, a unit)."""
    if not words:
        return None
    first = words[0].removeprefix("ExecStart=")
    if first == "twistd" or first.endswith("/twistd"):
        return words[1:]
    if words[:2] == ["make", "run"]:
        extra = [w.removeprefix("ARGS=") for w in words[2:] if w.startswith("ARGS=")]
        return ["-n", "beacon", *(shlex.split(extra[0]) if extra else [])]
    if words[0] in ("docker", "podman") and words[1:2] == ["run"]:
        image = len(words) - 1 - words[::-1].index("beacon")
        return ["-n", "--pidfile=", "beacon", "--data", "/data", *words[image + 1:]]
    return None


def command_lines() -> Iterator[tuple[str, str]]:
    """Every command line of every block but the synopses, with its place."""
    for block in DOC.blocks:
        if block.mark == "synopsis":
            continue
        for command in commands(block):
            yield f"README.rst:{command.line}", command.text
        for number, line in enumerate(block.lines):
            if line.startswith("ExecStart="):
                yield f"README.rst:{block.line + number}", line


COMMAND_LINES = list(command_lines())
BEACON_LINES = [(w, t) for w, t in COMMAND_LINES if beacon_argv(argv(t)) is not None]
TWISTD_LINES = [(w, t) for w, t in COMMAND_LINES if twistd_argv(argv(t)) is not None]


@pytest.mark.parametrize(("where", "text"), BEACON_LINES, ids=[w for w, _ in BEACON_LINES])
def test_beacon_command_line_parses(where: str, text: str) -> None:
    """Every beacon command line README shows is one beacon.cli's parser accepts (its flags and checks)."""
    args = beacon_argv(argv(text))
    assert args is not None
    errors = StringIO()
    try:
        with redirect_stderr(errors):
            parse_args(args)
    except SystemExit as e:
        if args != ["--version"] or e.code:
            pytest.fail(f"{where}: beacon refuses {' '.join(args)}: {errors.getvalue()}")
    # argparse takes a unique prefix of an option too: README spells each whole.
    parser: Any = build_parser()
    known = set(parser.option_names)
    if args[:2] == ["card", "keygen"]:
        known |= _subparser(parser, args[:2]).option_names
    for word in args:
        if word in _commands_of(parser):
            parser = _subparser(parser, [word])
            known |= parser.option_names
    for word in args:
        if word.startswith("--"):
            assert word.split("=")[0] in known, f"{where}: {word} is not an option's whole name"


class FlagsOnly:
    """
    C{twistd beacon}'s options without their checks of the values (a
    configuration file in /etc, TLS keys): the flags alone.
    """

    @staticmethod
    def parse(args: list[str]) -> None:
        from twisted.python import usage

        from beacon.tap import Options

        class Flags(Options):
            def postOptions(self) -> None:
                pass

        try:
            Flags().parseOptions(args)
        except usage.UsageError as e:
            raise AssertionError(str(e)) from None


def _split_twistd(args: list[str]) -> tuple[list[str], list[str] | None]:
    """twistd's own arguments, and twistd beacon's (None without the plugin)."""
    if "beacon" not in args:
        return args, None
    at = args.index("beacon")
    return args[:at], args[at + 1:]


@pytest.mark.parametrize(("where", "text"), TWISTD_LINES, ids=[w for w, _ in TWISTD_LINES])
def test_twistd_command_line_parses(where: str, text: str) -> None:
    """Every twistd command line README shows has options twistd takes, and twistd beacon's options are its own."""
    from twisted.scripts.twistd import ServerOptions

    args = twistd_argv(argv(text))
    assert args is not None
    own, plugin = _split_twistd(args)
    ServerOptions().parseOptions(own)
    # getopt takes a unique prefix of a long option too: README spells each whole.
    _check_twistd_synopsis(" ".join(["twistd", *args]), where)
    if plugin is not None:
        try:
            FlagsOnly.parse(plugin)
        except AssertionError as e:
            pytest.fail(f"{where}: twistd beacon refuses {' '.join(plugin)}: {e}")
    elif "-y" not in "".join(own) and "--python" not in own:
        pytest.fail(f"{where}: a twistd line that runs neither beacon nor a .tac file")


def test_readme_unit_line_is_the_unit_with_the_json_logger() -> None:
    """The ExecStart README gives for JSON logs is etc/beacon.service's, with --logger before beacon."""
    unit = next(
        line for line in (ROOT / "etc" / "beacon.service").read_text().splitlines()
        if line.startswith("ExecStart=")
    )
    shown = [t for _, t in COMMAND_LINES if t.startswith("ExecStart=")]
    assert shown == [unit.replace(" beacon ", " --logger beacon.logs.json beacon ", 1)]


def _options_named(text: str) -> list[str]:
    return re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)


def _check_beacon_synopsis(line: str, where: str) -> None:
    words = line.split("#")[0].split()
    assert words[0] == "beacon", f"{where}: {line}"
    path: list[str] = []
    for word in words[1:]:
        if word.startswith(("-", "[", "<")) or word.isupper() or word == "...":
            break
        path.append(word)
    for variant in _variants(path):
        parser: Any = _subparser(build_parser(), variant) if variant else build_parser()
        known = set(parser.option_names) | {"--help", "-h"}
        for option in _options_named(" ".join(words)):
            assert option in known, f"{where}: beacon {' '.join(variant)} has no option {option}"


def _variants(path: list[str]) -> list[list[str]]:
    """C{accept|reject} in a synopsis is two commands."""
    variants: list[list[str]] = [[]]
    for word in path:
        variants = [v + [choice] for v in variants for choice in word.split("|")]
    return variants


def _check_twistd_synopsis(text: str, where: str) -> None:
    from twisted.scripts.twistd import ServerOptions

    from beacon.tap import Options

    own, plugin = _split_twistd(text.split()[1:])
    for args, options in ((own, ServerOptions()), (plugin or [], Options())):
        long = {o.rstrip("=") for o in options.longOpt}
        short = options.shortOpt.replace(":", "")
        for word in args:
            if word.startswith("--"):
                assert word[2:].split("=")[0] in long, f"{where}: no option {word} in {text!r}"
            elif re.fullmatch(r"-[a-zA-Z]+", word):
                assert set(word[1:]) <= set(short), f"{where}: no option {word} in {text!r}"


def test_synopses_and_inline_commands_name_known_options() -> None:
    """A synopsis block, and each inline literal that is a beacon or twistd command, names only commands and options that exist."""
    checked = 0
    for block in DOC.blocks:
        if block.mark != "synopsis":
            continue
        for number, line in enumerate(block.lines):
            _check_beacon_synopsis(line, f"README.rst:{block.line + number}")
            checked += 1
    for literal in re.findall(r"``(.+?)``", DOC.prose, re.DOTALL):
        text = " ".join(literal.split())
        if text.startswith("beacon ") or text == "beacon":
            _check_beacon_synopsis(text, f"README.rst: ``{text}``")
            checked += 1
        elif text.startswith("twistd ") and " beacon" in f" {text} ":
            _check_twistd_synopsis(text, f"README.rst: ``{text}``")
            checked += 1
    assert checked >= 10


def test_door_lists_are_beacons() -> None:
    """Wherever README lists the doors (``--door``, the metrics' ``door`` label), it lists beacon.protocol.DOORS, in order."""
    from beacon.protocol import DOORS

    text = " ".join(TEXT.split())
    listed = r" \(((?:``[^`]+``,?\s*)+)\)"
    lists = re.findall(r"``--door``" + listed, text)
    lists += re.findall(r"``beacon_submissions_stored_total`` counter ``door``" + listed, text)
    assert len(lists) == 2, lists
    for found in lists:
        assert re.findall(r"``([^`]+)``", found) == list(DOORS), found


# Python: the names README gives exist.


def test_python_examples_import() -> None:
    """Every `from beacon... import` line of README's Python examples imports."""
    imports = [
        line.strip()
        for block in DOC.blocks
        for line in block.lines
        if re.match(r"\s*(from beacon[\w.]* import |import beacon)", line)
    ]
    assert len(imports) >= 5
    for line in imports:
        exec(compile(ast.parse(line), "README.rst", "exec"), {})


def test_dotted_names_resolve() -> None:
    """Every inline beacon.x.y README names, where x is a module of the package, is a module or a name in one."""
    modules = {m.name for m in pkgutil.iter_modules(beacon.__path__)}
    names = {
        literal
        for literal in re.findall(r"``(beacon(?:\.\w+)+)``", DOC.prose)
        if literal.split(".")[1] in modules
    }
    assert len(names) >= 5
    for name in sorted(names):
        parts = name.split(".")
        found: Any = None
        for length in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:length]))
            except ImportError:
                continue
            for attribute in parts[length:]:
                found = getattr(found, attribute, None)
            break
        assert found is not None, f"README names {name}, which does not exist"


def test_project_files_named_exist() -> None:
    """Every file or directory of the project README names is there."""
    named = set()
    for literal in re.findall(r"``(.+?)``", TEXT, re.DOTALL):
        text = " ".join(literal.split())
        if (
            re.fullmatch(r"(?:beacon|etc|docs|bench|tests|\.ci)/[\w./-]*", text)
            or text in ("Dockerfile", "Makefile", "LICENSE")
        ) and text not in GENERATED:
            named.add(text)
    assert len(named) >= 10
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert missing == []


# The log table: complete, and nothing in it that the code does not log.

_EVENT = re.compile(r"""[fr]?["']((?:[a-z0-9_]+|\{what\})(?:\.[a-z0-9_]+)+):""")
_LISTENERS = re.compile(r"""Listeners\((?:[^()]|\([^()]*\))*?["']([a-z]+)["']""")


def logged_events() -> set[str]:
    """The stable event names in beacon's source (a listener's as each kind of listener logs it)."""
    names: set[str] = set()
    kinds: set[str] = set()
    for path in (ROOT / "beacon").rglob("*.py"):
        source = path.read_text()
        names.update(_EVENT.findall(source))
        kinds.update(_LISTENERS.findall(source))
    assert kinds >= {"http", "ws"}, kinds
    for name in [n for n in names if n.startswith("{what}.")]:
        names.remove(name)
        names.update(name.replace("{what}", kind) for kind in kinds)
    return names


def test_log_table_names_every_event() -> None:
    """README's Logs table names every stable event the code logs, and only those."""
    logs = DOC.sections["Logs"]
    table = set(re.findall(r"^``([a-z0-9_.]+)``", logs, re.MULTILINE))
    code = logged_events()
    assert len(code) >= 40
    assert sorted(code - table) == [], "events the code logs that README's Logs table lacks"
    assert sorted(table - code) == [], "events README's Logs table names that the code does not log"


# The examples, run.


def matches(expected: list[str], actual: str) -> bool:
    """
    Whether C{actual} is the output C{expected} shows: C{...} matches any
    text, and a run of whitespace any run of whitespace (none, next to a
    C{...}).
    """
    pieces = "\n".join(expected).strip().split("...")
    pattern = []
    for number, piece in enumerate(pieces):
        core = piece.strip()
        if piece[: len(piece) - len(piece.lstrip())]:
            pattern.append(r"\s*")
        pattern.extend(r"\s+" if part.isspace() else re.escape(part) for part in re.split(r"(\s+)", core) if part)
        if core and piece[len(piece.rstrip()):]:
            pattern.append(r"\s*")
        if number < len(pieces) - 1:
            pattern.append(".*?")
    return re.fullmatch("".join(pattern), actual.strip(), re.DOTALL) is not None


def test_matches() -> None:
    """The output comparison: ellipsis, loose whitespace, nothing else."""
    assert matches(["task ... TASK_STATE_SUBMITTED"], "task 06h TASK_STATE_SUBMITTED\n")
    assert matches(['{"id":"...","status":{...}}'], '{"id":"x","status":{"a":1}}')
    assert matches([": stream open", "..."], ": stream open\n\n")
    assert matches(["ID   STATE", "...  submitted  ..."], "ID STATE\n06h3  submitted  2026")
    assert matches(["a", "...", "b ..."], "a\nx\ny\nb 1.0\n")
    assert not matches(["task ... SUBMITTED"], "task x COMPLETED")
    assert not matches(["a b"], "ab")
    assert not matches(["{}"], "{} and more")


class Output:
    """A process's output (both streams), read in a thread so that it can be awaited, bounded."""

    def __init__(self, pipe: Any) -> None:
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def wait_first_line(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._lines and not self._done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no output within {timeout} s")
                self._changed.wait(remaining)

    def text(self) -> str:
        self._thread.join(WAIT)
        with self._changed:
            return "".join(self._lines)


class Session:
    """README's examples run in order, as a reader would, against one Beacon."""

    def __init__(self, cwd: Path, port: int) -> None:
        self.cwd = cwd
        self.port = port
        self.task_id: str | None = None
        self.daemons: list[tuple[int, int]] = []  # (pid, pidfd)
        curl_home = cwd / "curl-home"
        curl_home.mkdir()
        # In a terminal curl shows no progress meter; through a pipe it
        # would, on the output compared: say so as a terminal would.
        (curl_home / ".curlrc").write_text("silent\nshow-error\n")
        self.env = dict(
            os.environ,
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            CURL_HOME=str(curl_home),
            COLUMNS="120",
        )
        self.env.pop("BEACON_CONFIG", None)

    def substitute(self, text: str, where: str, command: bool) -> str:
        text = text.replace(README_ADDRESS, f"127.0.0.1:{self.port}")
        if not command:
            return text
        text = re.sub(r"\btcp:\d+:", "tcp:0:", text)
        if re.search(r"\bID\b", text) or SHORT_ID in text:
            assert self.task_id is not None, f"{where}: ID before any example showed a task id"
            text = re.sub(r"\bID\b", self.task_id, text).replace(SHORT_ID, self.task_id[:12])
        return text

    def run(self, command: Command) -> None:
        where = f"README.rst:{command.line}"
        text = self.substitute(command.text, where, command=True)
        if command.until_ctrl_c:
            code, output = self._until_ctrl_c(text, where)
            assert code in (0, -signal.SIGINT, 128 + signal.SIGINT), (
                f"{where}: {text}\nstopped with SIGINT, it exited {code}:\n{output}"
            )
        else:
            try:
                done = subprocess.run(
                    ["bash", "-c", text],
                    cwd=self.cwd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=WAIT,
                    preexec_fn=_die_with_parent,
                )
            except subprocess.TimeoutExpired as e:
                pytest.fail(f"{where}: {text}\ndid not finish within {WAIT} s: {e.output!r}")
            code, output = done.returncode, done.stdout
            assert code == 0, f"{where}: {text}\nexited {code}:\n{output}"
            self._note_daemon(text)
        if command.expected:
            expected = [self.substitute(line, where, command=False) for line in command.expected]
            assert matches(expected, output), (
                f"{where}: {text}\nprinted:\n{output}\nwhere README shows:\n" + "\n".join(expected)
            )
        found = TASK_ID.search(output)
        if found is not None:
            self.task_id = found.group(0)

    def _until_ctrl_c(self, text: str, where: str) -> tuple[int, str]:
        process = subprocess.Popen(
            ["bash", "-c", text],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        output = Output(process.stdout)
        try:
            output.wait_first_line(WAIT)
            os.killpg(process.pid, signal.SIGINT)
            code = process.wait(WAIT)
        except (AssertionError, subprocess.TimeoutExpired) as e:
            pytest.fail(f"{where}: {text}\n{e}: {output.text()!r}")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(WAIT)
        return code, output.text()

    def _note_daemon(self, text: str) -> None:
        """After a twistd daemon's start (it returns once started), hold on to its pid."""
        args = twistd_argv(argv(text))
        if args is None or "-n" in args or "--nodaemon" in args:
            return
        own, _ = _split_twistd(args)
        pidfiles = [a.split("=", 1)[1] for a in own if a.startswith("--pidfile=")]
        pid = int((self.cwd / (pidfiles[0] if pidfiles else "twistd.pid")).read_text())
        self.daemons.append((pid, os.pidfd_open(pid)))

    def close(self) -> None:
        """Stop the daemons the examples left running; wait for every one to end."""
        for pid, pidfd in self.daemons:
            try:
                readable, _, _ = select.select([pidfd], [], [], 0)
                if not readable:
                    signal.pidfd_send_signal(pidfd, signal.SIGTERM)
                    readable, _, _ = select.select([pidfd], [], [], WAIT)
                    if not readable:
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                        raise AssertionError(f"the daemon {pid} did not stop within {WAIT} s")
            finally:
                os.close(pidfd)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waiting on daemons needs pidfd_open")
@pytest.mark.skipif(subprocess.run(["which", "curl"], capture_output=True).returncode != 0, reason="no curl")
def test_examples_run(tmp_path: Path) -> None:
    """README's shell examples, run in order against a real twistd -n beacon: each command exits 0 and prints what README shows."""
    beacon_process = TwistdProcess(["--data", "beacon-data", "--http", LOOPBACK_HTTP], tmp_path)
    session: Session | None = None
    try:
        port = int(beacon_process.wait_for(LISTENING, WAIT).group(2))
        beacon_process.wait_for(STARTED, WAIT)
        beacon_process.wait_for(r"health\.ready:", WAIT)
        session = Session(tmp_path, port)
        ran = 0
        for block in RUN:
            for command in commands(block):
                session.run(command)
                ran += 1
        assert ran >= 25
        session.close()
        session = None
        beacon_process.stop_cleanly()
        assert "Traceback" not in beacon_process.output, beacon_process.output
    finally:
        if session is not None:
            session.close()
        beacon_process.close()
