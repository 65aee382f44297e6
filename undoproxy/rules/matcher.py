"""`MatchSpec`: the compiled `match:` block of one rule (everything but the method)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from undoproxy.rules.conditions import BodyCondition, FieldCondition
from undoproxy.rules.graphql import Operation, operation_of_request
from undoproxy.rules.mcp import tool_matches, tool_names
from undoproxy.rules.patterns import HostPattern, PathTemplate
from undoproxy.rules.request import NOT_JSON, RequestView


@dataclass(frozen=True)
class MatchSpec:
    """Host patterns (any of), path template, and query/header/body conditions (all of).

    An empty spec matches every request. Methods live on the `Rule` itself because the rule
    index filters on them before a spec is ever consulted.
    """

    hosts: tuple[HostPattern, ...] = ()
    path: PathTemplate | None = None
    query: tuple[FieldCondition, ...] = ()
    headers: tuple[FieldCondition, ...] = ()
    body: tuple[BodyCondition, ...] = ()
    graphql: frozenset[str] | None = None  # the GraphQL operation types the request may run
    mcp_tools: tuple[str, ...] | None = None  # globs of the MCP tools a tools/call may call
    # Conditions on the annotations the MCP server gave the called tool (hints, by name)
    mcp_annotations: tuple[FieldCondition, ...] = ()

    def host_matches(self, host: str, port: int) -> bool:
        """True when any host pattern matches (or there is none)."""
        if not self.hosts:
            return True
        return any(h.matches(host, port) for h in self.hosts)

    def match_rest(self, req: RequestView, *, restrictive: bool = False) -> dict[str, str] | None:
        """Path captures when path, query, headers and body all match; host is checked apart.

        An ambiguous body (`RequestView.ambiguous`: duplicate JSON keys, which `amount` will
        the upstream use?, or a content coding undoproxy could not decode): a `restrictive`
        rule (hold, deny) matches it whatever its body conditions say, any other rule does
        not, so an ambiguous body can slip past neither kind.
        """
        if self.path is None:
            captures: dict[str, str] = {}
        else:
            found = self.path.match(req.path)
            if found is None:
                return None
            captures = found
        for q in self.query:
            if not q.holds(query_values(req, q.name)):
                return None
        for h in self.headers:
            if not h.holds(header_values(req, h.name)):
                return None
        if self.body:
            doc = req.json  # parsed here, and only here: most requests never need it
            if req.ambiguous:
                return captures if restrictive else None
            is_json = doc is not NOT_JSON
            for b in self.body:
                if not b.holds(doc, is_json):
                    return None
        if self.graphql is not None:
            if req.ambiguous:
                return captures if restrictive else None
            op = graphql_operation(req)
            if op is None or op.type not in self.graphql:
                return None
        if self.mcp_tools is not None or self.mcp_annotations:
            if req.ambiguous:
                return captures if restrictive else None
            if self._mcp_mismatch(req, restrictive) is not None:
                return None
        return captures

    def _mcp_mismatch(self, req: RequestView, restrictive: bool) -> str | None:
        """Why the MCP part of the spec does not match (None: it does). A batch calling
        several tools matches a rule that stops requests when any of them does, and one
        that lets them through only when all of them do."""
        names = tool_names(req.json)
        if not names:
            return "body is not an MCP tools/call"
        if self.mcp_tools is not None:
            hits = [tool_matches(self.mcp_tools, n) for n in names]
            if not (any(hits) if restrictive else all(hits)):
                wanted = " or ".join(self.mcp_tools)
                return f"the MCP tool {', '.join(names)} is not {wanted}"
        hints = req.mcp_annotations
        for a in self.mcp_annotations:
            values = [] if hints is None or a.name not in hints else [hints[a.name]]
            if not a.holds(values):
                known = "unknown (no tools/list seen)" if hints is None else _values(values)
                return f"MCP annotation {a.name} = {known} fails {a.condition.describe()}"
        return None

    def mismatches(self, req: RequestView, *, restrictive: bool = False) -> list[str]:
        """Every reason this spec does not match `req` (empty when it matches)."""
        reasons: list[str] = []
        if not self.host_matches(req.host, req.port):
            wanted = " or ".join(h.text for h in self.hosts)
            # The port only matters when a pattern names one, so only then is it shown.
            shown = req.host
            if any(h.port is not None for h in self.hosts):
                shown = f"{req.host}:{req.port}"
            reasons.append(f"host {shown} does not match {wanted}")
        if self.path is not None and self.path.match(req.path) is None:
            reasons.append(f"path {req.path} does not match {self.path.text}")
        for q in self.query:
            values = query_values(req, q.name)
            if not q.holds(values):
                reasons.append(f"query {q.name}={_values(values)} fails {q.condition.describe()}")
        for h in self.headers:
            values = header_values(req, h.name)
            if not h.holds(values):
                reasons.append(f"header {h.name}: {_values(values)} fails {h.condition.describe()}")
        doc = req.json if self.body else NOT_JSON
        judges_body = self.body or self.graphql is not None or self.mcp_tools is not None
        ambiguous = req.ambiguous if judges_body or self.mcp_annotations else None
        if ambiguous:
            if not restrictive:
                reasons.append(
                    f"{ambiguous}: an ambiguous body never matches a rule that lets it through"
                )
            return reasons
        for b in self.body:
            is_json = doc is not NOT_JSON
            if b.holds(doc, is_json):
                continue
            if not is_json:
                state = "not JSON" if req.body.strip() else "empty"
                reasons.append(f"body is {state}, so {b.describe()} fails")
            else:
                found = b.path.find(doc)
                reasons.append(
                    f"body {b.path.text} = {_values(found)} fails {b.condition.describe()}"
                )
        if self.graphql is not None:
            op = graphql_operation(req)
            wanted = " or ".join(sorted(self.graphql))
            if op is None:
                reasons.append(
                    f"the request is not a GraphQL request we can read (body and URL), "
                    f"so graphql: {wanted} fails"
                )
            elif op.type not in self.graphql:
                reasons.append(f"the GraphQL operation is a {op.type}, not {wanted}")
        if self.mcp_tools is not None or self.mcp_annotations:
            why = self._mcp_mismatch(req, restrictive)
            if why is not None:
                reasons.append(why)
        return reasons


def graphql_operation(req: RequestView) -> Operation | None:
    """The GraphQL operation `req` runs, read from its body and its URL (see rules.graphql)."""
    return operation_of_request(req.json, req.body, req.query)


def query_values(req: RequestView, name: str) -> list[str]:
    """Every value of query parameter `name`, in order."""
    return [v for k, v in req.query if k == name]


def header_values(req: RequestView, name: str) -> list[str]:
    """The (comma-joined) value of header `name` as a one-item list, or an empty list."""
    value = req.headers.get(name)
    return [] if value is None else [value]


def _values(values: list[Any]) -> str:
    """Selected values, short enough for one line of an explanation."""
    if not values:
        return "(nothing)"
    shown = values[0] if len(values) == 1 else values
    text = json.dumps(shown, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
