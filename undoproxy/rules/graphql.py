"""What a GraphQL request does: the type and name of the operation it runs.

Only as much of the GraphQL grammar as that takes: comments (`# ...`), strings (block strings
too), commas and fragment definitions are skipped, and each top-level operation is read as
`query|mutation|subscription [Name]` or the `{ ... }` shorthand (a query). The operation run
is the one `operationName` names, else the document's only one. A batch (a JSON list of
requests) runs all of them, so it is a mutation when any of them is.

Servers read the operation from more than one place (GraphQL over HTTP: the URL's `query=`
for GET, and many servers for POST too, some preferring it to the body; a JSON body, a form
body, or an `application/graphql` body that is the document itself). `operation_of_request`
reads every one of them and answers the strongest: a mutation anywhere is a mutation, and a
place that carries something unreadable makes the whole request unreadable (None), so no
reading of ours can be weaker than the server's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl

OPERATION_TYPES: Final = ("query", "mutation", "subscription")
_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
_STRENGTH = {"query": 0, "subscription": 1, "mutation": 2}


@dataclass(frozen=True)
class Operation:
    """One operation of a GraphQL document: its type and its name (None when anonymous)."""

    type: str
    name: str | None = None


def operation_of(body: Any) -> Operation | None:
    """The operation a GraphQL request body runs, or None when the body is not one. A batch
    is a flat list of requests: a list inside it is not one (and is not looked into, however
    deep it nests)."""
    if isinstance(body, list):
        each = [_operation_of_one(item) for item in body]
        found = [op for op in each if op is not None]
        if not found or len(found) != len(each):
            return None
        strongest = max(found, key=lambda op: _STRENGTH[op.type])
        return Operation(strongest.type, strongest.name if len(found) == 1 else None)
    return _operation_of_one(body)


def _operation_of_one(body: Any) -> Operation | None:
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


def operation_of_request(
    body: Any, raw_body: bytes, query: Sequence[tuple[str, str]]
) -> Operation | None:
    """The operation a request runs, read from its parsed JSON `body` (None or any non-JSON
    value when it is not JSON), its `raw_body` and its URL's decoded `query` parameters.

    Every place that carries an operation is read (see the module docstring); the strongest
    wins (on a tie the body's, then the URL's). None when no place carries one, or when one
    that does cannot be read.
    """
    found: list[Operation] = []
    if isinstance(body, (dict, list)):
        op = operation_of(body)
        if op is None:
            return None
        found.append(op)
    elif raw_body.strip():
        op = _operation_of_text_body(raw_body, query)
        if op is None:
            return None
        found.append(op)
    documents = [value for key, value in query if key == "query"]
    if documents:
        names = [value for key, value in query if key == "operationName"]
        name = names[-1] if names else None
        for document in documents:
            op = operation_of({"query": document, "operationName": name})
            if op is None:
                return None
            found.append(op)
    if not found:
        return None
    return max(found, key=lambda op: _STRENGTH[op.type])  # max keeps the first of equals


def _operation_of_text_body(raw: bytes, query: Sequence[tuple[str, str]]) -> Operation | None:
    """A body that is not JSON: a form (`query=...&operationName=...`) or the document itself
    (`application/graphql`); whichever reads, the strongest when both do."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    names = [value for key, value in query if key == "operationName"]
    readings: list[Operation] = []
    document_ops = operations(text)
    if document_ops:
        as_document = operation_of({"query": text, "operationName": names[-1] if names else None})
        if as_document is not None:
            readings.append(as_document)
    form = parse_qsl(text, keep_blank_values=True)
    form_documents = [value for key, value in form if key == "query"]
    if form_documents:
        form_names = [value for key, value in form if key == "operationName"] or names
        for document in form_documents:
            op = operation_of(
                {"query": document, "operationName": form_names[-1] if form_names else None}
            )
            if op is not None:
                readings.append(op)
    if not readings:
        return None
    return max(readings, key=lambda op: _STRENGTH[op.type])


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
