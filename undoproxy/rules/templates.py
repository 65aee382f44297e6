"""Templates in `snapshot.url` and explicit `compensate` requests.

In any string inside the template:

- `{name}` is the path capture `name` from `match.path`;
- `${request.body}`, `${request.body.<jsonpath>}`, `${response.body}`,
  `${response.body.<jsonpath>}`, `${response.headers.<Name>}`, `${snapshot.body}` and
  `${snapshot.body.<jsonpath>}` are the step's own data (`<jsonpath>` is written after the dot:
  `${response.body.data.items[0].id}` means `$.data.items[0].id`);
- `{{` and `}}` are literal braces.

A string that is exactly one `${...}` yields the value itself (an object stays an object);
any other string yields a string, non-string values written as compact JSON. A JSONPath that
selects several values yields them as a list. Only values are rendered, never mapping keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from undoproxy.rules.graphql import Operation, operation_of
from undoproxy.rules.jsonpaths import JsonPath

BODY_SOURCES = ("request.body", "response.body", "snapshot.body")
HEADER_SOURCE = "response.headers"
GRAPHQL_SOURCE = "request.graphql"  # .type / .name of the GraphQL operation the request runs
GRAPHQL_FIELDS = ("type", "name")
_TOKEN = re.compile(r"\{\{|\}\}|\$(?=\{\{)|\$\{([^{}]*)\}|\{([^{}]*)\}|[{}]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_SOURCE_LABEL = {
    "request.body": "the request body",
    "response.body": "the response body",
    "snapshot.body": "the snapshot body",
}


class TemplateError(ValueError):
    """A template reference that resolves to nothing, or a template that does not parse."""


class TemplateSyntaxError(TemplateError):
    """A template string that cannot be parsed (found when the rules load)."""


@dataclass(frozen=True)
class Capture:
    """`{name}`: a path capture."""

    name: str


@dataclass(frozen=True)
class Reference:
    """`${source.rest}`: request/response/snapshot data."""

    text: str
    source: str  # one of BODY_SOURCES, HEADER_SOURCE or GRAPHQL_SOURCE
    path: JsonPath | None = field(default=None, compare=False)  # None: the whole body
    header: str | None = None  # the header name, or the GraphQL field

    def resolve(self, ctx: TemplateContext) -> Any:
        """The referenced value; raises TemplateError when there is none."""
        if self.source == GRAPHQL_SOURCE:
            op = ctx.graphql if ctx.graphql is not None else operation_of(ctx.request_body)
            value = getattr(op, self.header or "", None) if op is not None else None
            if value is None:
                raise TemplateError(f"${{{self.text}}}: the request runs no such GraphQL value")
            return value
        if self.header is not None:
            value = ctx.header(self.header)
            if value is None:
                raise TemplateError(f"${{{self.text}}}: no {self.header} header in the response")
            return value
        body = {
            "request.body": ctx.request_body,
            "response.body": ctx.response_body,
            "snapshot.body": ctx.snapshot_body,
        }[self.source]
        label = _SOURCE_LABEL[self.source]
        if body is None:
            raise TemplateError(f"${{{self.text}}}: no value in {label} (empty or not JSON)")
        if self.path is None:
            return body
        found = self.path.find(body)
        if not found:
            raise TemplateError(f"${{{self.text}}}: no value in {label}")
        return found[0] if len(found) == 1 else found


Part = str | Capture | Reference


@dataclass(frozen=True)
class TemplateContext:
    """The data a template may refer to; bodies are parsed JSON, or None when absent."""

    captures: Mapping[str, str] = field(default_factory=dict)
    request_body: Any = None
    response_body: Any = None
    response_headers: Mapping[str, str] = field(default_factory=dict)
    snapshot_body: Any = None
    # The GraphQL operation the request runs, read from its body and URL by the caller
    # (rules.graphql.operation_of_request); None: read from `request_body` alone.
    graphql: Operation | None = None

    def header(self, name: str) -> str | None:
        """A response header by case-insensitive name."""
        value = self.response_headers.get(name)
        if value is not None:
            return value
        lower = name.lower()
        for key, val in self.response_headers.items():
            if key.lower() == lower:
                return val
        return None


@lru_cache(maxsize=2048)
def parse_template(text: str) -> tuple[Part, ...]:
    """Split a template string into literal text, captures and references."""
    parts: list[Part] = []
    literal: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        literal.append(text[pos : m.start()])
        pos = m.end()
        token = m.group(0)
        if token in ("{{", "}}", "$"):
            literal.append(token[0])
            continue
        if m.group(1) is None and m.group(2) is None:
            raise TemplateSyntaxError(
                f"unbalanced {token!r} in {text!r} (write {token}{token} for a literal brace)"
            )
        if literal:
            parts.append("".join(literal))
            literal = []
        if m.group(1) is not None:
            parts.append(parse_reference(m.group(1).strip()))
        else:
            name = m.group(2).strip()
            if not _NAME.match(name):
                raise TemplateSyntaxError(f"invalid capture name {{{name}}} in {text!r}")
            parts.append(Capture(name))
    literal.append(text[pos:])
    tail = "".join(literal)
    if tail:
        parts.append(tail)
    return tuple(p for p in parts if p != "")


def parse_reference(text: str) -> Reference:
    """Parse what is inside `${...}`; raises TemplateSyntaxError for an unknown root."""
    for source in BODY_SOURCES:
        if text == source:
            return Reference(text, source)
        rest = text[len(source) :]
        if text.startswith(source) and rest[:1] in (".", "["):
            try:
                path = JsonPath("$" + rest)
            except ValueError as exc:
                raise TemplateSyntaxError(f"${{{text}}}: {exc}") from None
            return Reference(text, source, path)
    if text.startswith(GRAPHQL_SOURCE + "."):
        name = text[len(GRAPHQL_SOURCE) + 1 :]
        if name not in GRAPHQL_FIELDS:
            raise TemplateSyntaxError(f"${{{text}}}: use request.graphql.type or .name")
        return Reference(text, GRAPHQL_SOURCE, header=name)
    prefix = HEADER_SOURCE + "."
    if text.startswith(prefix):
        name = text[len(prefix) :]
        if not _HEADER_NAME.match(name):
            raise TemplateSyntaxError(f"${{{text}}}: invalid header name {name!r}")
        return Reference(text, HEADER_SOURCE, header=name)
    raise TemplateSyntaxError(
        f"unknown reference ${{{text}}}: use request.body[.<jsonpath>], "
        "response.body[.<jsonpath>], response.headers.<Name> or snapshot.body[.<jsonpath>]"
    )


def render_template(value: Any, ctx: TemplateContext) -> Any:
    """Render every string inside `value` (dicts and lists are walked); see the module doc."""
    if isinstance(value, str):
        return _render_string(value, ctx)
    if isinstance(value, dict):
        return {k: render_template(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [render_template(v, ctx) for v in value]
    return value


def _render_string(text: str, ctx: TemplateContext) -> Any:
    parts = parse_template(text)
    if len(parts) == 1 and isinstance(parts[0], Reference):
        return parts[0].resolve(ctx)
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Capture):
            if part.name not in ctx.captures:
                raise TemplateError(f"{{{part.name}}}: no such path capture")
            out.append(ctx.captures[part.name])
        else:
            out.append(to_text(part.resolve(ctx)))
    return "".join(out)


def render_url(text: str, ctx: TemplateContext) -> str:
    """Render a URL template so that no substituted value can change which resource it names.

    A template that is exactly one `${...}` is that value, used as a URL (where it may send
    credentials is decided later, by origin). Otherwise every value is substituted as one
    path segment (or one query value), percent-encoded, so `1/../../admin` stays inside its
    segment; a path capture is already encoded as the agent sent it. A value that is empty,
    `.` or `..` in the path is refused (TemplateError): it would name the parent collection.
    """
    parts = parse_template(text)
    if len(parts) == 1 and isinstance(parts[0], Reference):
        value = parts[0].resolve(ctx)
        if not isinstance(value, str) or not value:
            raise TemplateError(f"${{{parts[0].text}}}: not a URL: {to_text(value)[:80]}")
        return value
    out: list[str] = []
    in_query = False
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            in_query = in_query or "?" in part or "#" in part
            continue
        if isinstance(part, Capture):
            if part.name not in ctx.captures:
                raise TemplateError(f"{{{part.name}}}: no such path capture")
            value, label = ctx.captures[part.name], "{" + part.name + "}"
            encoded = value
        else:
            value, label = to_text(part.resolve(ctx)), "${" + part.text + "}"
            encoded = quote(value, safe="")
        if not in_query and value in ("", ".", ".."):
            raise TemplateError(
                f"{label} is {value!r}: as a path segment it would name another resource"
            )
        out.append(encoded)
    return "".join(out)


def to_text(value: Any) -> str:
    """A value as it appears inside a larger string: strings as is, the rest as compact JSON.

    Raises TemplateError for a value nested too deep to write.
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        # A body nested near the parser's limit parses, but cannot be written back as text.
        raise TemplateError("the value is nested too deep to write as text") from None


def iter_parts(value: Any) -> list[Part]:
    """Every capture and reference inside `value` (raises TemplateSyntaxError)."""
    found: list[Part] = []
    if isinstance(value, str):
        found.extend(p for p in parse_template(value) if not isinstance(p, str))
    elif isinstance(value, dict):
        for v in value.values():
            found.extend(iter_parts(v))
    elif isinstance(value, list):
        for v in value:
            found.extend(iter_parts(v))
    return found


def template_references_response(value: Any) -> bool:
    """True if `value` refers to `${response...}`: it can only be completed after the response."""
    try:
        parts = iter_parts(value)
    except TemplateSyntaxError:
        return False
    return any(isinstance(p, Reference) and p.source.startswith("response.") for p in parts)


def template_references_graphql(value: Any) -> bool:
    """True if `value` refers to `${request.graphql...}`."""
    try:
        parts = iter_parts(value)
    except TemplateSyntaxError:
        return False
    return any(isinstance(p, Reference) and p.source == GRAPHQL_SOURCE for p in parts)


def template_references_snapshot(value: Any) -> bool:
    """True if `value` refers to `${snapshot.body...}`."""
    try:
        parts = iter_parts(value)
    except TemplateSyntaxError:
        return False
    return any(isinstance(p, Reference) and p.source == "snapshot.body" for p in parts)


def render_known(value: Any, ctx: TemplateContext) -> Any:
    """Render what `ctx` can resolve and leave the rest as written (for `rules explain`)."""
    if isinstance(value, dict):
        return {k: render_known(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [render_known(v, ctx) for v in value]
    if not isinstance(value, str):
        return value
    try:
        return render_template(value, ctx)
    except TemplateError:
        pass
    out: list[str] = []
    for part in parse_template(value):
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Capture):
            out.append(ctx.captures.get(part.name, "{" + part.name + "}"))
        else:
            try:
                out.append(to_text(part.resolve(ctx)))
            except TemplateError:
                out.append("${" + part.text + "}")
    return "".join(out)
