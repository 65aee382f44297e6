"""Datasette's JSON write API (SQL over HTTP, Datasette 1.0) compensators (pure).

Every write is a POST: `/{db}/{table}/-/insert`, `/-/upsert`, `/{db}/{table}/{pks}/-/update`,
`/{db}/{table}/{pks}/-/delete`, `/{db}/-/create`. Before one, undoproxy reads the table's
primary keys (`/{db}/{table}.json?_extra=primary_keys`) and then each row the write names
(`/{db}/{table}/{pks}.json`); after it:

    insert           delete each row it created (its keys from the request, or from the answer
                     with `return: true`); with `replace: true`, upsert the replaced rows back
    upsert           upsert each existing row back whole, delete each row it created
    update           update the columns it changed back to their old values
    delete           insert the row back
    create a table   drop it (a table that existed: irreversible)

Each row is read back at its own URL (its columns as before, or 404). An insert answered
without the rows it made and naming no keys is irreversible: undoproxy cannot tell which rows
are the agent's (send `"return": true`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from undoproxy.compensators import readback
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, PreRead, parse_json
from undoproxy.compensators.model import inverse_request as request

MAX_ROWS = 100  # rows one write may name and still be undone (2 reads each)
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def tilde(value: Any) -> str:
    """A key value as Datasette writes it in a row's URL (tilde encoding)."""
    text = value if isinstance(value, str) else str(value)
    return "".join(chr(b) if b in _SAFE else f"~{b:02X}" for b in text.encode())


def _parts(facts: Facts) -> tuple[str, list[str]]:
    """(the server's origin, the path segments)."""
    p = urlsplit(facts.url)
    return urlunsplit((p.scheme, p.netloc, "", "", "")), [s for s in p.path.split("/") if s]


def _where(facts: Facts) -> tuple[str, str, str, str | None]:
    """(origin, db, table, the row's key path or None) of a write."""
    origin, seg = _parts(facts)
    if len(seg) >= 3 and seg[1] == "-":  # /db/-/create
        return origin, seg[0], "", None
    if len(seg) == 4 and seg[2] == "-":  # /db/table/-/insert
        return origin, seg[0], seg[1], None
    if len(seg) == 5 and seg[3] == "-":  # /db/table/pks/-/update
        return origin, seg[0], seg[1], seg[2]
    raise Irreversible("not a Datasette write URL this pack knows")


def _action(facts: Facts) -> str:
    return _parts(facts)[1][-1]


def _body(facts: Facts) -> dict[str, Any]:
    body = facts.request_json
    return body if isinstance(body, dict) else {}


def _table_url(origin: str, db: str, table: str) -> str:
    return f"{origin}/{db}/{table}"


def _row_url(facts: Facts, key: str) -> str:
    origin, db, table, _ = _where(facts)
    return f"{_table_url(origin, db, table)}/{key}"


def _pks(facts: Facts) -> list[str]:
    """The table's primary keys (rowid when it has none), read before the step."""
    snap = facts.reads.get("table")
    doc = parse_json(snap.body) if snap is not None and snap.existed else None
    if not isinstance(doc, dict):
        raise Irreversible("the table could not be read before the write")
    pks = [str(k) for k in doc.get("primary_keys") or []]
    return pks or ["rowid"]


def _key_of(row: dict[str, Any], pks: list[str]) -> str | None:
    if not all(k in row and row[k] is not None for k in pks):
        return None
    return ",".join(tilde(row[k]) for k in pks)


def _rows(facts: Facts) -> list[dict[str, Any]]:
    body = _body(facts)
    rows = body.get("rows") if "rows" in body else [body.get("row")]
    return [r for r in rows or [] if isinstance(r, dict)]


def _named_keys(facts: Facts) -> list[str]:
    """The row keys a write names before it is sent (known from the request)."""
    act = _action(facts)
    key = _where(facts)[3]
    if key is not None:
        return [key]
    if act in ("insert", "upsert"):
        pks = _pks(facts)
        keys = [_key_of(r, pks) for r in _rows(facts)]
        if len(keys) > MAX_ROWS:
            raise Irreversible(f"the {act} names more than {MAX_ROWS} rows")
        return [k for k in dict.fromkeys(keys) if k is not None]
    return []


def reads(facts: Facts) -> list[PreRead]:
    """Round 1: the table's primary keys; round 2: each row the write names."""
    origin, db, table, _ = _where(facts)
    if _action(facts) == "create":
        name = _body(facts).get("table")
        if not isinstance(name, str) or not name:
            raise Irreversible("the create names no table")
        url = f"{_table_url(origin, db, tilde(name))}.json?_size=0"
        return [PreRead("table", "GET", url)]
    first = PreRead(
        "table", "GET", f"{_table_url(origin, db, table)}.json?_size=0&_extra=primary_keys"
    )
    if "table" not in facts.reads:
        return [first]
    return [first] + [
        PreRead(f"row {k}", "GET", _row_url(facts, k) + ".json") for k in _named_keys(facts)
    ]


def _before(facts: Facts, key: str) -> dict[str, Any] | None:
    snap = facts.reads.get(f"row {key}")
    if snap is None:
        raise Irreversible(f"the row {key} was not read before the write")
    if not snap.existed:
        return None
    doc = parse_json(snap.body)
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        raise Irreversible(f"the row {key} read before the write is not a Datasette row")
    return dict(rows[0])


def _check(facts: Facts, key: str, row: dict[str, Any] | None) -> dict[str, Any]:
    url = _row_url(facts, key) + ".json"
    if row is None:
        return readback.gone(url)
    return readback.readback(url, readback.same_digest(["rows", 0], row))


def _post(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    out = request("POST", url, body if body is not None else {})
    out["expect_ok"] = True  # Datasette answers {"ok": true}
    return out


def undo_rows(facts: Facts) -> dict[str, Any]:
    """insert, upsert, update, delete: every row it wrote as it was."""
    act = _action(facts)
    origin, db, table, _ = _where(facts)
    base = _table_url(origin, db, table)
    pks = _pks(facts)
    keys = _named_keys(facts)
    if act == "insert":
        answer = facts.response_json
        made = answer.get("rows") if isinstance(answer, dict) else None
        from_answer = [_key_of(r, pks) for r in made or [] if isinstance(r, dict)]
        keys = list(dict.fromkeys([*keys, *[k for k in from_answer if k]]))
        if not keys:
            raise Irreversible(
                "the insert names no primary key and its answer lists no rows (send "
                '"return": true): which rows it made cannot be told'
            )
    requests: list[dict[str, Any]] = []
    restore: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    body = _body(facts)
    for key in keys:
        old = _before(facts, key) if f"row {key}" in facts.reads else None
        checks.append(_check(facts, key, old))
        if act == "delete":
            if old is not None:
                requests.append(_post(f"{base}/-/insert", {"row": old}))
        elif act == "update":
            if old is not None:
                changed = dict(body.get("update") or {})
                requests.append(
                    _post(
                        _row_url(facts, key) + "/-/update",
                        {"update": {c: old.get(c) for c in changed}},
                    )
                )
        elif old is None:
            requests.append(_post(_row_url(facts, key) + "/-/delete"))
        elif act == "upsert" or body.get("replace"):
            restore.append(old)
    if restore:
        requests.insert(0, _post(f"{base}/-/upsert", {"rows": restore}))
    if not requests:
        raise NothingToUndo("a read just before the write found nothing it could change", "read")
    out = dict(requests[0])
    if len(requests) > 1:
        out["then"] = requests[1:]
    out["repeatable"] = True
    out["readback"] = {"targets": checks}
    return out


def undo_create(facts: Facts) -> dict[str, Any]:
    """A table created: drop it (read back: the table is gone)."""
    snap = facts.reads.get("table")
    if snap is None:
        raise Irreversible("whether the table existed could not be read")
    origin, db, _, _ = _where(facts)
    name = tilde(_body(facts).get("table"))
    if snap.existed:
        raise Irreversible(
            "the table existed before: the create wrote rows into it, which it does not name"
        )
    out = _post(f"{_table_url(origin, db, name)}/-/drop", {"confirm": True})
    out["readback"] = readback.gone(f"{_table_url(origin, db, name)}.json?_size=0")
    out["repeatable"] = True
    return out


READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    "datasette.rows": reads,
    "datasette.create-table": reads,
}

BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "datasette.rows": undo_rows,
    "datasette.create-table": undo_create,
}

DESCRIPTIONS = {
    "datasette.rows": "each row it wrote back as it was (deleted, upserted back, updated back, "
    "inserted back), read back at the row's URL",
    "datasette.create-table": "drop the table it created",
}
