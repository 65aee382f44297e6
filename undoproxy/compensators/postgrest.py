"""PostgREST (SQL over HTTP; Supabase's `/rest/v1`) compensators: rows undone by primary key
(pure).

A write names rows by filters in its query (`PATCH /notes?author=eq.ada`), so before it
undoproxy reads the table's primary key from PostgREST's OpenAPI description (`GET /`: a key
column is described `<pk/>`), then the rows the write will touch: for a `PATCH` or `DELETE`
the same filters (`GET /notes?author=eq.ada`, up to MAX_ROWS), for a `POST` the keys it
names. After it:

    PATCH            the old rows upserted back whole (`Prefer: resolution=merge-duplicates`)
    PUT              the one row it names upserted back, or deleted when it created it
    DELETE           the old rows inserted back
    POST (insert)    the rows it created deleted (keys from the request, or from the answer:
                     `Prefer: return=representation`, as Supabase's clients ask); an upsert's
                     overwritten rows upserted back

Read back: `GET /notes?id=in.(…)` shows exactly the rows as before. A table whose primary key
has several columns, or a `PATCH` that changes the key, is irreversible.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from undoproxy.compensators import readback
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, PreRead, parse_json
from undoproxy.compensators.model import inverse_request as request

MAX_ROWS = 1000  # rows one write may touch and still be undone (read before it)
_NOT_FILTERS = frozenset({"select", "order", "limit", "offset", "on_conflict", "columns"})
JSON = {"Accept": "application/json"}


def _split(facts: Facts) -> tuple[str, str, str]:
    """(the table's URL, the API root URL, the table name)."""
    p = urlsplit(facts.url)
    path = p.path.rstrip("/")
    root, _, table = path.rpartition("/")
    if not table:
        raise Irreversible("the request names no table")
    return (
        urlunsplit((p.scheme, p.netloc, path, "", "")),
        urlunsplit((p.scheme, p.netloc, root + "/", "", "")),
        table,
    )


def _filters(facts: Facts) -> list[tuple[str, str]]:
    query = urlsplit(facts.url).query
    return [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in _NOT_FILTERS]


def _quoted(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _by_keys(table_url: str, pk: str, keys: list[Any], *, ordered: bool = True) -> str:
    values = ",".join(_quoted(k) for k in keys)
    query = {pk: f"in.({values})", **({"order": f"{pk}.asc"} if ordered else {})}
    return f"{table_url}?{urlencode(query)}"


def _pk(facts: Facts) -> str:
    """The table's one primary key column, from the OpenAPI description read before."""
    snap = facts.reads.get("openapi")
    doc = parse_json(snap.body) if snap is not None and snap.existed else None
    table = _split(facts)[2]
    props = ((doc or {}).get("definitions") or {}).get(table, {}).get("properties")
    if not isinstance(props, dict):
        raise Irreversible(f"PostgREST's description does not list the table {table}")
    keys = [c for c, p in props.items() if "<pk/>" in str((p or {}).get("description") or "")]
    if len(keys) != 1:
        raise Irreversible(
            f"the table {table} has {'no' if not keys else 'a composite'} primary key: "
            "undoproxy undoes rows by one key column"
        )
    return str(keys[0])


def _body_rows(facts: Facts) -> list[dict[str, Any]]:
    body = facts.request_json
    rows = body if isinstance(body, list) else [body]
    return [r for r in rows if isinstance(r, dict)]


def _prefer(facts: Facts) -> str:
    return facts.request_headers.get("prefer", "")


def reads(facts: Facts) -> list[PreRead]:
    """Round 1: the OpenAPI description; round 2: the rows the write touches."""
    table_url, root, _ = _split(facts)
    first = PreRead("openapi", "GET", root, dict(JSON))
    if "openapi" not in facts.reads:
        return [first]
    pk = _pk(facts)
    if facts.method in ("PATCH", "DELETE", "PUT"):
        filters = _filters(facts)
        if not filters:
            raise Irreversible(f"a {facts.method} without filters touches every row of the table")
        url = f"{table_url}?{urlencode([*filters, ('limit', str(MAX_ROWS + 1))])}"
        return [first, PreRead("rows", "GET", url, dict(JSON))]
    keys = [r[pk] for r in _body_rows(facts) if r.get(pk) is not None]
    if len(keys) > MAX_ROWS:
        raise Irreversible(f"the insert names more than {MAX_ROWS} rows")
    if not keys:
        return [first]
    return [first, PreRead("rows", "GET", _by_keys(table_url, pk, keys), dict(JSON))]


def _before(facts: Facts) -> list[dict[str, Any]]:
    snap = facts.reads.get("rows")
    if snap is None:
        return []
    rows = parse_json(snap.body)
    if not isinstance(rows, list):
        raise Irreversible("the rows could not be read before the write")
    if len(rows) > MAX_ROWS:
        raise Irreversible(f"the write touches more than {MAX_ROWS} rows: undo it by hand")
    return [r for r in rows if isinstance(r, dict)]


def _upsert(table_url: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    prefer = "resolution=merge-duplicates,return=minimal"
    return request("POST", table_url, rows, "application/json", {"Prefer": prefer})


def undo_rows(facts: Facts) -> dict[str, Any]:
    """PATCH, DELETE, POST: every row it touched back as it was."""
    table_url, _, _ = _split(facts)
    pk = _pk(facts)
    before = _before(facts)
    old = {r.get(pk): r for r in before}
    requests: list[dict[str, Any]] = []
    if facts.method == "PATCH":
        body = facts.request_json
        if isinstance(body, dict) and pk in body:
            raise Irreversible("the update changes the primary key of the rows it matched")
        if not before:
            raise NothingToUndo("a read just before the update found no row it matches", "read")
        requests.append(_upsert(table_url, before))
        keys = list(old)
    elif facts.method == "PUT":  # one row, named by its key: upserted
        row = facts.request_json if isinstance(facts.request_json, dict) else {}
        keys = list(old) or ([row[pk]] if pk in row else [])
        if not keys:
            raise Irreversible("the PUT names no primary key value")
        if before:
            requests.append(_upsert(table_url, before))
        else:
            requests.append(request("DELETE", _by_keys(table_url, pk, keys, ordered=False)))
    elif facts.method == "DELETE":
        if not before:
            raise NothingToUndo("a read just before the delete found no row it matches", "read")
        requests.append(request("POST", table_url, before, "application/json"))
        keys = list(old)
    else:
        answer = facts.response_json
        named = [r[pk] for r in _body_rows(facts) if r.get(pk) is not None]
        made = (
            [r[pk] for r in answer or [] if isinstance(r, dict) and pk in r]
            if isinstance(answer, list)
            else []
        )
        keys = list(dict.fromkeys([*named, *made]))
        if not keys:
            raise Irreversible(
                "the insert names no primary key and its answer lists no rows (send "
                "Prefer: return=representation): which rows it made cannot be told"
            )
        upsert = "resolution=merge-duplicates" in _prefer(facts)
        created = [k for k in keys if k not in old]
        if upsert and old:
            requests.append(_upsert(table_url, list(old.values())))
        if created:
            requests.append(request("DELETE", _by_keys(table_url, pk, created, ordered=False)))
        if not requests:
            raise NothingToUndo("every row it names was there before and left as it was", "read")
    out = dict(requests[0])
    if len(requests) > 1:
        out["then"] = requests[1:]
    out["repeatable"] = True
    check = readback.readback(
        _by_keys(table_url, pk, keys),
        readback.same_digest(["*"], [old[k] for k in keys if k in old]),
    )
    out["readback"] = check
    out["target"] = "postgrest " + check["url"]
    return out


READS: dict[str, Callable[[Facts], list[PreRead]]] = {"postgrest.rows": reads}
BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {"postgrest.rows": undo_rows}
DESCRIPTIONS = {
    "postgrest.rows": "every row a PATCH, DELETE or POST touched back as it was (upserted, "
    "inserted back, or deleted), by primary key, read back by key",
}
