"""etcd v3 JSON gateway compensators: range deletes and transactions (pure).

etcd's HTTP API is RPC: `POST /v3/kv/range`, `/v3/kv/put`, `/v3/kv/deleterange`,
`/v3/kv/txn`, each with a JSON body whose keys and values are base64. A single put is written
out in the pack itself (`compensate: {read, undo, undo_absent}`, compensators/rpc.py); what
touches several keys is here:

    DeleteRange   read the range before; undo: one txn that puts every key back (value,
                  lease)
    LeaseGrant    revoke it
    Txn           read, before, every key and range either branch could write; from the
                  answer's `succeeded`, the branch that ran: one txn that puts back each key
                  it overwrote or deleted, and deletes each key it created

Each undo is read back by ranging over the same keys (`kvs` as before, but for the
revisions and version etcd sets on every write).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

from undoproxy.compensators import readback
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, PreRead, parse_json
from undoproxy.compensators.model import inverse_request as request

MAX_KEYS = 1000  # a range undone holds at most this many keys (read with limit MAX_KEYS + 1)
MAX_OPS = 128  # etcd's default --max-txn-ops: a txn with more operations is refused anyway
Range = tuple[str, str]  # (key, range_end), base64 as etcd takes them; "" = one key


def _get(doc: dict[str, Any], snake: str) -> Any:
    """A field by its proto name or its JSON (lowerCamel) name: the gateway takes both."""
    if snake in doc:
        return doc[snake]
    head, *rest = snake.split("_")
    return doc.get(head + "".join(p.title() for p in rest))


def _range_of(op: dict[str, Any]) -> Range:
    key = _get(op, "key")
    if not isinstance(key, str) or not key:
        raise Irreversible("an operation names no key (etcd keys are base64 text)")
    end = _get(op, "range_end") or ""
    return key, str(end)


def _kv_url(facts: Facts, action: str) -> str:
    """`…/v3/kv/ACTION` beside the request's own URL (any `/v3`, `/v3beta` prefix kept)."""
    return urljoin(facts.url, action)


def _read_name(rng: Range) -> str:
    return f"range {rng[0]} {rng[1]}"


def _range_body(rng: Range) -> dict[str, Any]:
    body: dict[str, Any] = {"key": rng[0], "limit": MAX_KEYS + 1}
    if rng[1]:
        body["range_end"] = rng[1]
    return body


def _range_read(facts: Facts, rng: Range) -> PreRead:
    body = json.dumps(_range_body(rng)).encode()
    headers = {"Content-Type": "application/json"}
    return PreRead(_read_name(rng), "POST", _kv_url(facts, "range"), headers, body)


# --- what the step writes -------------------------------------------------------------------


def _ops(facts: Facts) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(success, failure) operations of a txn."""
    body = facts.request_json
    if not isinstance(body, dict):
        raise Irreversible("the txn body is not JSON")
    success = [o for o in _get(body, "success") or [] if isinstance(o, dict)]
    failure = [o for o in _get(body, "failure") or [] if isinstance(o, dict)]
    if len(success) + len(failure) > 2 * MAX_OPS:
        raise Irreversible(f"the txn has more than {MAX_OPS} operations per branch")
    return success, failure


def _writes(ops: list[dict[str, Any]]) -> tuple[list[Range], list[Range]]:
    """(keys put, ranges deleted) by a branch; Irreversible for a nested txn."""
    puts: list[Range] = []
    deletes: list[Range] = []
    for op in ops:
        if _get(op, "request_txn") is not None:
            raise Irreversible("the txn nests another txn; undo it by hand")
        put = _get(op, "request_put")
        if isinstance(put, dict):
            if _get(put, "ignore_value") or _get(put, "ignore_lease"):
                raise Irreversible("a put with ignore_value/ignore_lease: undo it by hand")
            puts.append((_range_of(put)[0], ""))
        delete = _get(op, "request_delete_range")
        if isinstance(delete, dict):
            deletes.append(_range_of(delete))
    return puts, deletes


def delete_range_reads(facts: Facts) -> list[PreRead]:
    """DeleteRange: the range as it is."""
    body = facts.request_json
    if not isinstance(body, dict):
        raise Irreversible("the deleterange body is not JSON")
    return [_range_read(facts, _range_of(body))]


def txn_reads(facts: Facts) -> list[PreRead]:
    """Txn: every key and range either branch writes."""
    success, failure = _ops(facts)
    ranges: list[Range] = []
    for branch in (success, failure):
        puts, deletes = _writes(branch)
        ranges += puts + deletes
    return [_range_read(facts, r) for r in dict.fromkeys(ranges)]


# --- after the answer ---------------------------------------------------------------------


def _before(facts: Facts, rng: Range) -> list[dict[str, Any]]:
    """The key-values a range held before the step."""
    snap = facts.reads.get(_read_name(rng))
    if snap is None:
        raise Irreversible(f"the keys {rng[0]} were not read before the step")
    doc = parse_json(snap.body)
    if not isinstance(doc, dict):
        raise Irreversible("the range read before the step did not answer JSON")
    kvs = [kv for kv in doc.get("kvs") or [] if isinstance(kv, dict)]
    if len(kvs) > MAX_KEYS or doc.get("more"):
        raise Irreversible(f"the range held more than {MAX_KEYS} keys; undo it by hand")
    return kvs


def _put(kv: dict[str, Any]) -> dict[str, Any]:
    put: dict[str, Any] = {"key": kv["key"], "value": kv.get("value", "")}
    if kv.get("lease"):
        put["lease"] = kv["lease"]
    return {"request_put": put}


def _check(facts: Facts, rng: Range, kvs: list[dict[str, Any]]) -> dict[str, Any]:
    """The range must read `kvs`: key, value and lease of each, as digests (the revisions and
    version etcd sets on every write left out)."""
    check = readback.rpc_read(
        "POST", _kv_url(facts, "range"), _range_body(rng), {"Content-Type": "application/json"}
    )
    check["expect"] = [readback.same_digest(["kvs", "*"], kvs, ["key", "value", "lease"])]
    return check


def _undo(facts: Facts, puts: list[Range], deletes: list[Range]) -> dict[str, Any]:
    """One txn that puts back what `puts` and `deletes` changed, with its read-back."""
    ops: dict[str, dict[str, Any]] = {}
    expect: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    for rng in dict.fromkeys(deletes):
        kvs = _before(facts, rng)
        for kv in kvs:
            ops[kv["key"]] = _put(kv)
        expect.append(_check(facts, rng, kvs))
        left.append(_check(facts, rng, []))
    for rng in dict.fromkeys(puts):
        kvs = _before(facts, rng)
        if kvs:
            ops[rng[0]] = _put(kvs[0])
        else:
            ops[rng[0]] = {"request_delete_range": {"key": rng[0]}}
        expect.append(_check(facts, rng, kvs))
    if not any("request_put" in o for o in ops.values()) and not any(
        "request_delete_range" in o for o in ops.values()
    ):
        raise NothingToUndo("a read just before the step found none of its keys there", "read")
    out = request("POST", _kv_url(facts, "txn"), {"success": list(ops.values())})
    out["repeatable"] = True  # puts of fixed values and deletes: twice is the same as once
    out["readback"] = {"targets": expect, **({"left": left} if left else {})}
    out["target"] = "etcd " + " ".join(readback.target_name(c) for c in expect)
    return out


def undo_delete_range(facts: Facts) -> dict[str, Any]:
    """DeleteRange: put every key it deleted back."""
    body = facts.request_json
    assert isinstance(body, dict)
    rng = _range_of(body)
    if not _before(facts, rng):
        raise NothingToUndo("a read just before the delete found no key in its range", "read")
    return _undo(facts, [], [rng])


def undo_txn(facts: Facts) -> dict[str, Any]:
    """Txn: undo the branch that ran (the answer's `succeeded`)."""
    success, failure = _ops(facts)
    answer = facts.response_json
    ran = success if isinstance(answer, dict) and answer.get("succeeded") else failure
    puts, deletes = _writes(ran)
    if not puts and not deletes:
        raise NothingToUndo("the branch of the txn that ran writes nothing", "answer")
    return _undo(facts, puts, deletes)


def undo_lease_grant(facts: Facts) -> dict[str, Any]:
    """LeaseGrant: revoke the lease it granted (read back: time-to-live -1, no such lease)."""
    answer = facts.response_json
    lease = answer.get("ID") if isinstance(answer, dict) else None
    if not isinstance(lease, str | int) or isinstance(lease, bool) or not str(lease):
        raise Irreversible("the lease grant's answer names no lease ID; revoke it by hand")
    out = request("POST", _kv_url(facts, "revoke"), {"ID": str(lease)})
    out["repeatable"] = True
    check = readback.rpc_read(
        "POST",
        _kv_url(facts, "timetolive"),
        {"ID": str(lease)},
        {"Content-Type": "application/json"},
    )
    check["expect"] = [readback.expect(["TTL"], "-1")]  # etcd: -1 for a lease that is gone
    out["readback"] = check
    return out


READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    "etcd.delete-range": delete_range_reads,
    "etcd.txn": txn_reads,
}

BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "etcd.delete-range": undo_delete_range,
    "etcd.txn": undo_txn,
    "etcd.lease-grant": undo_lease_grant,
}

DESCRIPTIONS = {
    "etcd.delete-range": "one txn that puts back every key a deleterange removed",
    "etcd.txn": "one txn that restores every key the branch that ran wrote",
    "etcd.lease-grant": "revoke the lease granted (read back: its time to live is -1)",
}
