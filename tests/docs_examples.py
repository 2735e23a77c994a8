"""
The manual's examples, read and run, so that they cannot drift from the code.

README.rst and every page of the manual (C{docs/**/*.rst}) are read as
reStructuredText by a small reader of its own (L{read_page}): their literal
blocks (a paragraph ending in C{::}, or a C{::} line, then the indented
lines) and their inline literals (C{``...``}). Blocks of a C{code-block}
directive (C{.. code-block:: json}) are shown, never run: the manual writes
every shell example, TOML file and Python example as a C{::} literal block,
and keeps C{code-block} for documents that are only shown (JSON, HTTP). The
convention, which C{docs/develop.rst} states too:

- A literal block is a I{shell example} when one of its lines starts with
  a command (L{COMMANDS}: C{curl}, C{beacon}, C{twistd}...). A line that
  starts with C{beacon: } or C{twistd beacon: } is a message Beacon
  prints, never a command. A command goes on while its line ends with
  C{\\} or a quote is open. The lines after a command, up to the next
  one, are what it prints.
- Each page's shell examples run in the page's order, against one
  C{twistd -n beacon} of the page's own, started on a free loopback port,
  with its data in C{beacon-data} of a temporary working directory (where
  C{make run} puts it), C{.venv/bin} on C{PATH} and standard input not a
  terminal (L{Session}). Each command runs in C{bash -c} and must exit 0;
  where the page shows output, it must match (L{matches}: C{...} matches
  any text, whitespace is compared loosely, as doctest's ELLIPSIS and
  NORMALIZE_WHITESPACE do). Before it runs, C{127.0.0.1:8080} becomes the
  port of the Beacon started for the page (in the output shown too), an
  endpoint's C{tcp:PORT:} becomes C{tcp:0:} (a port the kernel picks),
  C{ID} the first task id (36 base32hex digits) of the latest output that
  showed one, and L{SHORT_ID} its first 12 characters. A command whose
  comment says C{until Ctrl-C} is stopped with SIGINT, to its process
  group as a terminal does, once it printed its first line; it must then
  exit 0 or die of that signal. A C{twistd} daemon an example starts is
  waited for (and stopped, if the example did not) at the end.
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
  line imports (C{tests/test_docs.py} holds those checks).

Every wait is bounded (L{WAIT}, a safety net); nothing sleeps: a page's
run waits on Beacon's log lines and on the commands' own output and exit.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from peers.process import _die_with_parent

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent

#: The pages read: README.rst, then the manual's, in a stable order.
PAGES = [ROOT / "README.rst"] + sorted(
    p for p in (ROOT / "docs").rglob("*.rst") if "_ext" not in p.parts
)

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

#: The manual's example of a short id (what `beacon review list` shows).
SHORT_ID = "06h3fq2k1b9v"
#: The address the examples use for the Beacon that `make run` starts.
EXAMPLE_ADDRESS = "127.0.0.1:8080"
#: A task id, as receipts give them.
TASK_ID = re.compile(r"\b[0-9a-v]{36}\b")
#: Project paths the manual may name that the checkout does not hold until a
#: tool makes them.
GENERATED = {"bench/.work"}

_HEADING_RULE = re.compile(r"([=\-~^\"'`#*+])\1{2,}\Z")
_MARK = re.compile(r"\.\. test: (.*)\Z")
_SECTION = re.compile(r"\[([a-z_]+)\]\Z")



# A page, read.


@dataclass
class Block:
    """One literal block of a page."""

    page: str  #: the page's path, relative to the checkout
    line: int  #: the page's line of its first line
    text: str  #: its lines, dedented
    mark: str | None  #: its C{.. test:} comment, if any
    section: str  #: the title of the section it is in

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.section})"


@dataclass
class Command:
    """One command of a shell example and the output the page shows for it."""

    text: str
    line: int
    expected: list[str] = field(default_factory=list)
    page: str = ""  #: the page's path, relative to the checkout

    @property
    def until_ctrl_c(self) -> bool:
        return "until Ctrl-C" in self.text


@dataclass
class Page:
    """A page of the manual, read."""

    path: str  #: relative to the checkout
    text: str
    blocks: list[Block]
    prose: str  #: the page without its literal blocks
    sections: dict[str, str]  #: each section's title and text (blocks included)


def read_page(path: Path) -> Page:
    """Find a page's literal blocks, their marks and sections."""
    name = str(path.relative_to(ROOT))
    text = path.read_text()
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
            assert mark is None, f"{name}:{i + 1}: a test mark with no block after it"
            mark = (i + 1, found.group(1))
            prose.append(line)
            i += 1
            continue
        if mark is not None and line.strip() and line.strip() != "::":
            pytest.fail(
                f"{name}:{mark[0]}: '.. test: {mark[1]}' must come right before a '::' line"
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
            assert body, f"{name}:{i + 1}: '::' with no literal block after it"
            cut = min(len(t) - len(t.lstrip()) for _, t in body if t.strip())
            blocks.append(
                Block(
                    page=name,
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
    assert mark is None, f"{name}:{mark[0]}: a test mark with no block after it"
    return Page(name, text, blocks, "\n".join(prose), {k: "\n".join(v) for k, v in sections.items()})


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
            assert _complete(text), f"{block.page}:{block.line + start}: an unfinished command"
            found.append(Command(text, block.line + start, page=block.page))
        elif line.strip():
            if not found:
                return []
            found[-1].expected.append(line)
        i += 1
    return found


def argv(command: str) -> list[str]:
    """A command line's words, as the shell splits them (comments left out)."""
    return shlex.split(command.replace("\\\n", " "), comments=True)



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



def _split_twistd(args: list[str]) -> tuple[list[str], list[str] | None]:
    """twistd's own arguments, and twistd beacon's (None without the plugin)."""
    if "beacon" not in args:
        return args, None
    at = args.index("beacon")
    return args[:at], args[at + 1:]



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
    """A page's examples run in order, as a reader would, against one Beacon."""

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
        text = text.replace(EXAMPLE_ADDRESS, f"127.0.0.1:{self.port}")
        if not command:
            return text
        text = re.sub(r"\btcp:\d+:", "tcp:0:", text)
        if re.search(r"\bID\b", text) or SHORT_ID in text:
            assert self.task_id is not None, f"{where}: ID before any example showed a task id"
            text = re.sub(r"\bID\b", self.task_id, text).replace(SHORT_ID, self.task_id[:12])
        return text

    def run(self, command: Command) -> None:
        where = f"{command.page}:{command.line}"
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
                f"{where}: {text}\nprinted:\n{output}\nwhere the page shows:\n" + "\n".join(expected)
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


def run_page(page: Page, cwd: Path) -> int:
    """
    Run a page's shell examples in order against a C{twistd -n beacon} of
    their own, in C{cwd}; the number of commands run.
    """
    from peers.process import LISTENING, LOOPBACK_HTTP, STARTED, TwistdProcess

    beacon_process = TwistdProcess(["--data", "beacon-data", "--http", LOOPBACK_HTTP], cwd)
    session: Session | None = None
    ran = 0
    try:
        port = int(beacon_process.wait_for(LISTENING, WAIT).group(2))
        beacon_process.wait_for(STARTED, WAIT)
        beacon_process.wait_for(r"health\.ready:", WAIT)
        session = Session(cwd, port)
        for block in runnable(page):
            for command in commands(block):
                session.run(command)
                ran += 1
        session.close()
        session = None
        beacon_process.stop_cleanly()
        assert "Traceback" not in beacon_process.output, beacon_process.output
    finally:
        if session is not None:
            session.close()
        beacon_process.close()
    return ran


def shell_examples(page: Page) -> list[Block]:
    """A page's shell examples, run or not."""
    return [b for b in page.blocks if commands(b)]


def runnable(page: Page) -> list[Block]:
    """A page's shell examples that run (no C{.. test:} mark)."""
    return [b for b in shell_examples(page) if b.mark is None]
