"""How a pack's undo is read back: the URL to GET and what its answer must show (pure).

A pack compensation often cannot be compared with a whole snapshot (GitHub's `updated_at`
changes on every write, a closed issue is not the absence of one, Stripe reads a deleted
customer back as `{"deleted": true}`). Its builder says instead what a read of the target must
show, field by field, and stores that with the compensation as `readback`:

    {"url": "https://api.github.com/repos/o/r/issues/7",
     "expect": [{"path": ["state"], "equals": "closed"}]}
    {"url": "https://api.github.com/repos/o/r/labels/bug", "gone": true}

A read-back of a step that deleted the target says `"left_gone": true` (gone is as it left
it); one that created it may give `left` checks as well as `gone`.

An RPC API reads by POST (DynamoDB's GetItem, etcd's `/v3/kv/range`, a vector store's `get`):
its read-back says the request to send, which is a read and never changes anything (so it
is retried like a GET), and, when the API answers "no such thing" with something other than
404/410, what that answer is (`absent_when`; AWS JSON APIs answer HTTP 400 with a `__type`
ending `ResourceNotFoundException`):

    {"method": "POST", "url": "https://dynamodb…/", "body_b64": "…",
     "read_headers": {"X-Amz-Target": "DynamoDB_20120810.GetItem",
                      "Content-Type": "application/x-amz-json-1.0"},
     "expect": [{"path": ["Item"], "equals": {"id": {"S": "7"}, "n": {"N": "1"}}}]}

A path is a list of keys and list indexes, `"*"` for every item of a list (or value of an
object). `equals`: the value at `path` (missing reads as null; with `"*"` the values, compared
as a set); `sha256`: the same, kept only as a digest (a secret's value is never stored in
clear); `excludes`: none of the values at `path` is one of these. An `equals` check may
also give `ignore`: members of an object left out on both sides (CouchDB's `_rev`, which
every write changes). A read-back of a compensation that overwrites fields also has `left`:
the same fields as the agent's step left them. Rollback reads them before overwriting: a
target that is neither as before nor as left was changed by someone else since (a conflict),
and is not overwritten. Rollback's judge GETs the URL with the agent's credentials and calls
`differences`; only an empty answer is `compensated`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

Path = list[str | int]


def expect(path: Path, value: Any) -> dict[str, Any]:
    """The value at `path` must be `value`."""
    return {"path": path, "equals": value}


def digest_of(value: Any) -> str:
    """The SHA-256 of a value as canonical JSON (a `*` path's values as a sorted set)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def same_digest(path: Path, value: Any, fields: list[str] | None = None) -> dict[str, Any]:
    """The value at `path` must be `value`, kept only as its SHA-256: what a record holds (a
    row, an item, a secret) is never stored in clear by a read-back, only compared. With `*`
    in `path` the values are compared as a set; `fields` compares only those members of each
    (etcd's revisions, set by the server on every write, left out)."""
    check: dict[str, Any] = {"path": path}
    if fields is not None:
        check["fields"] = list(fields)
    check["sha256"] = digest_of(_held(value, "*" in path, fields))
    return check


def _held(value: Any, many: bool, fields: list[str] | None) -> Any:
    """What a digest check hashes: the value, projected to `fields`, sorted when many."""
    if many:
        items = [_project(v, fields) for v in value or []]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    return _project(value, fields)


def _project(value: Any, fields: list[str] | None) -> Any:
    if fields is None or not isinstance(value, dict):
        return value
    return {k: value[k] for k in fields if k in value}


def excludes(path: Path, values: list[Any], within: Path | None = None) -> dict[str, Any]:
    """No value at `path` may be one of `values`; the list they are looked for in (the path
    before its `*`, or `within` for an API that leaves an empty list out) must be there."""
    check: dict[str, Any] = {"path": path, "excludes": values}
    if within is not None:
        check["within"] = within
    return check


def readback(url: str, *checks: dict[str, Any]) -> dict[str, Any]:
    """A read-back of `url` that must pass every check."""
    return {"url": url, "expect": list(checks)}


def gone(url: str) -> dict[str, Any]:
    """A read-back of `url` that must answer 404 or 410."""
    return {"url": url, "gone": True}


def rpc_read(
    method: str,
    url: str,
    body: Any,
    headers: dict[str, str] | None = None,
    absent_when: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The request part of an RPC read-back (a POST with a body that only reads): add
    `expect`, `gone` or `left` to it. `body` is JSON, or bytes sent as they are. Also a
    read-back's `target`: the resource's name for rollback (an RPC API reaches every resource
    through one URL, so the URL cannot name it)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    out: dict[str, Any] = {
        "method": method.upper(),
        "url": url,
        "body_b64": base64.b64encode(raw).decode(),
        "read_headers": dict(headers or {}),
    }
    if absent_when:
        out["absent_when"] = absent_when
    return out


def target_name(spec: dict[str, Any]) -> str:
    """One name for what an RPC read reads (its method, URL and body): two steps whose undo
    reads the same are on the same target, undone newest first."""
    digest = hashlib.sha256(str(spec.get("body_b64") or "").encode()).hexdigest()[:16]
    return f"{spec.get('method', 'GET')} {spec.get('url', '')} {digest}"


def absent_when(statuses: list[int], body: dict[str, Any] | None = None) -> dict[str, Any]:
    """How an API answers "no such thing" other than 404/410: one of `statuses`, with every
    JSONPath condition of `body` holding on its JSON (as `match.body` conditions read):
    `absent_when([400], {"$.__type": {"regex": "ResourceNotFoundException$"}})`."""
    return {"status": list(statuses), "body": dict(body or {})}


def absent_answer(spec: dict[str, Any] | None, status: int, body: bytes) -> str:
    """Why an answer is the API's "no such thing" as `spec` (`absent_when`) declares it, or
    '' when it is not (then it is judged by its status alone)."""
    if not spec or status not in (spec.get("status") or []):
        return ""
    # rules.conditions is pure; imported here, as rules import the compensator catalog
    from undoproxy.rules.conditions import Condition, ConditionError
    from undoproxy.rules.jsonpaths import JsonPath

    try:
        doc = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    conditions = dict(spec.get("body") or {})
    for path, condition in conditions.items():
        try:
            found = JsonPath(str(path)).find(doc) if doc is not None else []
            if not Condition.compile(condition).holds(found):
                return ""
        except (ValueError, ConditionError):
            return ""
    kind = doc.get("__type") if isinstance(doc, dict) else None
    if isinstance(kind, str):
        return f"{kind.rsplit('#', 1)[-1]}: no such thing"
    return "no such thing, as the pack reads this answer"


def request_of(spec: dict[str, Any]) -> tuple[str, dict[str, str], bytes | None]:
    """(method, headers, body) of a read-back's read: a GET unless it names another."""
    method = str(spec.get("method") or "GET").upper()
    headers = {str(k): str(v) for k, v in (spec.get("read_headers") or {}).items()}
    body = base64.b64decode(spec["body_b64"]) if spec.get("body_b64") else None
    return method, headers, body


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _without(value: Any, ignore: list[str]) -> Any:
    if ignore and isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in ignore}
    return value


def _changed(now: dict[str, Any], was: dict[str, Any]) -> list[str]:
    """The members that differ, were added or went missing (names only)."""
    keys = now.keys() | was.keys()
    return sorted(k for k in keys if k not in now or k not in was or not _same(now[k], was[k]))


def _as_set(values: list[Any]) -> list[str]:
    return sorted(json.dumps(v, sort_keys=True) for v in values)


def find(doc: Any, path: Path) -> list[Any]:
    """Every value at `path` in `doc` (none when a key or index is missing)."""
    current = [doc]
    for key in path:
        nxt: list[Any] = []
        for value in current:
            if key == "*":
                if isinstance(value, list):
                    nxt.extend(value)
                elif isinstance(value, dict):
                    nxt.extend(value.values())
            elif isinstance(key, int) and isinstance(value, list):
                if -len(value) <= key < len(value):
                    nxt.append(value[key])
            elif isinstance(value, dict) and str(key) in value:
                nxt.append(value[str(key)])
        current = nxt
    return current


def _is_collection(doc: Any, path: Path) -> bool:
    """True when `path` (no `*` in it) names one list or object in `doc` (empty: `doc`)."""
    found = find(doc, path) if path else [doc]
    return len(found) == 1 and isinstance(found[0], list | dict)


def value_at(doc: Any, path: Path) -> Any:
    """The value at `path` as `equals` compares it: a list with `"*"`, else one value or None."""
    found = find(doc, path)
    if "*" in path:
        return found
    return found[0] if found else None


def left_by(response: Any, checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same checks, with the values the agent's write left (read from its response)."""
    return [expect(list(c["path"]), value_at(response, list(c["path"]))) for c in checks]


def differences(checks: list[dict[str, Any]], body: Any) -> list[str]:
    """The checks a read's JSON body fails, naming fields, never values ([] when all pass)."""
    return differences_in_pages(checks, [body])


def _container(path: Path) -> Path:
    """The part of a path before its first `*`: what must exist for "none of them" to mean
    anything (`messages` of `messages.*.ts`)."""
    return path[: path.index("*")] if "*" in path else path[:-1]


def differences_in_pages(checks: list[dict[str, Any]], pages: list[Any]) -> list[str]:
    """`differences` over a listing read page by page: a path with `*` gathers its values from
    every page; any other path is read on the first page. An `excludes` check fails when the
    list it looks in is not there at all: an answer that lists nothing shows nothing gone."""
    out: list[str] = []
    body = pages[0] if pages else None
    for check in checks:
        path = list(check.get("path") or [])
        many = "*" in path
        found = [v for page in pages for v in find(page, path)] if many else find(body, path)
        field = ".".join(str(k) for k in path)
        if "excludes" in check:
            holder = list(check.get("within") or _container(path))
            if not pages or not all(_is_collection(page, holder) for page in pages):
                where = ".".join(str(k) for k in holder) or "the list"
                out.append(f"{where} is not in the answer, so it cannot show what was added gone")
                continue
        if "equals" in check:
            ignore = [str(k) for k in check.get("ignore") or []]
            wanted = check["equals"]
            if "*" in path:
                ok = _as_set([_without(v, ignore) for v in found]) == _as_set(
                    [_without(v, ignore) for v in wanted or []]
                )
            else:
                now, was = _without(found[0] if found else None, ignore), _without(wanted, ignore)
                ok = _same(now, was)
                if not ok and isinstance(now, dict) and isinstance(was, dict):
                    field = f"{field or 'the document'} ({', '.join(_changed(now, was)[:5])})"
            if not ok:
                out.append(f"{field or 'the body'} is not as before")
        if "sha256" in check:
            held = _held(
                found if many else (found[0] if found else None), many, check.get("fields")
            )
            if digest_of(held) != check["sha256"]:
                out.append(f"{field or 'the body'} is not as before")
        if "excludes" in check:
            banned = _as_set(list(check["excludes"]))
            if any(json.dumps(v, sort_keys=True) in banned for v in found):
                out.append(f"{field} still has what the step added")
    return out
