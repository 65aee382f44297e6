"""`record:` of a rule: what a matching step keeps in its `meta` (model, usage, tool, ...).

    record:
      model: ["${request.body.model}", "${response.body.model}"]
      usage: ["${response.body.message.usage}", "${response.body.usage}"]

Each entry is one template (as in `compensate:`) or a list of them. Every template that
finds a value contributes it, in list order: objects are merged key by key (later ones win),
anything else replaces what came before; a template that finds nothing is skipped. A template
that refers to the response is evaluated against the JSON response body, or, for a streamed
response (server-sent events, NDJSON), against each event undoproxy kept, oldest first: so the
stream's final event has the last word.

The request body is read as JSON, or as a form (`application/x-www-form-urlencoded` or
`multipart/form-data`, as an object of its fields; a field sent several times is a list).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from functools import cached_property
from typing import Any
from urllib.parse import parse_qsl

from undoproxy.rules.graphql import Operation
from undoproxy.rules.templates import (
    TemplateContext,
    TemplateError,
    render_template,
    template_references_graphql,
    template_references_response,
)

RECORD_SOURCES = ("request.body", "request.graphql", "response.body", "response.headers")


@dataclass(frozen=True)
class RecordEntry:
    """One `name: template | [templates]` of `record:`."""

    name: str
    templates: tuple[Any, ...]

    @property
    def needs_response(self) -> bool:
        """True when a template refers to the response."""
        return any(template_references_response(t) for t in self.templates)

    @property
    def needs_graphql(self) -> bool:
        """True when a template refers to the request's GraphQL operation."""
        return any(template_references_graphql(t) for t in self.templates)


@dataclass(frozen=True)
class Record:
    """A rule's `record:` block, validated."""

    entries: tuple[RecordEntry, ...]

    @cached_property
    def needs_graphql(self) -> bool:
        """True when an entry refers to the request's GraphQL operation."""
        return any(entry.needs_graphql for entry in self.entries)

    def evaluate(
        self,
        *,
        captures: Mapping[str, str],
        request_body: Any,
        response_docs: Sequence[Any] = (),
        response_headers: Mapping[str, str] | None = None,
        request_only: bool = False,
        graphql: Operation | None = None,
    ) -> dict[str, Any]:
        """The values found; `request_only` skips the templates that refer to the response;
        `graphql` is the operation the request runs (read from its body and URL)."""
        out: dict[str, Any] = {}
        base = TemplateContext(
            captures=captures,
            request_body=request_body,
            response_headers=response_headers or {},
            graphql=graphql,
        )
        for entry in self.entries:
            value: Any = None
            for template in entry.templates:
                if template_references_response(template):
                    if request_only:
                        continue
                    contexts = [
                        TemplateContext(
                            captures=captures,
                            request_body=request_body,
                            response_body=doc,
                            response_headers=base.response_headers,
                            graphql=graphql,
                        )
                        for doc in response_docs
                    ] or [base]
                else:
                    contexts = [base]
                for ctx in contexts:
                    try:
                        found = render_template(template, ctx)
                    except TemplateError:
                        continue
                    value = _combine(value, found)
            if value is not None:
                out[entry.name] = value
        return out


def _combine(before: Any, found: Any) -> Any:
    if found is None:
        return before
    if isinstance(before, dict) and isinstance(found, dict):
        return {**before, **found}
    return found


def request_fields(body: bytes, content_type: str | None) -> Any:
    """The request body as `record:` reads it: JSON, a form's fields, or None."""
    if not body:
        return None
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        try:
            return _fields(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except (UnicodeDecodeError, ValueError):
            return None
    if media == "multipart/form-data":
        return _multipart(body, content_type or "")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _fields(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            have = out[name]
            out[name] = [*have, value] if isinstance(have, list) else [have, value]
        else:
            out[name] = value
    return out


def _multipart(body: bytes, content_type: str) -> dict[str, Any] | None:
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    try:
        message = BytesParser(policy=HTTP).parsebytes(head + body)
    except (ValueError, TypeError):
        return None
    if not message.is_multipart():
        return None
    pairs: list[tuple[str, str]] = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or part.get_filename():
            continue  # attachments are not fields
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            pairs.append((name, payload.decode("utf-8", "replace")))
    return _fields(pairs)


def stream_events(data: bytes) -> list[Any]:
    """The JSON documents in the kept text of a stream: SSE `data:` events, or NDJSON lines.

    Lines that are not JSON (`data: [DONE]`, comments, a cut-off first line) are skipped.
    """
    out: list[Any] = []
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    is_sse = any(line.startswith("data:") for line in text.split("\n"))
    if not is_sse:
        chunks = text.split("\n")
    else:
        chunks = []
        for event in text.split("\n\n"):
            lines = [ln[5:].removeprefix(" ") for ln in event.split("\n") if ln.startswith("data:")]
            if lines:
                chunks.append("\n".join(lines))
    for chunk in chunks:
        chunk = chunk.strip()
        if not chunk or chunk[0] not in "{[":
            continue
        try:
            out.append(json.loads(chunk))
        except (ValueError, RecursionError):
            continue
    return out
