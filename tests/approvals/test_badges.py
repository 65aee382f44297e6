"""Badges are pure: a table of requests and the badges they get."""

from __future__ import annotations

from typing import Any

import pytest

from undoproxy.approvals.badges import AMOUNT_THRESHOLD, compute


def kinds(method: str, body: Any = None, **kwargs: Any) -> dict[str, str]:
    return {b["kind"]: b["label"] for b in compute(method, body, **kwargs)}


@pytest.mark.parametrize(
    ("method", "destructive"),
    [("DELETE", True), ("PUT", True), ("PATCH", False), ("POST", False), ("delete", True)],
)
def test_destructive_methods(method: str, destructive: bool) -> None:
    assert ("destructive" in kinds(method, compensate="restore")) is destructive


@pytest.mark.parametrize(
    ("method", "compensate", "defaults", "label"),
    [
        ("DELETE", "none", "auto", "irreversible"),
        ("PATCH", None, "none", "irreversible"),
        ("POST", None, "auto", "maybe irreversible"),
        ("POST", "delete-created", "auto", None),
        ("POST", {"method": "DELETE", "url": "/x"}, "auto", None),
        ("PUT", None, "auto", None),
        ("DELETE", "recreate", "none", None),
    ],
)
def test_irreversible(method: str, compensate: Any, defaults: str, label: str | None) -> None:
    found = kinds(method, compensate=compensate, defaults_compensate=defaults)
    assert found.get("irreversible") == label


@pytest.mark.parametrize(
    ("body", "label"),
    [
        ({"amount": AMOUNT_THRESHOLD}, "amount 1,000"),
        ({"amount": AMOUNT_THRESHOLD - 1}, None),
        ({"unit_amount": 2500}, "amount 2,500"),
        ({"totalPrice": "12,000.50"}, "amount 12,000.5"),
        ({"line_items": [{"price": 10}, {"price": 99000}]}, "amount 99,000"),
        ({"refund": {"value": -5000}}, "amount -5,000"),
        ({"amount": True, "count": 10**6}, None),  # booleans and other names do not count
        ({"amount": "lots"}, None),
        ([{"fee": 1500}], "amount 1,500"),
        (None, None),
    ],
)
def test_amount_over_the_threshold(body: Any, label: str | None) -> None:
    assert kinds("POST", body, compensate="delete-created").get("amount") == label


def test_first_request_to_a_host() -> None:
    found = compute("PATCH", {}, first_to_host=True, host="api.example.test")
    assert found == [
        {
            "kind": "new-host",
            "label": "new host",
            "detail": "the session's first request to api.example.test",
        }
    ]
    assert compute("PATCH", {}, first_to_host=False) == []
