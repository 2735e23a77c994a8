"""
The manual (README.rst and docs/), checked so that it cannot drift from the
code: its examples run, page by page, against a real C{twistd -n beacon}
(C{tests/docs_examples.py} states the convention and runs them); every
C{beacon} and C{twistd} command line it shows parses; every TOML example is
a configuration Beacon accepts; its Python imports import and the dotted
names it gives resolve; the project files it names exist; the log events
table of C{docs/reference/logs.rst} names every stable event the code logs,
and no other; wherever it lists the doors, it lists
L{beacon.protocol.DOORS}. C{make docs} builds it with warnings as errors,
and the configuration reference it renders names every key of every
section; the changelog's news fragments build.
"""

from __future__ import annotations

import ast
import html
import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import redirect_stderr
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

import beacon
from beacon.cli._main import build_parser, parse_args
from beacon.config import build_config
from docs_examples import (
    BIN,
    GENERATED,
    PAGES,
    ROOT,
    SHORT_ID,
    SHELL_OPERATORS,
    Block,
    Page,
    _split_twistd,
    argv,
    commands,
    matches,
    read_page,
    run_page,
    runnable,
    shell_examples,
    twistd_argv,
)

_SECTION = re.compile(r"\[([a-z_]+)\]\Z")

DOCS = [read_page(path) for path in PAGES]
BY_PATH = {page.path: page for page in DOCS}
README = BY_PATH["README.rst"]
BLOCKS = [block for page in DOCS for block in page.blocks]
SHELL = [block for page in DOCS for block in shell_examples(page)]
#: The pages with examples to run, each against a Beacon of its own.
RUN_PAGES = [page for page in DOCS if runnable(page)]


def block_id(block: Block) -> str:
    return f"{block.page}:{block.line}"


# The convention itself.


def test_marks_are_known_and_on_shell_examples() -> None:
    """Each `.. test:` mark is `skip: <why>` or `synopsis`, on a shell example; the manual has examples to run."""
    for block in BLOCKS:
        if block.mark is None:
            continue
        assert block in SHELL, f"{block.where()}: '.. test: {block.mark}' on a block that is no shell example"
        assert block.mark == "synopsis" or re.fullmatch(r"skip: \S.*", block.mark), (
            f"{block.where()}: unknown mark '.. test: {block.mark}'"
            " (skip: <why>, or synopsis)"
        )
    assert sum(len(runnable(page)) for page in DOCS) >= 25
    assert any("until Ctrl-C" in c.text for page in DOCS for b in runnable(page) for c in commands(b))


def test_reader_finds_what_the_manual_holds() -> None:
    """The reader sees the pages' blocks: README's and the tutorial's examples run, error lines are output, the synopses are marked."""
    found = [c for b in runnable(README) for c in commands(b)]
    assert [argv(c.text)[0] for c in found][-2:] == ["curl", "beacon"]
    tutorial = [c for b in runnable(BY_PATH["docs/tutorial.rst"]) for c in commands(b)]
    assert tutorial[1].expected[0].startswith('{"jsonrpc":"2.0"')
    configuration = BY_PATH["docs/reference/configuration.rst"]
    assert any(b.text.startswith("twistd beacon: unknown key") and b not in SHELL for b in configuration.blocks)
    synopses = [b.page for b in BLOCKS if b.mark == "synopsis"]
    assert synopses == ["docs/howto/client.rst", "docs/howto/read.rst"]
    assert SHORT_ID in BY_PATH["docs/howto/read.rst"].text


# TOML: every configuration example is one Beacon accepts.

def _sections() -> set[str]:
    from beacon.config._sections import SECTIONS

    return set(SECTIONS)


TOML = [b for b in BLOCKS if (m := _SECTION.match(b.lines[0])) and m.group(1) in _sections()]


def test_configuration_sections_are_known() -> None:
    """A block holding one of the configuration's sections starts with it (no TOML mixed with something else)."""
    for block in BLOCKS:
        if any((m := _SECTION.match(line)) and m.group(1) in _sections() for line in block.lines):
            assert block in TOML, f"{block.where()}: a Beacon section in a block that does not start with one"
    assert len(TOML) >= 5


@pytest.mark.parametrize("block", TOML, ids=block_id)
def test_toml_example_is_accepted(block: Block) -> None:
    """A configuration example is valid TOML, and build_config accepts it: no key, section or value the manual shows can drift."""
    values = tomllib.loads(block.text)
    build_config(values)


# Command lines: every one the manual shows parses.

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




def command_lines() -> Iterator[tuple[str, str]]:
    """Every command line of every block but the synopses, with its place."""
    for block in BLOCKS:
        if block.mark == "synopsis":
            continue
        for command in commands(block):
            yield f"{block.page}:{command.line}", command.text
        for number, line in enumerate(block.lines):
            if line.startswith("ExecStart="):
                yield f"{block.page}:{block.line + number}", line


COMMAND_LINES = list(command_lines())
BEACON_LINES = [(w, t) for w, t in COMMAND_LINES if beacon_argv(argv(t)) is not None]
TWISTD_LINES = [(w, t) for w, t in COMMAND_LINES if twistd_argv(argv(t)) is not None]


@pytest.mark.parametrize(("where", "text"), BEACON_LINES, ids=[w for w, _ in BEACON_LINES])
def test_beacon_command_line_parses(where: str, text: str) -> None:
    """Every beacon command line the manual shows is one beacon.cli's parser accepts (its flags and checks)."""
    args = beacon_argv(argv(text))
    assert args is not None
    errors = StringIO()
    try:
        with redirect_stderr(errors):
            parse_args(args)
    except SystemExit as e:
        if args != ["--version"] or e.code:
            pytest.fail(f"{where}: beacon refuses {' '.join(args)}: {errors.getvalue()}")
    # argparse takes a unique prefix of an option too: the manual spells each whole.
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



@pytest.mark.parametrize(("where", "text"), TWISTD_LINES, ids=[w for w, _ in TWISTD_LINES])
def test_twistd_command_line_parses(where: str, text: str) -> None:
    """Every twistd command line the manual shows has options twistd takes, and twistd beacon's options are its own."""
    from twisted.scripts.twistd import ServerOptions

    args = twistd_argv(argv(text))
    assert args is not None
    own, plugin = _split_twistd(args)
    ServerOptions().parseOptions(own)
    # getopt takes a unique prefix of a long option too: the manual spells each whole.
    _check_twistd_synopsis(" ".join(["twistd", *args]), where)
    if plugin is not None:
        try:
            FlagsOnly.parse(plugin)
        except AssertionError as e:
            pytest.fail(f"{where}: twistd beacon refuses {' '.join(plugin)}: {e}")
    elif "-y" not in "".join(own) and "--python" not in own:
        pytest.fail(f"{where}: a twistd line that runs neither beacon nor a .tac file")


def test_unit_line_is_the_unit_with_the_json_logger() -> None:
    """The ExecStart the manual gives for JSON logs is etc/beacon.service's, with --logger before beacon."""
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
    for block in BLOCKS:
        if block.mark != "synopsis":
            continue
        for number, line in enumerate(block.lines):
            _check_beacon_synopsis(line, f"{block.page}:{block.line + number}")
            checked += 1
    for page in DOCS:
        for literal in re.findall(r"``(.+?)``", page.prose, re.DOTALL):
            text = " ".join(literal.split())
            if text.startswith("beacon ") or text == "beacon":
                _check_beacon_synopsis(text, f"{page.path}: ``{text}``")
                checked += 1
            elif text.startswith("twistd ") and " beacon" in f" {text} ":
                _check_twistd_synopsis(text, f"{page.path}: ``{text}``")
                checked += 1
    assert checked >= 10


def test_door_lists_are_beacons() -> None:
    """Wherever the manual lists the doors (``--door``, the metrics' ``door`` label), it lists beacon.protocol.DOORS, in order."""
    from beacon.protocol import DOORS

    text = " ".join(" ".join(page.text for page in DOCS).split())
    listed = r" \(((?:``[^`]+``,?\s*)+)\)"
    lists = re.findall(r"``--door``" + listed, text)
    lists += re.findall(r"``beacon_submissions_stored_total`` counter ``door``" + listed, text)
    assert len(lists) == 2, lists
    for found in lists:
        assert re.findall(r"``([^`]+)``", found) == list(DOORS), found


# Python: the names the manual gives exist.


def test_python_examples_import() -> None:
    """Every `from beacon... import` line of the manual's Python examples imports."""
    imports = [
        line.strip()
        for block in BLOCKS
        for line in block.lines
        if re.match(r"\s*(from beacon[\w.]* import |import beacon)", line)
    ]
    assert len(imports) >= 5
    for line in imports:
        exec(compile(ast.parse(line), "<the manual>", "exec"), {})


def test_dotted_names_resolve() -> None:
    """Every inline beacon.x.y the manual names, where x is a module of the package, is a module or a name in one."""
    modules = {m.name for m in pkgutil.iter_modules(beacon.__path__)}
    names = {
        literal
        for literal in re.findall(r"``(beacon(?:\.\w+)+)``", "\n".join(page.prose for page in DOCS))
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
        assert found is not None, f"the manual names {name}, which does not exist"


def test_project_files_named_exist() -> None:
    """Every file or directory of the project the manual names is there."""
    named = set()
    for literal in re.findall(r"``(.+?)``", "\n".join(page.text for page in DOCS), re.DOTALL):
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
    """The log events table (docs/reference/logs.rst) names every stable event the code logs, and only those."""
    logs = BY_PATH["docs/reference/logs.rst"].sections["Log events"]
    table = set(re.findall(r"^``([a-z0-9_.]+)``", logs, re.MULTILINE))
    code = logged_events()
    assert len(code) >= 40
    assert sorted(code - table) == [], "events the code logs that the log events table lacks"
    assert sorted(table - code) == [], "events the log events table names that the code does not log"


# The examples, run.


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


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waiting on daemons needs pidfd_open")
@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")
@pytest.mark.parametrize("page", RUN_PAGES, ids=[page.path for page in RUN_PAGES])
def test_examples_run(page: Page, tmp_path: Path) -> None:
    """A page's shell examples, run in order against a real twistd -n beacon of the page's own: each command exits 0 and prints what the page shows."""
    assert run_page(page, tmp_path) >= 1


# The manual, built.


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The manual built as `make docs` builds it (warnings are errors)."""
    out = tmp_path_factory.mktemp("docs")
    done = subprocess.run(
        [str(BIN / "sphinx-build"), "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _text_of_html(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


def _text_of(page: Path) -> str:
    return _text_of_html(page.read_text())


def test_the_manual_builds_with_every_page_in_it(built: Path) -> None:
    """sphinx-build -W builds the manual, and every page of docs/ is in it."""
    for page in DOCS:
        if page.path.startswith("docs/"):
            name = Path(page.path).relative_to("docs").with_suffix(".html")
            assert (built / name).exists(), name


def test_configuration_reference_names_every_key(built: Path) -> None:
    """The rendered configuration reference names every key of every section, each under its section, with its default."""
    from beacon.config._sections import declared_keys

    page = (built / "reference" / "configuration.html").read_text()
    found = 0
    for section, name, _, _ in declared_keys():
        anchor = f'id="config-{section}-{name}"'.replace("_", "-")
        assert anchor in page, f"[{section}] {name} is not in the configuration reference"
        after = " ".join(_text_of_html(page[page.index(anchor):][:3000]).split())
        assert re.match(rf"\S*> {re.escape(name)} \w.*?\s?; default ", after), (
            f"[{section}] {name}: no type and default in the configuration reference: {after[:200]}"
        )
        found += 1
    assert found >= 50


def test_reference_configuration_file_agrees_with_the_declarations() -> None:
    """etc/beacon.toml, the commented reference file, has exactly the declared keys, each in its section."""
    from beacon.config._sections import SECTIONS

    where = ""
    named: dict[str, set[str]] = {}
    for line in (ROOT / "etc" / "beacon.toml").read_text().splitlines():
        found = re.fullmatch(r"#? ?\[([a-z_]+)\]", line.strip())
        if found is not None:
            where = found.group(1)
            continue
        key = re.fullmatch(r"(?:# )?([a-z_]+) = .*", line)
        if key is not None and where:
            named.setdefault(where, set()).add(key.group(1))
    assert named == SECTIONS


def test_command_reference_has_every_command(built: Path) -> None:
    """The rendered command reference has each beacon command's help."""
    text = _text_of(built / "reference" / "command.html")
    for command in ("beacon review list", "beacon review web", "beacon card keygen", "beacon db upgrade", "beacon send"):
        assert f"usage: {command}" in text, command


def test_news_fragments_build(tmp_path: Path) -> None:
    """towncrier builds a draft of the next release's notes from newsfragments/."""
    done = subprocess.run(
        [str(BIN / "towncrier"), "build", "--draft", "--version", "99.0.0", "--dir", str(ROOT)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Beacon 99.0.0" in done.stdout
    assert "beacon.bindings.operator" in done.stdout


def test_embedding_examples_run(tmp_path: Path) -> None:
    """
    The embedding how-to's Python examples run, in the page's order and in
    one namespace, as an application's .tac file would hold them: the names
    they take from such a file (C{reactor}, C{application}, C{root}) are
    given, and C{/var/lib/beacon} is a temporary directory. They build
    Beacon's service tree and resources; nothing is started or listens.
    """
    from twisted.application.service import Application, IServiceCollection
    from twisted.internet.testing import MemoryReactorClock
    from twisted.web.resource import Resource

    from beacon.bindings.http import BeaconSite

    blocks = [block for block in BLOCKS if block.page == "docs/howto/embed.rst" and "import" in block.text]
    assert len(blocks) == 2, [block.where() for block in blocks]
    application = Application("the manual's embedding examples")
    root = Resource()
    namespace: dict[str, Any] = {"reactor": MemoryReactorClock(), "application": application, "root": root}
    for block in blocks:
        code = block.text.replace("/var/lib/beacon", str(tmp_path))
        exec(compile(code, block.where(), "exec"), namespace)
    assert isinstance(namespace["site"], BeaconSite)
    services = list(IServiceCollection(application))
    assert len(services) == 3, services  # makeService's tree, the store, the WebSocket service
    assert not any(service.running for service in services)
    assert {b".well-known", b"a2a"} <= set(root.children), sorted(root.children)
