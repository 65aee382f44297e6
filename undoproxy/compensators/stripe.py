"""Stripe compensators: form-encoded inverse requests, each with its own Idempotency-Key.

The key is derived from the step (its request and what the response created) when the
compensation is built, and stored with it: every retry of that compensation, after a crash
included, sends the same key, and Stripe answers a repeated key with the first answer instead
of refunding twice.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo
from undoproxy.compensators.model import inverse_request as request
from undoproxy.compensators.readback import expect, gone, left_by, readback
from undoproxy.compensators.responses import at_path, need, prior, sent

FORM = "application/x-www-form-urlencoded"
_KEY_PART = re.compile(r"\[([^\[\]]*)\]")
IGNORED_FIELDS = frozenset({"expand"})  # asks for more of the answer, changes nothing


def idempotency_key(facts: Facts, what: str) -> str:
    """The key of this step's compensation: the same for every retry, unique to the step."""
    digest = hashlib.sha256()
    for part in (what, facts.method, facts.url, facts.request_body, facts.response_body or b""):
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return f"undoproxy-{digest.hexdigest()[:40]}"


def _form(
    facts: Facts, what: str, method: str, path: str, fields: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    body = urlencode(fields) if fields else None
    return request(
        method,
        at_path(facts.url, path),
        body,
        FORM if fields else None,
        {"Idempotency-Key": idempotency_key(facts, what)},
    )


def _id(facts: Facts) -> str:
    created = str(need(facts, "id"))
    if "/" in created or created in (".", ".."):
        raise Irreversible(f"the response's id {created!r} is not a Stripe id")
    return quote(created, safe="")


def refund(facts: Facts) -> dict[str, Any]:
    """Refund the created charge or payment intent in full."""
    created = _id(facts)
    if created.startswith("pi_"):
        out = _form(facts, "refund", "POST", "/v1/refunds", [("payment_intent", created)])
        out["readback"] = readback(
            at_path(facts.url, "/v1/charges") + f"?payment_intent={created}",
            expect(["data", 0, "refunded"], True),
        )
        return out
    out = _form(facts, "refund", "POST", "/v1/refunds", [("charge", created)])
    out["readback"] = readback(
        at_path(facts.url, f"/v1/charges/{created}"), expect(["refunded"], True)
    )
    return out


def undo_payment_intent(facts: Facts) -> dict[str, Any]:
    """A payment intent that did not succeed is cancelled; one that succeeded is refunded."""
    created = _id(facts)
    status = need(facts, "status")
    if status == "succeeded":
        return refund(facts)
    if status == "canceled":
        raise NothingToUndo(
            "the payment intent was created canceled; nothing was charged", "answer"
        )
    url = f"/v1/payment_intents/{created}"
    out = _form(facts, "cancel", "POST", f"{url}/cancel")
    out["readback"] = readback(at_path(facts.url, url), expect(["status"], "canceled"))
    return out


# What a read of each deletable object shows once it is deleted. A deleted customer reads
# back as a tombstone (`{"id", "object", "deleted": true}`), which is absence.
DELETED = {
    "customers": gone,
    "subscriptions": lambda url: readback(url, expect(["status"], "canceled")),
    "coupons": gone,
}


def delete_created(facts: Facts) -> dict[str, Any]:
    """DELETE the created customer, subscription or coupon."""
    collection = facts.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if collection not in DELETED:
        raise Irreversible(f"stripe.delete-created does not know how to delete {collection}")
    path = f"/v1/{collection}/{_id(facts)}"
    out = _form(facts, "delete", "DELETE", path)
    out["readback"] = DELETED[collection](at_path(facts.url, path))
    return out


def deactivate(facts: Facts) -> dict[str, Any]:
    """Products and prices cannot always be deleted: set the created one `active=false`."""
    collection = facts.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    path = f"/v1/{collection}/{_id(facts)}"
    out = _form(facts, "deactivate", "POST", path, [("active", "false")])
    out["readback"] = readback(at_path(facts.url, path), expect(["active"], False))
    return out


def _key_path(key: str) -> list[str | int]:
    """`metadata[plan]` -> ["metadata", "plan"]; `items[0][price]` -> ["items", 0, "price"]."""
    head = key.split("[", 1)[0]
    parts: list[str | int] = [head]
    for part in _KEY_PART.findall(key[len(head) :]):
        parts.append(int(part) if part.isdigit() else part)
    return parts


def _lookup(value: Any, path: list[str | int]) -> Any:
    for key in path:
        fits = isinstance(key, int) and isinstance(value, list) and key < len(value)
        if fits or (isinstance(value, dict) and key in value):
            value = value[key]
        else:
            return None
    return value


def _form_value(key: str, value: Any) -> list[tuple[str, str]]:
    """How Stripe reads `value` back from a form: nested keys, '' for unset."""
    if isinstance(value, dict):
        if not value:
            return [(key, "")]
        return [pair for k, v in value.items() for pair in _form_value(f"{key}[{k}]", v)]
    if isinstance(value, list):
        if not value:
            return [(key, "")]
        return [pair for i, v in enumerate(value) for pair in _form_value(f"{key}[{i}]", v)]
    if value is None:
        return [(key, "")]
    if isinstance(value, bool):
        return [(key, "true" if value else "false")]
    return [(key, str(value))]


def restore_fields(facts: Facts) -> dict[str, Any]:
    """POST the prior values (snapshot) of exactly the fields the agent sent.

    `metadata[k]` included; a key that did not exist is sent empty, which Stripe reads as unset.
    """
    before = prior(facts)
    assert facts.snapshot is not None
    fields, checks = [], []
    seen: set[str] = set()
    for key in sent(facts):
        path = _key_path(key)
        if path[0] in IGNORED_FIELDS:
            continue
        # `metadata=` (clear all) and `metadata[k]=` are both undone from the snapshot's value.
        top = path[:2] if path[0] == "metadata" and len(path) > 1 else path[:1]
        name = key if len(top) > 1 else str(top[0])
        if name in seen:
            continue
        seen.add(name)
        value = _lookup(before, top)
        fields.extend(_form_value(name, value))
        checks.append(expect(top, None if value == "" else value))
    if not fields:
        raise NothingToUndo("the update sent no fields, so it changed nothing", "request")
    out = _form(facts, "restore", "POST", urlsplit(facts.snapshot.url).path, fields)
    out["readback"] = readback(facts.snapshot.url, *checks)
    out["readback"]["left"] = left_by(facts.response_json, checks)
    return out


BUILDERS = {
    "stripe.refund": refund,
    "stripe.undo-payment-intent": undo_payment_intent,
    "stripe.delete-created": delete_created,
    "stripe.deactivate": deactivate,
    "stripe.restore-fields": restore_fields,
}

DESCRIPTIONS = {
    "stripe.refund": "POST /v1/refunds for the created charge or payment intent",
    "stripe.undo-payment-intent": "cancel the created payment intent, or refund it if it succeeded",
    "stripe.delete-created": "DELETE the created customer, subscription or coupon",
    "stripe.deactivate": "POST active=false to the created product or price",
    "stripe.restore-fields": "POST back the prior values (snapshot) of exactly the fields sent",
}
