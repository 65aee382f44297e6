"""The exceptions undoproxy raises on purpose.

UndoproxyError
 ├── ConfigError          one problem in a config or rule file, with file:line
 │    └── ConfigErrors    several of them, reported together
 ├── JournalError         the journal could not record something (mutations are not forwarded)
 └── AdminClientError     the CLI could not talk to a running undoproxy (not running, bad token)
"""

from __future__ import annotations

from dataclasses import dataclass


class UndoproxyError(Exception):
    """Base of every error undoproxy raises deliberately."""


@dataclass(frozen=True)
class Location:
    """Where a value came from: a file and a 1-based line (0 when unknown)."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


class ConfigError(UndoproxyError):
    """A mistake in a config or rule file, shown to the user as `file:line: message`."""

    def __init__(self, where: Location | None, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)


class ConfigErrors(ConfigError):
    """Every mistake found in one pass, so the user can fix them all at once."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        first = errors[0] if errors else None
        UndoproxyError.__init__(self, "\n".join(str(e) for e in errors))
        self.where = first.where if first else None
        self.message = str(self)


class JournalError(UndoproxyError):
    """The journal could not write; the request it concerned must not be forwarded."""


class AdminClientError(UndoproxyError):
    """The CLI could not complete a call to a running undoproxy."""
