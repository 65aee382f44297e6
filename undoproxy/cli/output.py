"""How commands print: plain lines, aligned tables, times and counts, all safe for a terminal.

Much of what the CLI prints comes from outside: URLs, intents, session ids and step details
an agent (or an upstream) chose, rule names and reasons from rule files. A terminal obeys the
control characters in such text (`ESC[2K` erases a line, `\\r` returns over it, a C1 CSI
starts a sequence, U+202E reverses what follows), so text shown to a person is made safe here
and only here:

- `shown(text)` is one piece of outside text: every control character, newline and tab
  included, every C1 control, every Unicode format character (bidi marks, embeddings,
  overrides and isolates, zero-width characters, the BOM), the line and paragraph separators
  and lone surrogates are written as escapes (`\\x1b`, `\\u202e`, `\\n`), so the piece stays on
  its line and means what it says. Everything else is printed as it is.
- `out()` and `err()`, the only ways commands write, pass every line they print through
  `shown`: whatever a command forgets, no control character reaches the terminal but the line
  breaks between the lines it prints. `table()` passes every cell through `shown`.
- Commands pass free text that may hold a line break (an intent, a reason, a detail) through
  `shown()` themselves, so it cannot start a line that looks like one of undoproxy's.

`--json` output needs none of this: `json.dumps` writes every control and non-ASCII character
as a `\\u` escape.
"""

from __future__ import annotations

import codecs
import re
import sys
import time
import unicodedata
from types import TracebackType
from typing import Final

# Every character that could be unsafe is outside printable ASCII; only those are looked at.
_CANDIDATE: Final = re.compile(r"[^\x20-\x7e]")
_UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    char = m.group(0)
    if unicodedata.category(char) not in _UNSAFE_CATEGORIES:
        return char
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(text: object) -> str:
    """`text` as one safe piece of a line: control and format characters written escaped."""
    s = text if isinstance(text, str) else str(text)
    return _CANDIDATE.sub(_escape, s) if not s.isascii() or not s.isprintable() else s


def safe_lines(text: str) -> str:
    """`text` with its line breaks (`\\n`, or `\\r\\n`, which becomes `\\n`) kept and every
    other control or format character escaped."""
    return "\n".join(shown(line.removesuffix("\r")) for line in text.split("\n"))


def out(text: str = "") -> None:
    """A line on stdout, flushed (a command's output may be piped while it streams)."""
    print(safe_lines(text), flush=True)


def err(text: str = "") -> None:
    """A line on stderr, flushed (exec keeps stdout for the command it runs)."""
    print(safe_lines(text), file=sys.stderr, flush=True)


class TerminalLines:
    """A byte sink that prints what it is given as safe lines through `out()` as each line
    completes (an export streamed to a terminal: nothing but its lines held in memory)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""

    def write(self, data: bytes) -> int:
        """Take the next bytes; print every line they complete."""
        text = self._pending + self._decoder.decode(data)
        *lines, self._pending = text.split("\n")
        for line in lines:
            out(line)
        return len(data)

    def __enter__(self) -> TerminalLines:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        rest = self._pending + self._decoder.decode(b"", final=True)
        if rest:
            out(rest)


def when(ts: float | None) -> str:
    """A timestamp as local date and time, `-` when there is none."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def count(n: int, noun: str) -> str:
    """`1 request`, `2 requests`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def table(rows: list[list[str]], header: list[str]) -> str:
    """Rows under a header, each column as wide as its widest cell (cells made safe)."""
    cells = [[shown(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )
