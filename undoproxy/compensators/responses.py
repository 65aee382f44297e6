"""What the API packs read from a step: a response field they need, the prior state they saw.

Every helper raises Irreversible (saying what is missing) rather than guess a request.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from undoproxy import redact
from undoproxy.compensators.model import Facts, Irreversible, parse_json


def need(facts: Facts, name: str, body: Any = None) -> Any:
    """The response's top-level `name` (or `body`'s), or Irreversible saying it is missing."""
    source = facts.response_json if body is None else body
    value = source.get(name) if isinstance(source, dict) else None
    if value in (None, ""):
        raise Irreversible(
            f"the response has no {name!r}, so the {facts.method} cannot be undone automatically"
        )
    return value


def sent(facts: Facts) -> dict[str, Any]:
    """The request's fields (JSON object or form), {} when it has none."""
    fields = facts.request_fields
    return fields if isinstance(fields, dict) else {}


def prior(facts: Facts) -> Any:
    """The snapshot's JSON (what the target was before the step); Irreversible without one."""
    snap = facts.snapshot
    if snap is None:
        raise Irreversible("no snapshot was taken, so the prior state is unknown")
    if not snap.existed:
        raise Irreversible(
            f"the target did not exist before the step (GET answered {snap.status}), so "
            "there is no prior state to put back"
        )
    body = parse_json(snap.body)
    if body is None:
        raise Irreversible("the snapshot is not JSON, so its fields cannot be put back")
    return body


def at_path(url: str, path: str) -> str:
    """`url`'s scheme and host with another path (no query)."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, path, "", ""))


def base_before(url: str, marker: str) -> str:
    """The path before `marker` (`/api/v3` for GitHub Enterprise, '' for github.com).

    Raises Irreversible when the URL does not contain it.
    """
    path = urlsplit(url).path
    at = path.find(marker)
    if at < 0:
        raise Irreversible(f"{redact.url(url)} has no {marker!r}, so the target is unknown")
    return path[:at]


def repo_path(url: str) -> str:
    """`[/api/v3]/repos/{owner}/{repo}` of a repository URL; Irreversible otherwise."""
    segments = urlsplit(url).path.split("/")
    if "repos" not in segments or len(segments) < segments.index("repos") + 3:
        raise Irreversible(f"{redact.url(url)} is not a repository URL, so the target is unknown")
    at = segments.index("repos")
    return "/".join(segments[: at + 3])
