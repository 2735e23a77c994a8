"""
The checks of C{[notify]} that need this room (L{check_options}): the
configuration reads and checks the section as plain data; whether its
program can be found and its CA certificates make a trust root is the
notifiers' to say, before anything starts.
"""

from __future__ import annotations

from beacon.config import ConfigError, Notify
from beacon.errors import StartupError
from beacon.notify._command import resolve_program
from beacon.notify._smtp import smtp_trust_root


def check_options(notify: Notify) -> None:
    """
    Check what L{beacon.config.validate} cannot: that C{[notify]
    command}'s program is found (on C{PATH} unless it holds a slash) and
    that the certificates of C{smtp_ca_file} make a trust root.

    @raise ConfigError: For the first that does not.
    """
    if notify.command:
        try:
            resolve_program(notify.command[0])
        except StartupError as e:
            raise ConfigError(str(e)) from None
    if notify.smtp_ca:
        try:
            smtp_trust_root(notify.smtp_ca)
        except ValueError as e:
            raise ConfigError(f"[notify] smtp_ca_file: {notify.smtp_ca_file}: {e}") from None
