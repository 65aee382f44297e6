"""API packs: the inverse request each one builds from the response, and what it needs."""

from __future__ import annotations

from typing import Any

import pytest

from undoproxy.compensators.build import Compensation, prepare
from undoproxy.compensators.catalog import PACKS
from undoproxy.compensators.packs import PACK_BUILDERS

from .helpers import run, sent, sent_json, step

GITHUB = "https://api.github.com/repos/acme/web"
GHE = "https://ghe.example.test/api/v3/repos/acme/web"
STRIPE = "https://api.stripe.com/v1"
SLACK = "https://slack.com/api"
FORM = "application/x-www-form-urlencoded"


def _rule(name: str) -> str:
    return f"match: {{method: POST}}\ncompensate: {name}"


def _inverse(comp: Compensation) -> dict[str, Any]:
    """The inverse request, its body parsed when it is JSON."""
    return sent_json(comp) if comp.get("content_type") == "application/json" else sent(comp)


def _delete(url: str) -> dict[str, Any]:
    return {"method": "DELETE", "url": url, "body": None, "content_type": None}


def test_every_pack_has_a_builder() -> None:
    assert set(PACK_BUILDERS) == set(PACKS)


BUILT: list[Any] = [
    pytest.param(
        "github.close-issue",
        f"{GITHUB}/issues",
        {"number": 42, "id": 1, "url": f"{GITHUB}/issues/42", "state": "open"},
        {
            "method": "PATCH",
            "url": f"{GITHUB}/issues/42",
            "body": {"state": "closed", "state_reason": "not_planned"},
            "content_type": "application/json",
        },
        id="github.close-issue",
    ),
    pytest.param(
        "github.close-issue",
        f"{GITHUB}/issues/?per_page=1",
        {"number": 42},
        {
            "method": "PATCH",
            "url": f"{GITHUB}/issues/42",
            "body": {"state": "closed", "state_reason": "not_planned"},
            "content_type": "application/json",
        },
        id="github.close-issue-query-and-slash-dropped",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GITHUB}/issues/42/comments",
        {"id": 1001, "url": f"{GITHUB}/issues/comments/1001", "body": "hi"},
        _delete(f"{GITHUB}/issues/comments/1001"),
        id="github.delete-comment-by-url",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GITHUB}/issues/42/comments",
        {"id": 1001},
        _delete(f"{GITHUB}/issues/comments/1001"),
        id="github.delete-comment-by-id",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GITHUB}/pulls/42/comments",
        {"id": 1001, "url": "https://evil.example.test/repos/acme/web/issues/comments/1001"},
        _delete(f"{GITHUB}/issues/comments/1001"),
        id="github.delete-comment-url-on-another-host-ignored",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GITHUB}/issues/42/comments",
        {"id": 1001, "url": "http://api.github.com/repos/acme/web/issues/comments/1001"},
        _delete(f"{GITHUB}/issues/comments/1001"),
        id="github.delete-comment-url-over-plain-http-ignored",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GHE}/issues/42/comments",
        {"id": 1001, "url": f"{GHE}/issues/comments/1001"},
        _delete(f"{GHE}/issues/comments/1001"),
        id="github.delete-comment-enterprise-by-url",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GHE}/issues/42/comments",
        {"id": 1001},
        _delete(f"{GHE}/issues/comments/1001"),
        id="github.delete-comment-enterprise-by-id",
    ),
    pytest.param(
        "stripe.refund",
        f"{STRIPE}/charges",
        {"id": "ch_3NabcXYZ", "object": "charge", "amount": 1500},
        {
            "method": "POST",
            "url": f"{STRIPE}/refunds",
            "body": b"charge=ch_3NabcXYZ",
            "content_type": FORM,
        },
        id="stripe.refund-charge",
    ),
    pytest.param(
        "stripe.refund",
        f"{STRIPE}/payment_intents",
        {"id": "pi_3NabcXYZ", "object": "payment_intent", "amount": 1500},
        {
            "method": "POST",
            "url": f"{STRIPE}/refunds",
            "body": b"payment_intent=pi_3NabcXYZ",
            "content_type": FORM,
        },
        id="stripe.refund-payment-intent",
    ),
    pytest.param(
        "stripe.refund",
        f"{STRIPE}/payment_intents/pi_3NabcXYZ/confirm",
        {"id": "pi_3NabcXYZ", "status": "succeeded"},
        {
            "method": "POST",
            "url": f"{STRIPE}/refunds",
            "body": b"payment_intent=pi_3NabcXYZ",
            "content_type": FORM,
        },
        id="stripe.refund-confirmed-payment-intent",
    ),
    pytest.param(
        "slack.delete-message",
        f"{SLACK}/chat.postMessage",
        {"ok": True, "channel": "C024BE91L", "ts": "1401383885.000061", "message": {}},
        {
            "method": "POST",
            "url": f"{SLACK}/chat.delete",
            "body": {"channel": "C024BE91L", "ts": "1401383885.000061"},
            "content_type": "application/json",
        },
        id="slack.delete-message",
    ),
]


@pytest.mark.parametrize(("name", "url", "response", "inverse"), BUILT)
def test_pack_builds_the_inverse_request_from_the_response(
    name: str, url: str, response: Any, inverse: dict[str, Any]
) -> None:
    p, f = step(_rule(name), "POST", url, {"any": "thing"})
    assert (p.kind, p.snapshot_url, p.inferred) == (name, None, False)
    assert prepare(p, f)["ready"] is False  # everything it needs is in the response
    comp = run(p, f, 201, response)
    assert comp["ready"] is True
    got = _inverse(comp)
    headers = got.pop("headers", {})
    assert got == inverse
    # Every Stripe compensation carries its own Idempotency-Key; the others carry none.
    assert ("Idempotency-Key" in headers) == name.startswith("stripe.")


def _missing(name: str) -> str:
    return f"the response has no {name!r}, so the POST cannot be undone automatically"


MISSING: list[Any] = [
    pytest.param(
        "github.close-issue",
        f"{GITHUB}/issues",
        {"id": 1},
        _missing("number"),
        id="github.close-issue-no-number",
    ),
    pytest.param(
        "github.close-issue",
        f"{GITHUB}/issues",
        b"",
        _missing("number"),
        id="github.close-issue-empty-body",
    ),
    pytest.param(
        "github.close-issue",
        f"{GITHUB}/issues",
        [{"number": 1}],
        _missing("number"),
        id="github.close-issue-list-body",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GITHUB}/issues/42/comments",
        {"body": "hi"},
        _missing("id"),
        id="github.delete-comment-no-id",
    ),
    pytest.param(
        "github.delete-comment",
        f"{GITHUB}/issues/42/comments",
        {"url": "https://evil.example.test/x"},
        _missing("id"),
        id="github.delete-comment-foreign-url-no-id",
    ),
    pytest.param(
        "stripe.refund",
        f"{STRIPE}/charges",
        {"object": "charge"},
        _missing("id"),
        id="stripe.refund-no-id",
    ),
    pytest.param(
        "stripe.refund",
        f"{STRIPE}/charges",
        {"id": ""},
        _missing("id"),
        id="stripe.refund-empty-id",
    ),
    pytest.param(
        "stripe.refund",
        f"{STRIPE}/charges",
        {"id": None},
        _missing("id"),
        id="stripe.refund-null-id",
    ),
    pytest.param(
        "slack.delete-message",
        f"{SLACK}/chat.postMessage",
        {"ok": True, "ts": "1401383885.000061"},
        _missing("channel"),
        id="slack.delete-message-no-channel",
    ),
    pytest.param(
        "slack.delete-message",
        f"{SLACK}/chat.postMessage",
        {"ok": True, "channel": "C024BE91L"},
        _missing("ts"),
        id="slack.delete-message-no-ts",
    ),
]


@pytest.mark.parametrize(("name", "url", "response", "reason"), MISSING)
def test_pack_without_what_it_needs_is_irreversible(
    name: str, url: str, response: Any, reason: str
) -> None:
    p, f = step(_rule(name), "POST", url, {"any": "thing"})
    comp = run(p, f, 201, response)
    assert comp["ready"] is False
    assert "method" not in comp
    assert comp["reason"] == reason


@pytest.mark.parametrize("name", sorted(PACKS))
@pytest.mark.parametrize("status", [400, 422, 500])
def test_a_pack_claims_nothing_after_an_error_answer(name: str, status: int) -> None:
    # s3.delete-objects reads its keys from the body before forwarding: give it some.
    body: Any = {"any": "thing"}
    url = f"{GITHUB}/issues"
    if name == "s3.delete-objects":
        body = b"<Delete><Object><Key>a.txt</Key></Object></Delete>"
    if name == "couchdb.bulk-docs":  # it reads the documents named before forwarding
        url, body = "https://couch.example.test/db/_bulk_docs", {"docs": [{"_id": "a"}]}
    p, f = step(_rule(name), "POST", url, body)
    comp = run(p, f, status, {"message": "Validation Failed"})
    # An error answer is no evidence that nothing changed: no "nothing to undo", and no
    # inverse built from an answer that names nothing; rollback decides by reading.
    assert "noop" not in comp and "noop_evidence" not in comp
    assert not comp.get("ready")


def test_a_slack_post_that_failed_inside_a_200_has_nothing_to_undo() -> None:
    from undoproxy.compensators.build import complete
    from undoproxy.compensators.model import Facts, Plan

    plan = Plan("slack.delete-message")
    failed = Facts(
        "POST",
        "https://slack.com/api/chat.postMessage",
        response_status=200,
        response_body=b'{"ok": false, "error": "channel_not_found"}',
    )
    comp = complete(plan, {"kind": plan.kind, "ready": False}, failed)
    assert "channel_not_found" in comp["noop"] and not comp["ready"]
    assert comp["noop_evidence"]["kind"] == "answer"  # Slack's documented refusal
    posted = Facts(
        "POST",
        "https://slack.com/api/chat.postMessage",
        response_status=200,
        response_body=b'{"ok": true, "channel": "C1", "ts": "1.2"}',
    )
    comp = complete(plan, {"kind": plan.kind, "ready": False}, posted)
    assert (comp["method"], comp["url"], comp["expect_ok"]) == (
        "POST",
        "https://slack.com/api/chat.delete",
        True,
    )
