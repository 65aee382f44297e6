"""The journal's SQL (SQLite's dialect) as PostgreSQL runs it: parameters translated.

Every statement undoproxy writes is plain SQL both databases accept; only the parameters
differ. `?` becomes `$1`, `$2`, ... in order; `:name` becomes one `$n` per distinct name, and a
mapping of parameters is turned into the matching list. Quoted text and identifiers are left
alone.

    >>> translate("UPDATE steps SET status=? WHERE id=? AND note=':x?'")
    Statement(sql="UPDATE steps SET status=$1 WHERE id=$2 AND note=':x?'", names=None)
    >>> translate("SELECT :a, :b, :a").sql
    'SELECT $1, $2, $1'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|::|\?|:[A-Za-z_]\w*")
_CHANGE = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE)\s+(\w+)", re.I)


@dataclass(frozen=True)
class Statement:
    """A statement in PostgreSQL's form; `names` orders a mapping's values (None: `?`)."""

    sql: str
    names: tuple[str, ...] | None

    def args(self, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        """The positional arguments for asyncpg."""
        if isinstance(params, Mapping):
            if self.names is None:
                raise ValueError("named parameters given to a statement with `?` parameters")
            return [params[n] for n in self.names]
        return list(params)


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> Statement:
    """`sql` with PostgreSQL's `$n` parameters."""
    positional = 0
    names: dict[str, int] = {}

    def replace(match: re.Match[str]) -> str:
        nonlocal positional
        token = match.group(0)
        if token == "?":
            positional += 1
            return f"${positional}"
        if token.startswith(":") and token != "::":
            name = token[1:]
            if name not in names:
                names[name] = len(names) + 1
            return f"${names[name]}"
        return token

    out = _TOKEN.sub(replace, sql)
    if positional and names:
        raise ValueError(f"both ? and :name parameters in: {sql[:60]}")
    return Statement(out, tuple(names) if names else None)


def changed_table(sql: str) -> str | None:
    """The table an INSERT or UPDATE writes to, else None."""
    match = _CHANGE.match(sql)
    return match.group(1).lower() if match else None
