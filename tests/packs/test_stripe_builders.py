"""The stripe pack's compensators as pure functions: form-encoded inverse requests, each with
an Idempotency-Key derived from the step, and their read-backs."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import pytest

from tests.compensators.helpers import run, sent, snapshot, step
from undoproxy.compensators.readback import differences

API = "https://api.stripe.com"
FORM = "application/x-www-form-urlencoded"


def _build(
    name: str, url: str, form: str, response: Any, *, snap: Any = None, status: int = 200
) -> dict[str, Any]:
    rule = f"match: {{method: POST}}\ncompensate: {name}" + ("\nsnapshot: true" if snap else "")
    taken = snapshot(url, 200, snap) if snap is not None else None
    p, f = step(rule, "POST", url, form.encode(), snap=taken)
    return run(p, f, status, response)


def _form(comp: dict[str, Any]) -> list[tuple[str, str]]:
    body = sent(comp)["body"]
    return parse_qsl(body.decode(), keep_blank_values=True) if body else []


CUSTOMER = {
    "id": "cus_1",
    "object": "customer",
    "name": "Ada",
    "email": "ada@example.test",
    "description": None,
    "address": {"city": "London", "line1": "1 Main St"},
    "metadata": {"tier": "gold"},
}


def test_an_update_is_undone_with_exactly_the_fields_sent_metadata_included() -> None:
    url = f"{API}/v1/customers/cus_1"
    form = (
        "name=Eve&description=new&metadata[tier]=platinum&metadata[plan]=pro"
        "&address[city]=Paris&expand[]=default_source"
    )
    comp = _build("stripe.restore-fields", url, form, CUSTOMER, snap=CUSTOMER)
    assert (comp["method"], comp["url"], comp["content_type"]) == ("POST", url, FORM)
    assert _form(comp) == [
        ("name", "Ada"),
        ("description", ""),  # it was null: empty unsets it
        ("metadata[tier]", "gold"),
        ("metadata[plan]", ""),  # it did not exist: empty unsets it
        ("address[city]", "London"),
        ("address[line1]", "1 Main St"),
    ]
    checks = comp["readback"]["expect"]
    assert differences(checks, CUSTOMER) == []
    changed = {**CUSTOMER, "metadata": {"tier": "gold", "plan": "pro"}}
    assert differences(checks, changed) == ["metadata.plan is not as before"]


def test_every_compensation_carries_a_key_derived_from_the_step() -> None:
    first = _build("stripe.refund", f"{API}/v1/charges", "amount=5", {"id": "ch_1"})
    again = _build("stripe.refund", f"{API}/v1/charges", "amount=5", {"id": "ch_1"})
    other = _build("stripe.refund", f"{API}/v1/charges", "amount=5", {"id": "ch_2"})
    key = first["headers"]["Idempotency-Key"]
    assert key.startswith("undoproxy-")
    assert again["headers"]["Idempotency-Key"] == key  # the same step, the same key
    assert other["headers"]["Idempotency-Key"] != key


@pytest.mark.parametrize(
    ("name", "url", "response", "method", "target", "form"),
    [
        (
            "stripe.delete-created",
            "/v1/customers",
            {"id": "cus_9"},
            "DELETE",
            "/v1/customers/cus_9",
            [],
        ),
        (
            "stripe.delete-created",
            "/v1/coupons",
            {"id": "SAVE20"},
            "DELETE",
            "/v1/coupons/SAVE20",
            [],
        ),
        (
            "stripe.deactivate",
            "/v1/products",
            {"id": "prod_1"},
            "POST",
            "/v1/products/prod_1",
            [("active", "false")],
        ),
        (
            "stripe.deactivate",
            "/v1/prices",
            {"id": "price_1"},
            "POST",
            "/v1/prices/price_1",
            [("active", "false")],
        ),
        (
            "stripe.undo-payment-intent",
            "/v1/payment_intents",
            {"id": "pi_1", "status": "requires_payment_method"},
            "POST",
            "/v1/payment_intents/pi_1/cancel",
            [],
        ),
        (
            "stripe.undo-payment-intent",
            "/v1/payment_intents",
            {"id": "pi_1", "status": "succeeded"},
            "POST",
            "/v1/refunds",
            [("payment_intent", "pi_1")],
        ),
        (
            "stripe.refund",
            "/v1/charges",
            {"id": "ch_1"},
            "POST",
            "/v1/refunds",
            [("charge", "ch_1")],
        ),
    ],
)
def test_each_row_builds_its_form_request_with_a_key(
    name: str, url: str, response: Any, method: str, target: str, form: list[tuple[str, str]]
) -> None:
    comp = _build(name, f"{API}{url}", "a=1", response)
    assert (comp["method"], comp["url"], _form(comp)) == (method, f"{API}{target}", form)
    assert comp["headers"]["Idempotency-Key"].startswith("undoproxy-")
    assert comp["readback"]["url"].startswith(API)


def test_a_payment_intent_created_canceled_has_nothing_to_undo() -> None:
    comp = _build(
        "stripe.undo-payment-intent",
        f"{API}/v1/payment_intents",
        "a=1",
        {"id": "pi_1", "status": "canceled"},
    )
    assert "nothing was charged" in comp["noop"]


@pytest.mark.parametrize(
    ("name", "url", "response", "reason"),
    [
        ("stripe.delete-created", "/v1/invoices", {"id": "in_1"}, "does not know how to delete"),
        ("stripe.undo-payment-intent", "/v1/payment_intents", {"id": "pi_1"}, "has no 'status'"),
        ("stripe.deactivate", "/v1/products", {"id": "a/b"}, "is not a Stripe id"),
    ],
)
def test_what_cannot_be_undone_safely_is_irreversible(
    name: str, url: str, response: Any, reason: str
) -> None:
    comp = _build(name, f"{API}{url}", "a=1", response)
    assert reason in comp["reason"]
