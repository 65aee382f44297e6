"""A secret's value as config.yaml writes it, and reading it from where it lives.

config.yaml never holds a secret, only where to find it: `${NAME}` is the environment variable
NAME (upper-case names, as everywhere in config.yaml), `${file:PATH}` the content of a file
(relative to the config file; one trailing newline dropped). Text around the references is
kept (`Bearer ${OPENAI_API_KEY}`). Reading happens at start and on every reload (`SIGHUP`,
`POST /api/secrets/reload`): a file rotated in place is picked up without a restart.

Errors name the variable or the file, never a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REFERENCE: Final = re.compile(r"\$\{(?:([A-Z_][A-Z0-9_]*)|file:([^}]+))\}")
MIN_SECRET: Final = 8  # characters: shorter could not be told apart from other text
MAX_FILE: Final = 64 * 1024  # bytes: a larger "secret file" is a mistake (a key ring, a log)
_BAD_CHARACTERS: Final = re.compile(r"[\r\n\x00]")


class Unavailable(ValueError):
    """A value could not be read; the message names the variable or file (never a value)."""


@dataclass(frozen=True)
class Read:
    """A value as read: the whole `text` and each `piece` read from a variable or file (what
    undoproxy looks for in an agent's requests). Neither ever shows in repr."""

    text: str
    pieces: tuple[str, ...]

    def __repr__(self) -> str:
        return f"Read(<{len(self.pieces)} secret piece(s)>)"


@dataclass(frozen=True)
class ValueTemplate:
    """Text with `${NAME}` and `${file:PATH}` references (`base_dir`: where PATH starts)."""

    text: str
    base_dir: Path

    @classmethod
    def parse(cls, text: str, base_dir: Path, *, literal_ok: bool = False) -> ValueTemplate:
        """Check the references; ValueError when there is none (a secret written into
        config.yaml) unless `literal_ok` (an access key id, which is not a secret)."""
        if _BAD_CHARACTERS.search(text):
            raise ValueError("contains a line break or NUL")
        for m in re.finditer(r"\$\{([^}]*)\}?", text):
            if REFERENCE.fullmatch(m.group(0)) is None:
                raise ValueError(
                    f"{m.group(0)!r} is not a reference: write ${{NAME}} (an upper-case "
                    "environment variable) or ${file:PATH}"
                )
        if not literal_ok and REFERENCE.search(text) is None:
            raise ValueError(
                "must come from the environment or a file (${NAME} or ${file:PATH}), never "
                "be written into config.yaml"
            )
        return cls(text, base_dir)

    @property
    def env_names(self) -> tuple[str, ...]:
        """The environment variables it reads."""
        return tuple(m.group(1) for m in REFERENCE.finditer(self.text) if m.group(1))

    @property
    def sources(self) -> tuple[str, ...]:
        """Where it is read from, as a person would say it (`env OPENAI_API_KEY`, `file ...`)."""
        return tuple(
            f"env {m.group(1)}" if m.group(1) else f"file {self._path(m.group(2))}"
            for m in REFERENCE.finditer(self.text)
        )

    def _path(self, text: str) -> Path:
        path = Path(text.strip()).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    def read(self, environ: Mapping[str, str]) -> Read:
        """The value now; raises Unavailable naming what is missing, empty or too short."""
        pieces: list[str] = []

        def one(m: re.Match[str]) -> str:
            if m.group(1):
                value = environ.get(m.group(1), "")
                what = f"the environment variable {m.group(1)}"
                if not value:
                    raise Unavailable(f"{what} is not set or empty")
            else:
                path = self._path(m.group(2))
                what = f"the file {path}"
                value = _read_file(path)
            if len(value) < MIN_SECRET:
                raise Unavailable(
                    f"{what} holds {len(value)} characters: a secret needs at least "
                    f"{MIN_SECRET}, or undoproxy could not tell it apart from other text"
                )
            if _BAD_CHARACTERS.search(value):
                raise Unavailable(f"{what} holds a line break or NUL inside its value")
            pieces.append(value)
            return value

        text = REFERENCE.sub(one, self.text)
        return Read(text, tuple(pieces))


def _read_file(path: Path) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE + 1)
    except FileNotFoundError:
        raise Unavailable(f"the file {path} does not exist") from None
    except OSError as exc:
        raise Unavailable(f"the file {path} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE:
        raise Unavailable(f"the file {path} is larger than {MAX_FILE} bytes: not a secret")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unavailable(f"the file {path} is not UTF-8 text") from None
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text
