"""API packs: named compensators that know one API's inverse operation.

Each builder takes the step's Facts (after a successful response) and returns the inverse
request, or raises Irreversible saying why it cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

from undoproxy import redact
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, origin
from undoproxy.compensators.model import inverse_request as _request


def _field(facts: Facts, name: str) -> Any:
    body = facts.response_json
    value = body.get(name) if isinstance(body, dict) else None
    if value in (None, ""):
        raise Irreversible(
            f"the response has no {name!r}, so the {facts.method} cannot be undone automatically"
        )
    return value


def github_close_issue(facts: Facts) -> dict[str, Any]:
    """Issues cannot be deleted: PATCH the created issue to closed."""
    number = _field(facts, "number")
    base = facts.url.split("?", 1)[0].rstrip("/")
    return _request("PATCH", f"{base}/{number}", {"state": "closed"})


def github_delete_comment(facts: Facts) -> dict[str, Any]:
    """DELETE the created comment (its API `url`, else .../repos/o/r/issues/comments/{id})."""
    body = facts.response_json
    url = body.get("url") if isinstance(body, dict) else None
    # Only the request's own scheme, host and port: never send the credentials elsewhere.
    if isinstance(url, str) and origin(url) == origin(facts.url):
        return _request("DELETE", url)
    comment_id = _field(facts, "id")
    segments = urlsplit(facts.url).path.split("/")
    if "repos" not in segments or len(segments) < segments.index("repos") + 3:
        raise Irreversible(
            f"{redact.url(facts.url)} is not a repository URL, so the comment's URL is unknown"
        )
    at = segments.index("repos")
    repo = "/".join(segments[: at + 3])  # [/api/v3]/repos/{owner}/{repo}
    return _request("DELETE", urljoin(facts.url, f"{repo}/issues/comments/{comment_id}"))


def stripe_refund(facts: Facts) -> dict[str, Any]:
    """Refund the created charge or payment intent (form-encoded, as Stripe expects)."""
    created = _field(facts, "id")
    kind = "payment_intent" if str(created).startswith("pi_") else "charge"
    return _request(
        "POST",
        urljoin(facts.url, "/v1/refunds"),
        f"{kind}={created}",
        "application/x-www-form-urlencoded",
    )


def slack_delete_message(facts: Facts) -> dict[str, Any]:
    """chat.delete the message chat.postMessage sent.

    Slack answers errors with HTTP 200 and `"ok": false`; rollback checks `ok` on the answer
    to chat.delete (`expect_ok`) so a refused delete is not reported as compensated.
    """
    body = facts.response_json
    if isinstance(body, dict) and body.get("ok") is False:
        raise NothingToUndo(
            f"Slack answered ok: false ({body.get('error', 'no error given')}): "
            "no message was posted"
        )
    channel, ts = _field(facts, "channel"), _field(facts, "ts")
    request = _request(
        "POST", urljoin(facts.url, "/api/chat.delete"), {"channel": channel, "ts": ts}
    )
    request["expect_ok"] = True
    return request


PACK_BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "github.close-issue": github_close_issue,
    "github.delete-comment": github_delete_comment,
    "stripe.refund": stripe_refund,
    "slack.delete-message": slack_delete_message,
}
