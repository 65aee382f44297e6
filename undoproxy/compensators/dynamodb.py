"""DynamoDB compensators: item writes undone item by item (pure).

Before a write undoproxy reads, with its own signing key, each table's key schema
(DescribeTable) and then each item the write names (GetItem, ConsistentRead); after it:

    PutItem, UpdateItem, DeleteItem      the item back as it was (PutItem of the old item), or
                                         deleted when the write created it (DeleteItem)
    BatchWriteItem                       the same for each item (up to 25), but for those the
                                         answer lists as UnprocessedItems (nothing done)
    TransactWriteItems                   the same for each Put, Update and Delete (up to 100)
    CreateTable                          DeleteTable (read back: DescribeTable says not found)

Several items are put back in one TransactWriteItems (all or nothing); each is read back by
its own GetItem, which must show the item exactly as before (or not found). DeleteTable and
UpdateTable are irreversible (the pack holds DeleteTable).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from undoproxy.compensators import awsjson, readback
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, PreRead

MAX_ITEMS = 100  # DynamoDB's own limit for a transaction; a batch write takes 25
ItemKey = tuple[str, str]  # (table, the key as canonical JSON)


def _key_json(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def _item_name(table: str, key_json: str) -> str:
    digest = hashlib.sha256(f"{table}\0{key_json}".encode()).hexdigest()[:24]
    return f"item {digest}"


def _table(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Irreversible("the write names no TableName")
    return value


# --- what a write touches ------------------------------------------------------------------


class _Write:
    """One item a request writes: its table, its key or its whole new item."""

    def __init__(self, table: str, key: Any, item: Any, kind: str) -> None:
        self.table = table
        self.key = key if isinstance(key, dict) else None
        self.item = item if isinstance(item, dict) else None
        self.kind = kind  # put | update | delete


def _writes(facts: Facts) -> list[_Write]:
    """Every item the request writes, in order."""
    body = awsjson.body(facts)
    act = awsjson.action(facts)
    out: list[_Write] = []
    if act == "PutItem":
        out.append(_Write(_table(body.get("TableName")), None, body.get("Item"), "put"))
    elif act in ("UpdateItem", "DeleteItem"):
        kind = "update" if act == "UpdateItem" else "delete"
        out.append(_Write(_table(body.get("TableName")), body.get("Key"), None, kind))
    elif act == "BatchWriteItem":
        for table, requests in (body.get("RequestItems") or {}).items():
            for r in requests if isinstance(requests, list) else []:
                if isinstance(r, dict) and "PutRequest" in r:
                    out.append(_Write(table, None, (r["PutRequest"] or {}).get("Item"), "put"))
                elif isinstance(r, dict) and "DeleteRequest" in r:
                    out.append(_Write(table, (r["DeleteRequest"] or {}).get("Key"), None, "delete"))
    elif act == "TransactWriteItems":
        for entry in body.get("TransactItems") or []:
            if not isinstance(entry, dict):
                continue
            for op, kind in (("Put", "put"), ("Update", "update"), ("Delete", "delete")):
                spec = entry.get(op)
                if isinstance(spec, dict):
                    item = spec.get("Item") if kind == "put" else None
                    out.append(_Write(_table(spec.get("TableName")), spec.get("Key"), item, kind))
    else:
        raise Irreversible(f"no compensation is known for DynamoDB {act or 'this call'}")
    if not out:
        raise Irreversible(f"the {act} names no item")
    if len(out) > MAX_ITEMS:
        raise Irreversible(f"the {act} writes more than {MAX_ITEMS} items")
    return out


def _schema(facts: Facts, table: str) -> list[str]:
    """The table's key attribute names, from the DescribeTable read before the step."""
    doc = awsjson.answer(facts, f"describe {table}")
    if doc is None:
        raise Irreversible(f"the table {table} does not exist (DescribeTable before the step)")
    schema = (doc.get("Table") or {}).get("KeySchema") or []
    names = [k.get("AttributeName") for k in schema if isinstance(k, dict)]
    if not names or not all(isinstance(n, str) for n in names):
        raise Irreversible(f"the key schema of {table} could not be read")
    return [str(n) for n in names]


def _key(facts: Facts, write: _Write) -> dict[str, Any]:
    """The key of the item a write names (from its Item and the table's schema for a put)."""
    if write.key is not None:
        return write.key
    if write.item is None:
        raise Irreversible(f"a write to {write.table} names neither a Key nor an Item")
    names = _schema(facts, write.table)
    missing = [n for n in names if n not in write.item]
    if missing:
        raise Irreversible(f"the item written to {write.table} lacks its key {missing[0]}")
    return {n: write.item[n] for n in names}


# --- before forwarding -----------------------------------------------------------------------


def reads(facts: Facts) -> list[PreRead]:
    """Round 1: each table's key schema (for a put); round 2: each item, as it is."""
    writes = _writes(facts)
    needed = []
    for table in dict.fromkeys(w.table for w in writes if w.key is None):
        needed.append(
            awsjson.pre_read(facts, f"describe {table}", "DescribeTable", {"TableName": table})
        )
    if any(r.name not in facts.reads for r in needed):
        return needed
    for write in writes:
        key = _key(facts, write)
        name = _item_name(write.table, _key_json(key))
        payload = {"TableName": write.table, "Key": key, "ConsistentRead": True}
        needed.append(awsjson.pre_read(facts, name, "GetItem", payload))
    return needed


def create_table_reads(facts: Facts) -> list[PreRead]:
    """CreateTable: whether the table exists already."""
    table = _table(awsjson.body(facts).get("TableName"))
    return [awsjson.pre_read(facts, f"describe {table}", "DescribeTable", {"TableName": table})]


# --- after the answer -------------------------------------------------------------------------


def _unprocessed(facts: Facts) -> set[ItemKey]:
    """Items a BatchWriteItem answer says it did not write."""
    doc = facts.response_json
    out: set[ItemKey] = set()
    if awsjson.action(facts) != "BatchWriteItem" or not isinstance(doc, dict):
        return out
    for table, requests in (doc.get("UnprocessedItems") or {}).items():
        for r in requests if isinstance(requests, list) else []:
            key = (r.get("DeleteRequest") or {}).get("Key") if isinstance(r, dict) else None
            item = (r.get("PutRequest") or {}).get("Item") if isinstance(r, dict) else None
            write = _Write(table, key, item, "put" if item else "delete")
            out.add((table, _key_json(_key(facts, write))))
    return out


def _get(facts: Facts, table: str, key: dict[str, Any]) -> dict[str, Any]:
    check = awsjson.read_back(
        facts, "GetItem", {"TableName": table, "Key": key, "ConsistentRead": True}
    )
    return check


def undo_items(facts: Facts) -> dict[str, Any]:
    """Every item back as it was before the write, read back item by item."""
    skipped = _unprocessed(facts)
    undo: list[dict[str, Any]] = []
    expect: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    seen: set[ItemKey] = set()
    for write in _writes(facts):
        key = _key(facts, write)
        ident = (write.table, _key_json(key))
        if ident in seen:
            continue
        seen.add(ident)
        doc = awsjson.answer(facts, _item_name(*ident))
        old = doc.get("Item") if isinstance(doc, dict) else None
        check = _get(facts, write.table, key)
        check["expect"] = [readback.same_digest(["Item"], old)]
        expect.append(check)
        if ident in skipped:
            continue  # the answer says it was not written: as before already
        if write.kind == "put" and write.item is not None:
            after = _get(facts, write.table, key)
            after["expect"] = [readback.same_digest(["Item"], write.item)]
            left.append(after)
        elif write.kind == "delete":
            after = _get(facts, write.table, key)
            after["expect"] = [readback.same_digest(["Item"], None)]
            left.append(after)
        if old is not None:
            undo.append({"Put": {"TableName": write.table, "Item": old}})
        elif write.kind != "delete":
            undo.append({"Delete": {"TableName": write.table, "Key": key}})
    if not undo:
        raise NothingToUndo(
            "a read just before the write found none of the items it deletes", "read"
        )
    if len(undo) == 1:
        ((op, spec),) = undo[0].items()
        out = awsjson.call(facts, "PutItem" if op == "Put" else "DeleteItem", spec)
    else:
        out = awsjson.call(facts, "TransactWriteItems", {"TransactItems": undo})
    out["repeatable"] = True  # the old items put back, the new ones deleted: twice is once
    out["readback"] = {"targets": expect, **({"left": left} if len(left) == len(expect) else {})}
    out["target"] = "dynamodb " + " ".join(sorted(readback.target_name(c) for c in expect))
    return out


def undo_create_table(facts: Facts) -> dict[str, Any]:
    """CreateTable: delete the table it created (read back: not found)."""
    table = _table(awsjson.body(facts).get("TableName"))
    if awsjson.answer(facts, f"describe {table}") is not None:
        raise NothingToUndo("the table existed before: the CreateTable changed nothing", "read")
    out = awsjson.call(facts, "DeleteTable", {"TableName": table})
    check = awsjson.read_back(facts, "DescribeTable", {"TableName": table})
    check["gone"] = True
    out["readback"] = check
    out["repeatable"] = True
    return out


READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    "dynamodb.items": reads,
    "dynamodb.create-table": create_table_reads,
}

BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "dynamodb.items": undo_items,
    "dynamodb.create-table": undo_create_table,
}

DESCRIPTIONS = {
    "dynamodb.items": "each item written back as it was (PutItem of the old item, DeleteItem "
    "of a new one; several in one TransactWriteItems), read back by GetItem",
    "dynamodb.create-table": "DeleteTable (read back: DescribeTable says not found)",
}
