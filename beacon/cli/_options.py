"""
The option value types more than one C{beacon} command takes: a positive
whole number and a number of seconds, refused as argparse refuses a usage
error; and the parser every command's is (L{Parser}): its usage errors come
first, in one line, with the near option or command for a misspelt one.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn


def count(text: str) -> int:
    """A positive whole number (C{--limit N})."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def duration(text: str) -> float:
    """A number of seconds, more than none and less than a day (C{--timeout S})."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def did_you_mean(word: str, known: Iterable[str]) -> str | None:
    """The one of C{known} that C{word} is most likely a misspelling of, if any."""
    near = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return near[0] if near else None


_INVALID_CHOICE = re.compile(r"invalid choice: '(.*?)' \(choose from (.*)\)\Z", re.DOTALL)


class Parser(argparse.ArgumentParser):
    """
    C{beacon}'s argument parser (and each command's): a usage error is
    written first, as one line (with the near option or command, for a
    misspelt one), then the command's usage; and an option one command
    does not know is refused by that command, which knows its options.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.option_names: set[str] = set()
        self.has_commands = False
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.option_names.update(action.option_strings)
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument

        def add_argument(*args: Any, **kwargs: Any) -> argparse.Action:
            action = add(*args, **kwargs)
            self.option_names.update(action.option_strings)
            return action

        setattr(group, "add_argument", add_argument)
        return group

    def add_subparsers(self, **kwargs: Any) -> Any:
        self.has_commands = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not self.has_commands:
            # A command refuses what it does not know itself, naming the
            # near option; argparse would leave it to `beacon`, which
            # knows none of the command's options.
            self.error(self.unrecognized(extras))
        return parsed, extras

    def unrecognized(self, extras: list[str]) -> str:
        """The message for arguments this command does not take."""
        message = f"unrecognized arguments: {' '.join(extras)}"
        for extra in extras:
            if extra.startswith("-"):
                near = did_you_mean(extra.split("=")[0], self.option_names)
                if near is not None:
                    return f"{message} (did you mean {near}?)"
        return message

    def error(self, message: str) -> NoReturn:
        """Write the one-line error first, then the usage; exit 2."""
        choice = _INVALID_CHOICE.search(message)
        if choice is not None:
            # Choices are quoted or not, as the Python version writes them.
            choices = [c.strip().strip("'") for c in choice.group(2).split(",")]
            near = did_you_mean(choice.group(1), choices)
            if near is not None:
                message += f" (did you mean {near}?)"
        self.exit(2, f"{self.prog}: error: {message}\n{self.format_usage()}")
