"""A faithful fake of PostgREST (SQL over HTTP, PostgreSQL's REST server; Supabase's
`/rest/v1`), over SQLite, following its documented HTTP API: PostgREST itself installs from
neither PyPI, npm nor Debian. Tests drive it with the vendor's Python client (`postgrest`,
Supabase's postgrest-py), through undoproxy.

What it implements, as documented (postgrest.org, "API" and "Prefer header"):
- `GET /` an OpenAPI 2.0 description; a primary key column's description is
  `Note:\\nThis is a Primary Key.<pk/>`;
- `GET /{table}?col=op.value&select=&order=&limit=`: `eq neq gt gte lt lte like ilike is in`
  filters, a JSON array of rows (`Accept: application/vnd.pgrst.object+json`: one object, else
  406);
- `POST /{table}` (an object or an array), `PATCH /{table}?filters` (an object), `DELETE
  /{table}?filters`; `Prefer: return=representation` answers the rows (else `minimal`, no
  body), `resolution=merge-duplicates` upserts on the primary key, `ignore-duplicates` skips;
- errors as `{"code", "message", "details", "hint"}`: 404 `42P01` an unknown table, 400
  `42703` an unknown column, 409 `23505` a duplicate key, 401 without the bearer token.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.servers import ThreadedServer

PK_NOTE = "Note:\nThis is a Primary Key.<pk/>"
_OPS = {"eq": "=", "neq": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_RESERVED = {"select", "order", "limit", "offset", "on_conflict", "columns"}


def _error(status: int, code: str, message: str) -> web.Response:
    body = {"code": code, "message": message, "details": None, "hint": None}
    return web.json_response(body, status=status)


def _in_values(text: str) -> list[str]:
    """`(1,2,"a,b")` -> ["1", "2", "a,b"]."""
    inner = text.strip()[1:-1]
    return [m[0] if m[0] else m[1] for m in re.findall(r'"((?:[^"\\]|\\.)*)"|([^,]+)', inner)]


class PostgrestFake:
    """The fake's state: one SQLite database, one bearer token."""

    def __init__(self, path: Path, token: str) -> None:
        self.path = path
        self.token = token
        self.lock = threading.Lock()

    def db(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path)
        con.row_factory = sqlite3.Row
        return con

    def tables(self) -> dict[str, list[tuple[str, str, bool]]]:
        """table -> [(column, type, is primary key)]."""
        with self.db() as con:
            names = [
                r[0]
                for r in con.execute("select name from sqlite_master where type='table'")
                if not r[0].startswith("sqlite_")
            ]
            return {
                n: [(c[1], c[2], bool(c[5])) for c in con.execute(f'pragma table_info("{n}")')]
                for n in names
            }

    # --- requests --------------------------------------------------------------------------

    def authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    def where(
        self, request: web.Request, columns: set[str]
    ) -> tuple[str, list[Any]] | web.Response:
        clauses, args = [], []
        for name, value in request.query.items():
            if name in _RESERVED:
                continue
            if name not in columns:
                return _error(400, "42703", f"column {name} does not exist")
            op, _, operand = value.partition(".")
            negate = op == "not"
            if negate:
                op, _, operand = operand.partition(".")
            if op in _OPS:
                clause, extra = f'"{name}" {_OPS[op]} ?', [operand]
            elif op in ("like", "ilike"):
                clause, extra = f'"{name}" like ?', [operand.replace("*", "%")]
            elif op == "is":
                clause, extra = f'"{name}" is {"null" if operand == "null" else operand}', []
            elif op == "in":
                values = _in_values(operand)
                clause = f'"{name}" in ({",".join("?" * len(values))})'
                extra = values
            else:
                return _error(400, "PGRST100", f"unknown operator {op}")
            clauses.append(f"not ({clause})" if negate else clause)
            args.extend(extra)
        return (" where " + " and ".join(clauses) if clauses else ""), args

    def rows(
        self, con: sqlite3.Connection, table: str, where: str, args: list[Any]
    ) -> list[dict[str, Any]]:
        return [dict(r) for r in con.execute(f'select * from "{table}"{where}', args)]


def create_app(fake: PostgrestFake) -> web.Application:
    """The fake as an aiohttp app (routes below)."""

    async def root(request: web.Request) -> web.Response:
        definitions = {
            table: {
                "required": [c for c, _, pk in cols if pk],
                "properties": {
                    c: {
                        "type": "integer" if "INT" in t.upper() else "string",
                        **({"description": PK_NOTE} if pk else {}),
                    }
                    for c, t, pk in cols
                },
                "type": "object",
            }
            for table, cols in fake.tables().items()
        }
        return web.json_response({"swagger": "2.0", "definitions": definitions, "paths": {}})

    async def table(request: web.Request) -> web.Response:
        if not fake.authorized(request):
            return _error(401, "PGRST301", "JWT invalid")
        name = request.match_info["table"]
        cols = fake.tables().get(name)
        if cols is None:
            return _error(404, "42P01", f'relation "public.{name}" does not exist')
        columns = {c for c, _, _ in cols}
        pks = [c for c, _, pk in cols if pk]
        prefer = request.headers.get("Prefer", "")
        representation = "return=representation" in prefer
        found = fake.where(request, columns)
        if isinstance(found, web.Response):
            return found
        where, args = found
        with fake.lock, fake.db() as con:
            if request.method == "GET":
                order = request.query.get("order")
                sql = f'select * from "{name}"{where}'
                if order:
                    col, _, direction = order.partition(".")
                    sql += f' order by "{col}" {"desc" if direction == "desc" else "asc"}'
                if "limit" in request.query:
                    sql += f" limit {int(request.query['limit'])}"
                rows = [dict(r) for r in con.execute(sql, args)]
                if request.headers.get("Accept") == "application/vnd.pgrst.object+json":
                    if len(rows) != 1:
                        return _error(
                            406, "PGRST116", "JSON object requested, multiple (or no) rows returned"
                        )
                    return web.json_response(rows[0])
                return web.json_response(rows)
            body = await request.json() if request.can_read_body else None
            if request.method == "POST":
                items = body if isinstance(body, list) else [body]
                made = []
                for item in items:
                    unknown = set(item) - columns
                    if unknown:
                        return _error(
                            400, "PGRST204", f"Could not find the '{sorted(unknown)[0]}' column"
                        )
                    keys = list(item)
                    marks = ",".join("?" * len(keys))
                    names = ",".join(f'"{k}"' for k in keys)
                    verb = "insert"
                    if "resolution=merge-duplicates" in prefer:
                        verb = "insert or replace"
                        existing = con.execute(
                            f'select * from "{name}" where '
                            + " and ".join(f'"{k}" = ?' for k in pks),
                            [item.get(k) for k in pks],
                        ).fetchone()
                        if existing is not None:  # merge: columns not given keep their values
                            item = {**dict(existing), **item}
                            keys = list(item)
                            marks = ",".join("?" * len(keys))
                            names = ",".join(f'"{k}"' for k in keys)
                    elif "resolution=ignore-duplicates" in prefer:
                        verb = "insert or ignore"
                    try:
                        cur = con.execute(
                            f'{verb} into "{name}" ({names}) values ({marks})',
                            [item[k] for k in keys],
                        )
                    except sqlite3.IntegrityError as exc:
                        con.rollback()
                        return _error(
                            409, "23505", f"duplicate key value violates unique constraint ({exc})"
                        )
                    if cur.rowcount:
                        made.append(
                            dict(
                                con.execute(
                                    f'select * from "{name}" where rowid = ?', [cur.lastrowid]
                                ).fetchone()
                            )
                        )
                con.commit()
                return (
                    web.json_response(made, status=201)
                    if representation
                    else web.Response(status=201)
                )
            if request.method == "PATCH":
                if not isinstance(body, dict) or set(body) - columns:
                    return _error(400, "PGRST204", "Could not find a column of the payload")
                before = fake.rows(con, name, where, args)
                sets = ",".join(f'"{k}" = ?' for k in body)
                con.execute(f'update "{name}" set {sets}{where}', [*body.values(), *args])
                con.commit()
                keys = [tuple(r[k] for k in pks) for r in before]
                after = [
                    r for r in fake.rows(con, name, "", []) if tuple(r[k] for k in pks) in keys
                ]
                return web.json_response(after) if representation else web.Response(status=204)
            # DELETE
            gone = fake.rows(con, name, where, args)
            con.execute(f'delete from "{name}"{where}', args)
            con.commit()
            return web.json_response(gone) if representation else web.Response(status=204)

    app = web.Application()
    app.router.add_get("/", root)
    app.router.add_route("*", "/{table}", table)
    return app


def serve(directory: Path, token: str) -> tuple[PostgrestFake, ThreadedServer]:
    """The fake over `directory/db.sqlite`, on a free port."""
    fake = PostgrestFake(directory / "db.sqlite", token)
    return fake, ThreadedServer(create_app(fake)).start()


def dump(fake: PostgrestFake, table: str) -> list[dict[str, Any]]:
    """Every row of a table, straight from the database (the truth a test reads)."""
    with fake.db() as con:
        return [dict(r) for r in con.execute(f'select * from "{table}" order by 1')]


__all__ = ["PostgrestFake", "create_app", "dump", "json", "serve"]
