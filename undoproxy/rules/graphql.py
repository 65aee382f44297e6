"""What a GraphQL request does: the type and name of the operation its JSON body runs.

Only as much of the GraphQL grammar as that takes: comments (`# ...`), strings (block strings
too), commas and fragment definitions are skipped, and each top-level operation is read as
`query|mutation|subscription [Name]` or the `{ ... }` shorthand (a query). The operation run
is the one `operationName` names, else the document's only one. A batch (a JSON list of
requests) runs all of them, so it is a mutation when any of them is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

OPERATION_TYPES: Final = ("query", "mutation", "subscription")
_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
_STRENGTH = {"query": 0, "subscription": 1, "mutation": 2}


@dataclass(frozen=True)
class Operation:
    """One operation of a GraphQL document: its type and its name (None when anonymous)."""

    type: str
    name: str | None = None


def operation_of(body: Any) -> Operation | None:
    """The operation a GraphQL request body runs, or None when the body is not one."""
    if isinstance(body, list):
        each = [operation_of(item) for item in body]
        found = [op for op in each if op is not None]
        if not found or len(found) != len(each):
            return None
        strongest = max(found, key=lambda op: _STRENGTH[op.type])
        return Operation(strongest.type, strongest.name if len(found) == 1 else None)
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        return None
    ops = operations(body["query"])
    if not ops:
        return None
    wanted = body.get("operationName")
    if isinstance(wanted, str) and wanted:
        return next((op for op in ops if op.name == wanted), None)
    if len(ops) == 1:
        return ops[0]
    # Several operations and no operationName: the server refuses it; if it did not, the
    # strongest reading is the safe one.
    return max(ops, key=lambda op: _STRENGTH[op.type])


def operations(document: str) -> list[Operation]:
    """The operations a document defines, in order (fragments and comments skipped)."""
    found: list[Operation] = []
    pos, end = 0, len(document)
    while True:
        pos = _skip_ignored(document, pos)
        if pos >= end:
            return found
        if document[pos] == "{":
            found.append(Operation("query"))
            pos = _skip_block(document, pos)
            continue
        m = _NAME.match(document, pos)
        if m is None:
            return []  # not a GraphQL document we can read
        word = m.group(0)
        pos = _skip_ignored(document, m.end())
        name = None
        if word in OPERATION_TYPES:
            n = _NAME.match(document, pos)
            if n is not None:
                name = n.group(0)
            found.append(Operation(word, name))
        # The operation's (or fragment's) variables, directives and selection set.
        brace = _find_top_brace(document, pos)
        if brace < 0:
            return []
        pos = _skip_block(document, brace)


def _skip_ignored(text: str, pos: int) -> int:
    """Past whitespace, commas, the BOM and comments."""
    end = len(text)
    while pos < end:
        c = text[pos]
        if c in " \t\r\n,\ufeff":
            pos += 1
        elif c == "#":
            nl = text.find("\n", pos)
            pos = end if nl < 0 else nl + 1
        else:
            break
    return pos


def _skip_string(text: str, pos: int) -> int:
    """Past the string starting at `pos` (a `"..."` or a `\"\"\"...\"\"\"` block string)."""
    if text.startswith('"""', pos):
        close = pos + 3
        while True:
            close = text.find('"""', close)
            if close < 0:
                return len(text)
            if text[close - 1] != "\\":
                return close + 3
            close += 3
    pos += 1
    while pos < len(text):
        c = text[pos]
        if c == "\\":
            pos += 2
            continue
        if c in '"\n':
            return pos + 1
        pos += 1
    return pos


def _find_top_brace(text: str, pos: int) -> int:
    """The `{` that opens the selection set after `pos` (strings and comments skipped)."""
    while pos < len(text):
        pos = _skip_ignored(text, pos)
        if pos >= len(text):
            break
        c = text[pos]
        if c == "{":
            return pos
        pos = _skip_string(text, pos) if c == '"' else pos + 1
    return -1


def _skip_block(text: str, pos: int) -> int:
    """Past the `{ ... }` block opening at `pos`."""
    depth = 0
    while pos < len(text):
        c = text[pos]
        if c == "#":
            pos = _skip_ignored(text, pos)
            continue
        if c == '"':
            pos = _skip_string(text, pos)
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    return pos
