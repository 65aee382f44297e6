"""Parse what a rule does with a match: risk, action, snapshot, compensate, timeout and texts."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any, TypedDict

from undoproxy.compensators.catalog import NEEDS_SNAPSHOT, known_names
from undoproxy.durations import parse_duration
from undoproxy.errors import ConfigError, Location
from undoproxy.rules.conditions import plain_value
from undoproxy.rules.guards import Guard, parse_guard
from undoproxy.rules.model import (
    ACTIONS,
    CREDENTIALS,
    HTTP_METHODS,
    KINDS,
    ON_SNAPSHOT_ERROR,
    READ_METHODS,
    RISKS,
    SnapshotSpec,
)
from undoproxy.rules.record import RECORD_SOURCES, Record, RecordEntry
from undoproxy.rules.templates import (
    Capture,
    Reference,
    TemplateSyntaxError,
    iter_parts,
    template_references_snapshot,
)
from undoproxy.yamlsource import YDict, YList

RULE_ACTION_KEYS: frozenset[str] = frozenset(
    {
        "risk",
        "action",
        "snapshot",
        "compensate",
        "timeout",
        "on_snapshot_error",
        "credentials",
        "guard",
        "kind",
        "fails_when",
        "record",
        "reason",
        "description",
    }
)
SNAPSHOT_KEYS: frozenset[str] = frozenset({"url"})
_RECORD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
COMPENSATE_KEYS: frozenset[str] = frozenset({"method", "url", "body", "headers"})


class RuleActions(TypedDict):
    """The Rule fields `parse_actions` produces."""

    risk: str
    action: str
    on_snapshot_error: str
    credentials: str
    guard: Guard | None
    kind: str | None
    record: Record | None
    snapshot: SnapshotSpec | None
    compensate: str | dict[str, Any] | None
    timeout: float | None
    reason: str | None
    description: str | None


class Problems:
    """Collects every ConfigError found, so one run reports them all."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def add(self, where: Location, message: str) -> None:
        """Record one error at `where`."""
        self.errors.append(ConfigError(where, message))

    @staticmethod
    def suggest(word: str, choices: Iterable[str]) -> str:
        """`" (did you mean 'x'?)"` when a choice is close to `word`, else the valid choices."""
        options = sorted(choices)
        close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
        if close:
            return f" (did you mean {close[0]!r}?)"
        if len(options) <= 12:
            return f" (expected one of: {', '.join(options)})"
        return ""


def unknown_keys(
    d: dict[str, Any],
    allowed: frozenset[str],
    what: str,
    problems: Problems,
    loc: Location,
    *,
    elsewhere: tuple[frozenset[str], str] | None = None,
) -> None:
    """Report every key of `d` not in `allowed`, with a suggestion; `loc` is where `d` is."""
    for key in d:
        if key in allowed:
            continue
        where = at(d, key, loc)
        if elsewhere is not None and key in elsewhere[0]:
            hint = f" (did you mean to put it under {elsewhere[1]}?)"
        else:
            hint = Problems.suggest(key, allowed)
        problems.add(where, f"unknown key {key!r} in {what}{hint}")


def parse_actions(
    d: dict[str, Any],
    loc: Location,
    methods: frozenset[str] | None,
    captures: tuple[str, ...],
    problems: Problems,
) -> RuleActions:
    """The Rule fields other than name, where, methods and match_spec, validated."""
    risk = _choice(d, "risk", RISKS, "medium", loc, problems)
    action = _choice(d, "action", ACTIONS, "allow", loc, problems)
    on_error = _choice(d, "on_snapshot_error", ON_SNAPSHOT_ERROR, "block", loc, problems)
    credentials = _choice(d, "credentials", CREDENTIALS, "origin", loc, problems)
    kind = _choice(d, "kind", KINDS, "", loc, problems) or None
    guard = None
    if d.get("guard") is not None:
        try:
            guard = parse_guard(d["guard"])
        except ValueError as exc:
            problems.add(at(d, "guard", loc), str(exc))
    snapshot = _snapshot(d, loc, captures, problems)
    compensate = _compensate(d, loc, captures, problems)
    reads_only = bool(methods) and methods is not None and methods <= READ_METHODS
    reads_only = (reads_only and kind != "mutation") or kind == "read"
    if kind == "read":
        methods = None  # the message below says why: the rule calls its matches reads
        if compensate is not None and compensate != "none":
            problems.add(at(d, "compensate", loc), "a rule with kind: read gets no compensation")
    if reads_only and snapshot is not None:
        problems.add(at(d, "snapshot", loc), _reads_only("snapshot", methods))
    if reads_only and isinstance(compensate, str) and compensate in NEEDS_SNAPSHOT:
        problems.add(at(d, "compensate", loc), _reads_only(f"compensate: {compensate}", methods))
    if reads_only and isinstance(compensate, dict) and template_references_snapshot(compensate):
        problems.add(at(d, "compensate", loc), _reads_only("${snapshot.body}", methods))
    timeout = None
    if d.get("timeout") is not None:
        try:
            timeout = parse_duration(d["timeout"])
            if timeout <= 0:
                raise ValueError(f"timeout must be more than zero, got {d['timeout']!r}")
            if action != "hold":
                raise ValueError("timeout only applies to rules with action: hold")
        except ValueError as exc:
            problems.add(at(d, "timeout", loc), str(exc))
    return RuleActions(
        risk=risk,
        action=action,
        on_snapshot_error=on_error,
        credentials=credentials,
        guard=guard,
        kind=kind,
        record=_record(d, loc, captures, problems),
        snapshot=snapshot,
        compensate=compensate,
        timeout=timeout,
        reason=_text(d, "reason", loc, problems),
        description=_text(d, "description", loc, problems),
    )


def _reads_only(what: str, methods: frozenset[str] | None) -> str:
    if methods is None:
        return f"{what} needs a mutation, but this rule says kind: read"
    listed = ", ".join(sorted(methods))
    return f"{what} needs a mutation, but this rule only matches reads ({listed})"


def _choice(
    d: dict[str, Any], key: str, choices: tuple[str, ...], default: str, loc: Location, p: Problems
) -> str:
    value = d.get(key)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    p.add(at(d, key, loc), f"invalid {key} {value!r}{Problems.suggest(str(value), choices)}")
    return default


def _text(d: dict[str, Any], key: str, loc: Location, problems: Problems) -> str | None:
    value = d.get(key)
    if value is None or isinstance(value, str):
        return value
    problems.add(at(d, key, loc), f"{key} must be text, got {value!r}")
    return None


def _snapshot(
    d: dict[str, Any], loc: Location, captures: tuple[str, ...], problems: Problems
) -> SnapshotSpec | None:
    value = d.get("snapshot")
    where = at(d, "snapshot", loc)
    if value is None or value is False:
        return None
    if value is True:
        return SnapshotSpec(None)
    if not isinstance(value, dict):
        problems.add(where, "snapshot must be true, false or {url: /path/{capture}}")
        return None
    unknown_keys(value, SNAPSHOT_KEYS, "snapshot", problems, where)
    url = value.get("url")
    if url is None:
        return SnapshotSpec(None)
    url_where = at(value, "url", where)
    if not isinstance(url, str) or not url.strip():
        problems.add(url_where, f"snapshot url must be a URL or path, got {url!r}")
        return None
    # The snapshot is taken before the request is sent: only the request is known then.
    _check_template(url, url_where, "snapshot url", captures, ("request.body",), problems)
    return SnapshotSpec(url)


def _record(
    d: dict[str, Any], loc: Location, captures: tuple[str, ...], problems: Problems
) -> Record | None:
    value = d.get("record")
    where = at(d, "record", loc)
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        problems.add(where, "record must be a mapping of name: template (or a list of templates)")
        return None
    entries: list[RecordEntry] = []
    for name, spec in value.items():
        entry_at = at(value, name, where)
        if not _RECORD_NAME.match(name):
            problems.add(entry_at, f"record name {name!r} must be a word (letters, digits, _)")
            continue
        templates = spec if isinstance(spec, list) else [spec]
        if not templates or any(t is None for t in templates):
            problems.add(entry_at, f"record {name}: give a template such as ${{request.body.x}}")
            continue
        _check_template(spec, entry_at, f"record {name}", captures, RECORD_SOURCES, problems)
        entries.append(RecordEntry(name, tuple(plain_value(t) for t in templates)))
    return Record(tuple(entries))


def _compensate(
    d: dict[str, Any], loc: Location, captures: tuple[str, ...], problems: Problems
) -> str | dict[str, Any] | None:
    value = d.get("compensate")
    where = at(d, "compensate", loc)
    if value is None:
        return None
    if isinstance(value, str):
        name = value.strip()
        if name in known_names():
            return name
        problems.add(where, f"unknown compensator {value!r}{Problems.suggest(name, known_names())}")
        return None
    if not isinstance(value, dict):
        problems.add(
            where, "compensate must be a compensator name or {method, url, body?, headers?}"
        )
        return None
    if "read" in value:  # read before, undo from it, read back (compensators/rpc.py)
        return _compensate_rpc(value, where, captures, problems)
    unknown_keys(value, COMPENSATE_KEYS, "compensate", problems, where)
    method = value.get("method")
    if method is None:
        problems.add(where, "compensate needs a method (e.g. method: DELETE)")
    elif not isinstance(method, str) or method.strip().upper() not in HTTP_METHODS:
        hint = Problems.suggest(str(method).upper(), HTTP_METHODS)
        problems.add(at(value, "method", where), f"unknown compensate method {method!r}{hint}")
    url = value.get("url")
    if url is None:
        problems.add(where, "compensate needs a url (absolute, or a path on the same host)")
    elif not isinstance(url, str) or not url.strip():
        problems.add(at(value, "url", where), f"compensate url must be text, got {url!r}")
    headers = value.get("headers")
    if headers is not None and not isinstance(headers, dict):
        problems.add(at(value, "headers", where), "compensate headers must be a mapping")
    elif headers is not None:
        for name, text in headers.items():
            if not isinstance(text, str | int | float) or isinstance(text, bool):
                problems.add(at(headers, name, where), f"header {name} must be text, got {text!r}")
    for key in ("url", "body", "headers"):
        if key in value:
            _check_template(
                value[key], at(value, key, where), f"compensate {key}", captures, None, problems
            )
    out: dict[str, Any] = plain_value(value)
    if isinstance(method, str):
        out["method"] = method.strip().upper()
    if isinstance(headers, dict):
        out["headers"] = {str(k): str(v) for k, v in headers.items()}
    return out


def _request_spec(
    value: Any,
    where: Location,
    what: str,
    keys: frozenset[str],
    captures: tuple[str, ...],
    sources: tuple[str, ...] | None,
    problems: Problems,
) -> None:
    """One written request of an RPC compensation (`read`, `undo`, `undo_absent`)."""
    if not isinstance(value, dict):
        problems.add(where, f"compensate.{what} must be a mapping {{method, url, body?, ...}}")
        return
    unknown_keys(value, keys, f"compensate.{what}", problems, where)
    method = value.get("method", "GET" if what == "read" else None)
    if not isinstance(method, str) or method.strip().upper() not in HTTP_METHODS:
        hint = Problems.suggest(str(method).upper(), HTTP_METHODS)
        problems.add(at(value, "method", where), f"compensate.{what} needs a method{hint}")
    url = value.get("url")
    if url is not None and (not isinstance(url, str) or not url.strip()):
        problems.add(at(value, "url", where), f"compensate.{what}.url must be a path or URL")
    headers = value.get("headers")
    if headers is not None and not isinstance(headers, dict):
        problems.add(at(value, "headers", where), f"compensate.{what}.headers must be a mapping")
    if "repeatable" in value and not isinstance(value["repeatable"], bool):
        problems.add(at(value, "repeatable", where), "repeatable must be true or false")
    if "form" in value and (not isinstance(value["form"], dict) or "body" in value):
        problems.add(
            at(value, "form", where), "form must be a mapping of name: value, instead of a body"
        )
    for key in ("url", "body", "headers", "form"):
        if key in value:
            _check_template(
                value[key],
                at(value, key, where),
                f"compensate.{what}.{key}",
                captures,
                sources,
                problems,
            )


def _compensate_rpc(
    value: dict[str, Any], where: Location, captures: tuple[str, ...], problems: Problems
) -> dict[str, Any] | None:
    """`compensate: {read, undo, undo_absent}`, checked (compensators/rpc.py)."""
    from undoproxy.compensators import rpc
    from undoproxy.rules.conditions import Condition, ConditionError
    from undoproxy.rules.jsonpaths import JsonPath, simple_path

    before = len(problems.errors)
    unknown_keys(value, rpc.SPEC_KEYS, "compensate", problems, where)
    read = value.get("read")
    # Sent before the step: only the request is known then.
    _request_spec(
        read,
        at(value, "read", where),
        "read",
        rpc.READ_KEYS,
        captures,
        ("request.body",),
        problems,
    )
    if isinstance(read, dict):
        absent = read.get("absent")
        absent_at = at(read, "absent", where)
        if absent is not None and not isinstance(absent, dict):
            problems.add(absent_at, 'absent must be a mapping of "$.jsonpath": condition')
        for key, cond in (absent or {}).items() if isinstance(absent, dict) else ():
            if key == "status":
                codes = cond if isinstance(cond, list) else [cond]
                if not all(isinstance(c, int) and 100 <= c <= 599 for c in codes):
                    problems.add(at(absent, key, absent_at), "absent.status: HTTP status codes")
                continue
            try:
                JsonPath(str(key))
                Condition.compile(cond)
            except (ValueError, ConditionError) as exc:
                problems.add(at(absent, key, absent_at), f"absent: {exc}")
        compare = read.get("compare")
        if compare is not None and (
            not isinstance(compare, list)
            or not all(isinstance(c, str) and simple_path(c) is not None for c in compare)
        ):
            problems.add(
                at(read, "compare", where),
                "compare must be a list of simple JSONPaths ($.a.b, $.items[*].id)",
            )
    if "undo" not in value and "undo_absent" not in value:
        problems.add(where, "compensate with a read needs an undo (and/or undo_absent)")
    for name in ("undo", "undo_absent"):
        if name in value:
            _request_spec(
                value[name],
                at(value, name, where),
                name,
                rpc.UNDO_KEYS,
                captures,
                None,
                problems,
            )
    if len(problems.errors) > before:
        return None
    out: dict[str, Any] = plain_value(value)
    return out


def _check_template(
    value: Any,
    where: Location,
    what: str,
    captures: tuple[str, ...],
    sources: tuple[str, ...] | None,
    problems: Problems,
) -> None:
    """Check every string inside `value`: it parses, its captures exist, its sources are allowed."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_template(v, at(value, k, where), what, captures, sources, problems)
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            item_at = value.where(i) if isinstance(value, YList) else where
            _check_template(v, item_at, what, captures, sources, problems)
        return
    try:
        parts = iter_parts(value)
    except TemplateSyntaxError as exc:
        problems.add(where, f"{what}: {exc}")
        return
    for part in parts:
        if isinstance(part, Capture) and part.name not in captures:
            have = (
                f"it captures {', '.join('{' + c + '}' for c in captures)}"
                if captures
                else "it captures nothing"
            )
            problems.add(
                where, f"{what} uses {{{part.name}}} but match.path has no {{{part.name}}} ({have})"
            )
        elif isinstance(part, Reference) and sources is not None and part.source not in sources:
            problems.add(
                where,
                f"{what} cannot use ${{{part.text}}}: only {', '.join(sources)} is known then",
            )


def at(d: Any, key: str, default: Location) -> Location:
    """Where `key` of a loaded mapping is, or `default` for a plain dict."""
    return d.where(key) if isinstance(d, YDict) else default
