"""A stateful fake of the Stripe API, following its documented behaviour:

- form-encoded request bodies with nested keys (`metadata[plan]=pro`, `items[0][price]=...`);
  an empty value unsets a field (`metadata[plan]=` removes the key, `email=` sets null);
- `Authorization: Bearer sk_...` or 401; errors as `{"error": {"type", "code", "message"}}`,
  404 `resource_missing` for an unknown id;
- a deleted customer reads back `{"id", "object": "customer", "deleted": true}`; a deleted
  coupon is gone (404); a cancelled subscription reads `status: canceled`;
- `Idempotency-Key` on a POST: the same key with the same parameters answers the first answer
  again (header `Idempotent-Replayed: true`) and does nothing twice; with other parameters,
  400 `idempotency_error`; while the first is still being processed, 409
  `idempotency_key_in_use`.
Test knobs: `stall_refunds` ("before": a refund waits before it is applied, "after": it is
applied, then its answer waits) until `release` is set.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from tests.support.certs import server_context
from tests.support.servers import ThreadedServer

API_KEY = "sk_test_fake"
_PART = re.compile(r"\[([^\[\]]*)\]")


@dataclass
class StripeState:
    """Every object by id, refunds in order, what each idempotency key answered."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds: list[dict[str, Any]] = field(default_factory=list)
    keys: dict[str, tuple[str, int, dict[str, Any]] | None] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    stall_refunds: str | None = None  # None | "before" | "after"
    release: threading.Event = field(default_factory=threading.Event)
    refund_requests: list[str | None] = field(default_factory=list)  # their Idempotency-Keys

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_fake{next(self.counter):06d}"

    def dump(self) -> dict[str, Any]:
        """Every object and refund, as plain data (compare before and after a session)."""
        return {"objects": copy.deepcopy(self.objects), "refunds": copy.deepcopy(self.refunds)}


STATE: web.AppKey[StripeState] = web.AppKey("stripe", StripeState)


def parse_form(text: str) -> dict[str, Any]:
    """Stripe's nested form encoding into a dict (lists for `[0]`/`[]` keys)."""
    out: dict[str, Any] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        head = key.split("[", 1)[0]
        parts: list[str] = [head, *_PART.findall(key[len(head) :])]
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt: Any = value if last else ({} if not parts[i + 1].isdigit() else [])
            if isinstance(node, list):
                if part == "" or int(part) >= len(node):
                    node.append(nxt)
                    index = len(node) - 1
                else:
                    index = int(part)
                if last:
                    node[index] = value
                node = node[index]
            else:
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, nxt)
    return out


def _error(
    status: int, message: str, code: str = "", kind: str = "invalid_request_error"
) -> web.Response:
    body = {"error": {"type": kind, "message": message, **({"code": code} if code else {})}}
    return web.json_response(body, status=status)


def _missing(kind: str, object_id: str) -> web.Response:
    return _error(404, f"No such {kind}: '{object_id}'", "resource_missing")


def _merge_metadata(obj: dict[str, Any], metadata: Any) -> None:
    if metadata == "":
        obj["metadata"] = {}
        return
    for key, value in (metadata or {}).items():
        if value == "":
            obj["metadata"].pop(key, None)
        else:
            obj["metadata"][key] = value


def _apply(obj: dict[str, Any], params: dict[str, Any], fields: tuple[str, ...]) -> None:
    for name in fields:
        if name in params:
            value = params[name]
            obj[name] = None if value == "" else value
    if "metadata" in params:
        _merge_metadata(obj, params["metadata"])


def _bool(value: Any) -> bool:
    return str(value).lower() == "true"


class Api:
    """The handlers, over one StripeState."""

    def __init__(self, state: StripeState) -> None:
        self.state = state

    def _get(self, object_id: str, kind: str) -> dict[str, Any] | None:
        obj = self.state.objects.get(object_id)
        return obj if obj is not None and obj["object"] == kind else None

    async def customers(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        cid = request.match_info.get("id")
        if cid is None:
            obj = {
                "id": self.state.new_id("cus"),
                "object": "customer",
                "name": None,
                "email": None,
                "description": None,
                "phone": None,
                "address": None,
                "metadata": {},
                "created": 1700000000,
            }
            _apply(obj, params, ("name", "email", "description", "phone", "address"))
            self.state.objects[obj["id"]] = obj
            return web.json_response(obj)
        obj = self._get(cid, "customer")
        if obj is None:
            return _missing("customer", cid)
        if request.method == "GET":
            return web.json_response(obj)
        if obj.get("deleted"):
            return _missing("customer", cid)
        if request.method == "DELETE":
            self.state.objects[cid] = {"id": cid, "object": "customer", "deleted": True}
            return web.json_response(self.state.objects[cid])
        _apply(obj, params, ("name", "email", "description", "phone"))
        if "address" in params:
            address = params["address"]
            obj["address"] = None if address == "" else {**(obj["address"] or {}), **address}
        return web.json_response(obj)

    async def catalog(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        kind = "product" if "products" in request.path else "price"
        oid = request.match_info.get("id")
        if oid is None:
            obj = {"id": self.state.new_id("prod" if kind == "product" else "price")}
            obj.update(object=kind, active=True, metadata={})
            if kind == "product":
                obj["name"] = params.get("name")
            else:
                obj.update(
                    product=params.get("product"),
                    unit_amount=int(params.get("unit_amount") or 0),
                    currency=params.get("currency"),
                )
            self.state.objects[obj["id"]] = obj
            return web.json_response(obj)
        obj = self._get(oid, kind)
        if obj is None:
            return _missing(kind, oid)
        if request.method == "POST":
            if "active" in params:
                obj["active"] = _bool(params["active"])
            _apply(obj, params, ("name",) if kind == "product" else ())
        return web.json_response(obj)

    def _charge(self, amount: int, intent: str | None) -> dict[str, Any]:
        charge = {
            "id": self.state.new_id("ch"),
            "object": "charge",
            "amount": amount,
            "amount_refunded": 0,
            "refunded": False,
            "paid": True,
            "payment_intent": intent,
            "status": "succeeded",
        }
        self.state.objects[charge["id"]] = charge
        return charge

    async def charges(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        cid = request.match_info.get("id")
        if request.method == "POST" and cid is None:
            charge = self._charge(int(params.get("amount") or 0), None)
            return web.json_response(charge)
        if cid is None:  # GET /v1/charges?payment_intent=
            intent = request.query.get("payment_intent")
            data = [
                o
                for o in self.state.objects.values()
                if o["object"] == "charge" and (intent is None or o["payment_intent"] == intent)
            ]
            return web.json_response({"object": "list", "data": data, "has_more": False})
        charge = self._get(cid, "charge")
        return web.json_response(charge) if charge else _missing("charge", cid)

    async def payment_intents(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        pid = request.match_info.get("id")
        action = request.match_info.get("action")
        if pid is None:
            intent = {
                "id": self.state.new_id("pi"),
                "object": "payment_intent",
                "amount": int(params.get("amount") or 0),
                "currency": params.get("currency"),
                "status": "requires_payment_method",
                "latest_charge": None,
                "metadata": {},
            }
            if params.get("payment_method"):
                intent["status"] = "requires_confirmation"
            self.state.objects[intent["id"]] = intent
            if _bool(params.get("confirm")):
                return self._confirm(intent)
            return web.json_response(intent)
        intent = self._get(pid, "payment_intent")
        if intent is None:
            return _missing("payment_intent", pid)
        if action == "cancel":
            if intent["status"] in ("succeeded", "canceled"):
                return _error(
                    400,
                    "You cannot cancel this PaymentIntent because it has a status of "
                    f"{intent['status']}.",
                    "payment_intent_unexpected_state",
                )
            intent["status"] = "canceled"
        elif action == "confirm":
            return self._confirm(intent)
        return web.json_response(intent)

    def _confirm(self, intent: dict[str, Any]) -> web.Response:
        if intent["status"] not in ("requires_confirmation", "requires_payment_method"):
            return _error(
                400, "This PaymentIntent cannot be confirmed", "payment_intent_unexpected_state"
            )
        intent["status"] = "succeeded"
        intent["latest_charge"] = self._charge(intent["amount"], intent["id"])["id"]
        return web.json_response(intent)

    async def refunds(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        self.state.refund_requests.append(request.headers.get("Idempotency-Key"))
        if self.state.stall_refunds == "before":
            await _wait(self.state.release)
        charge_id = params.get("charge")
        if params.get("payment_intent"):
            intent = self._get(str(params["payment_intent"]), "payment_intent")
            if intent is None:
                return _missing("payment_intent", str(params["payment_intent"]))
            charge_id = intent["latest_charge"]
        charge = self._get(str(charge_id), "charge") if charge_id else None
        if charge is None:
            return _missing("charge", str(charge_id))
        if charge["refunded"]:
            return _error(
                400, f"Charge {charge['id']} has already been refunded.", "charge_already_refunded"
            )
        refund = {
            "id": self.state.new_id("re"),
            "object": "refund",
            "amount": charge["amount"] - charge["amount_refunded"],
            "charge": charge["id"],
            "payment_intent": charge["payment_intent"],
            "status": "succeeded",
        }
        charge["amount_refunded"] = charge["amount"]
        charge["refunded"] = True
        self.state.refunds.append(refund)
        self.state.objects[refund["id"]] = refund
        if self.state.stall_refunds == "after":
            await _wait(self.state.release)
        return web.json_response(refund)

    async def subscriptions(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        sid = request.match_info.get("id")
        if sid is None:
            customer = self._get(str(params.get("customer")), "customer")
            if customer is None or customer.get("deleted"):
                return _missing("customer", str(params.get("customer")))
            sub = {
                "id": self.state.new_id("sub"),
                "object": "subscription",
                "customer": customer["id"],
                "status": "active",
                "items": {"object": "list", "data": params.get("items") or []},
                "metadata": {},
            }
            self.state.objects[sub["id"]] = sub
            return web.json_response(sub)
        sub = self._get(sid, "subscription")
        if sub is None:
            return _missing("subscription", sid)
        if request.method == "DELETE":
            if sub["status"] == "canceled":
                return _error(400, "This subscription is already canceled.")
            sub["status"] = "canceled"
        return web.json_response(sub)

    async def coupons(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        cid = request.match_info.get("id")
        if cid is None:
            coupon = {
                "id": params.get("id") or self.state.new_id("co"),
                "object": "coupon",
                "percent_off": float(params["percent_off"]) if params.get("percent_off") else None,
                "duration": params.get("duration", "once"),
                "valid": True,
                "metadata": {},
            }
            if coupon["id"] in self.state.objects:
                return _error(400, "Coupon already exists.", "resource_already_exists")
            self.state.objects[coupon["id"]] = coupon
            return web.json_response(coupon)
        coupon = self._get(cid, "coupon")
        if coupon is None:
            return _missing("coupon", cid)
        if request.method == "DELETE":
            del self.state.objects[cid]
            return web.json_response({"id": cid, "object": "coupon", "deleted": True})
        return web.json_response(coupon)


async def _wait(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.02)


def _handler(api: Api, name: str) -> Any:
    method = getattr(api, name)

    async def handle(request: web.Request) -> web.StreamResponse:
        state = api.state
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return _error(401, "Invalid API Key provided", kind="invalid_request_error")
        text = (await request.read()).decode()
        params = parse_form(text) if request.method != "GET" else dict(request.query)
        key = request.headers.get("Idempotency-Key") if request.method == "POST" else None
        if key is None:
            return await method(request, params)
        fingerprint = f"{request.method} {request.path} {text}"
        if key in state.keys:
            seen = state.keys[key]
            if seen is None:
                return _error(
                    409,
                    "There is currently another in-progress request using this Idempotent Key.",
                    "idempotency_key_in_use",
                    kind="idempotency_error",
                )
            if seen[0] != fingerprint:
                return _error(
                    400,
                    "Keys for idempotent requests can only be used with the same parameters "
                    "they were first used with.",
                    kind="idempotency_error",
                )
            return web.json_response(
                seen[2], status=seen[1], headers={"Idempotent-Replayed": "true"}
            )
        state.keys[key] = None  # in progress
        try:
            resp = await method(request, params)
        except BaseException:
            del state.keys[key]
            raise
        assert isinstance(resp, web.Response) and resp.text is not None
        state.keys[key] = (fingerprint, resp.status, json.loads(resp.text))
        return resp

    return handle


def create_app(state: StripeState) -> web.Application:
    """The fake Stripe API over `state`."""
    api = Api(state)
    app = web.Application()
    app[STATE] = state
    routes = [
        ("customers", "/v1/customers", ("POST",)),
        ("customers", "/v1/customers/{id}", ("GET", "POST", "DELETE")),
        ("catalog", "/v1/products", ("POST",)),
        ("catalog", "/v1/products/{id}", ("GET", "POST")),
        ("catalog", "/v1/prices", ("POST",)),
        ("catalog", "/v1/prices/{id}", ("GET", "POST")),
        ("payment_intents", "/v1/payment_intents", ("POST",)),
        ("payment_intents", "/v1/payment_intents/{id}", ("GET", "POST")),
        ("payment_intents", "/v1/payment_intents/{id}/{action}", ("POST",)),
        ("charges", "/v1/charges", ("GET", "POST")),
        ("charges", "/v1/charges/{id}", ("GET",)),
        ("refunds", "/v1/refunds", ("POST",)),
        ("subscriptions", "/v1/subscriptions", ("POST",)),
        ("subscriptions", "/v1/subscriptions/{id}", ("GET", "DELETE")),
        ("coupons", "/v1/coupons", ("POST",)),
        ("coupons", "/v1/coupons/{id}", ("GET", "DELETE")),
    ]
    for name, path, methods in routes:
        for method in methods:
            app.router.add_route(method, path, _handler(api, name))
    return app


def serve(state: StripeState, cert: tuple[Path, Path]) -> ThreadedServer:
    """The fake on HTTPS with the test upstream certificate, started."""
    return ThreadedServer(create_app(state), server_context(cert)).start()
